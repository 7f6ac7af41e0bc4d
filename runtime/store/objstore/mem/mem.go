package mem

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// DefaultListLimit is the page size List uses when the caller gives none.
const DefaultListLimit = 1000

type object struct {
	data []byte
	info objstore.ObjectInfo
}

// Store is an in-memory objstore.Store. The zero value is not usable; call New.
type Store struct {
	mu      sync.Mutex
	objects map[string]object
	keys    []string // sorted; kept in step with objects
	version uint64
	now     func() time.Time
}

var _ objstore.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{objects: make(map[string]object), now: time.Now}
}

var (
	namedMu sync.Mutex
	named   = map[string]*Store{}
)

// Named returns the process-wide store with that name, creating it empty on
// first use. mem://NAME URLs resolve through it.
func Named(name string) *Store {
	namedMu.Lock()
	defer namedMu.Unlock()
	s, ok := named[name]
	if !ok {
		s = New()
		named[name] = s
	}
	return s
}

func checkCtx(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: %s %q: %w", op, key, err)
	}
	return nil
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	if err := checkCtx(ctx, "get", key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("mem: get %q: %w", key, objstore.ErrNotExist)
	}
	return append([]byte(nil), o.data...), o.info, nil
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := checkCtx(ctx, "head", key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: head %q: %w", key, objstore.ErrNotExist)
	}
	return o.info, nil
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := opts.Validate(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := checkCtx(ctx, "put", key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.objects[key]
	if opts.IfNoneMatch && exists {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: put %q: object exists: %w", key, objstore.ErrPrecondition)
	}
	if opts.IfMatch != "" && (!exists || cur.info.ETag != opts.IfMatch) {
		return objstore.ObjectInfo{}, fmt.Errorf("mem: put %q: etag mismatch: %w", key, objstore.ErrPrecondition)
	}
	s.version++
	info := objstore.ObjectInfo{
		Key:     key,
		Size:    int64(len(data)),
		ETag:    `"` + strconv.FormatUint(s.version, 16) + `"`,
		ModTime: s.now(),
	}
	if !exists {
		i := sort.SearchStrings(s.keys, key)
		s.keys = append(s.keys, "")
		copy(s.keys[i+1:], s.keys[i:])
		s.keys[i] = key
	}
	s.objects[key] = object{data: append([]byte(nil), data...), info: info}
	return info, nil
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if err := checkCtx(ctx, "delete", key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; !ok {
		return nil
	}
	delete(s.objects, key)
	i := sort.SearchStrings(s.keys, key)
	s.keys = append(s.keys[:i], s.keys[i+1:]...)
	return nil
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if err := checkCtx(ctx, "list", prefix); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > DefaultListLimit {
		limit = DefaultListLimit
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	from := prefix
	if startAfter >= from {
		from = startAfter + "\x00"
	}
	var out []objstore.ObjectInfo
	for i := sort.SearchStrings(s.keys, from); i < len(s.keys) && len(out) < limit; i++ {
		k := s.keys[i]
		if !strings.HasPrefix(k, prefix) {
			break
		}
		out = append(out, s.objects[k].info)
	}
	return out, nil
}

// Len returns the number of objects stored (for tests).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}
