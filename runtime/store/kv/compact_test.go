package kv

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// heapAlloc returns the live heap after collecting garbage.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestReopenKeepsOnlyLiveBytes: a store whose WAL since the checkpoint
// mostly wrote keys deleted later keeps, after a reopen, the live keys
// and values in memory, not the WAL objects they were replayed from.
func TestReopenKeepsOnlyLiveBytes(t *testing.T) {
	ctx := context.Background()
	s, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := mustOpen(t, s, quietOpts())
	const commits, perCommit, valueSize = 200, 50, 1000
	value := bytes.Repeat([]byte("v"), valueSize)
	for c := range commits {
		err := db.Update(ctx, func(tx *Tx) error {
			for i := range perCommit {
				if err := tx.Put(fmt.Appendf(nil, "k/%04d/%03d", c, i), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Keep one key of each commit.
		err = db.Update(ctx, func(tx *Tx) error {
			for i := 1; i < perCommit; i++ {
				if err := tx.Delete(fmt.Appendf(nil, "k/%04d/%03d", c, i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := heapAlloc()
	db = mustOpen(t, s, quietOpts())
	defer db.Close()
	grew := int64(heapAlloc()) - int64(before)
	// Live: 200 keys of ~1 KB. Replayed: 10 MB of WAL.
	const bound = 2 << 20
	if grew > bound {
		t.Fatalf("heap grew %d bytes at reopen, want at most %d: the WAL's bytes stay reachable", grew, bound)
	}
	if v, ok := get(t, db, "k/0199/000"); !ok || len(v) != valueSize {
		t.Fatalf("k/0199/000 = %d bytes, %v after reopen", len(v), ok)
	}
	if _, ok := get(t, db, "k/0199/001"); ok {
		t.Fatal("a deleted key is back after reopen")
	}
}
