package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// ErrReadOnly reports a Put or Delete on a store opened read-only;
// nothing was written.
var ErrReadOnly = errors.New("file: the store is opened read-only")

// ErrNoFolder reports that the folder OpenReadOnly was given does not
// exist or is not a folder.
var ErrNoFolder = errors.New("file: no store folder")

// ReadOnly is a file store opened by OpenReadOnly: Get, Head and List
// read the folder exactly as Store does; Put and Delete fail with
// ErrReadOnly. It holds no lock file; it keeps folders (and the segments
// of packed folders) open between calls, as Store does, until Close.
type ReadOnly struct {
	s *Store
}

var _ objstore.Store = (*ReadOnly)(nil)

// OpenReadOnly opens the store rooted at dir for reading only. Unlike
// Open it creates nothing (neither the folder nor its lock files) and
// removes nothing (temp files of dead writers stay for the next writer's
// Open to sweep), so it works on a folder the process may only read. A
// missing folder, or a path that is not a folder, fails with an error
// wrapping ErrNoFolder. Cost: one stat.
func OpenReadOnly(dir string) (*ReadOnly, error) {
	if dir == "" {
		return nil, fmt.Errorf("file: empty folder name: give the folder that holds the store, e.g. .tqw")
	}
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: store folder %q: %w", dir, err)
	}
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoFolder, root)
	case err != nil:
		return nil, fmt.Errorf("file: store folder %q: %w", root, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s is not a folder", ErrNoFolder, root)
	}
	// Reads use only root, log and the caches of open folders; the lock
	// files and the process id serve writes.
	return &ReadOnly{s: &Store{root: root, readOnly: true, log: slog.Default().With("store", "file://"+root)}}, nil
}

// Root returns the absolute folder the store lives in.
func (r *ReadOnly) Root() string { return r.s.root }

// Get implements objstore.Store, as Store.Get.
func (r *ReadOnly) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	return r.s.Get(ctx, key)
}

// Head implements objstore.Store, as Store.Head.
func (r *ReadOnly) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	return r.s.Head(ctx, key)
}

// List implements objstore.Store, as Store.List.
func (r *ReadOnly) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	return r.s.List(ctx, prefix, startAfter, limit)
}

// Put fails with ErrReadOnly.
func (r *ReadOnly) Put(_ context.Context, key string, _ []byte, _ objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, fmt.Errorf("file: put %q: %w", key, ErrReadOnly)
}

// Delete fails with ErrReadOnly.
func (r *ReadOnly) Delete(_ context.Context, key string) error {
	return fmt.Errorf("file: delete %q: %w", key, ErrReadOnly)
}

// Close releases the open folders and segments. The ReadOnly must not be
// used afterwards.
func (r *ReadOnly) Close() error { return r.s.Close() }
