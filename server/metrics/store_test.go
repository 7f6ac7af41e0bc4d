package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The wrapper serve and worker --metrics put under the writer keeps the
// file store's packing: a fresh store's WAL folder is packed, so its
// commits go into the folder's log (one data flush each), never into a
// new file per commit as they did when the wrapper hid the capability.
func TestWrapStoreKeepsTheFileStorePacked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	fs, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	q, err := queue.Open(ctx, New().WrapStore(fs), queue.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	const commits = 5
	for i := range commits {
		if err := q.KVPut(ctx, fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	des, err := os.ReadDir(filepath.Join(dir, "queue", "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, de := range des {
		files = append(files, de.Name())
	}
	// The packed folder's only entry is its log (file's logDirName).
	if len(files) != 1 || files[0] != `\log` {
		t.Fatalf("the WAL folder holds %v after %d commits through WrapStore; want only its packed log `\\log`", files, commits)
	}
}

// A wrapped store that cannot pack says so as objstore.Pack expects:
// not packed, no error.
func TestWrapStorePackUnsupported(t *testing.T) {
	packed, err := objstore.Pack(context.Background(), New().WrapStore(mem.New()), "wal/")
	if packed || err != nil {
		t.Fatalf("Pack through WrapStore(mem) = %v, %v; want false, nil", packed, err)
	}
}
