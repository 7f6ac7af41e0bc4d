package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// Point reads see the state at the transaction's first read: a key changed
// since fails the read with ErrConflict instead of showing the new value.
func TestPointReadOfChangedKeyConflicts(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, mem.New(), quietOpts())
	defer db.Close()
	put(t, db, "a", "1")
	put(t, db, "b", "1")
	tx := db.Begin()
	defer tx.Rollback()
	if v, err := tx.Get(ctx, []byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("Get a = %q, %v", v, err)
	}
	put(t, db, "b", "2") // after the read point
	put(t, db, "c", "new")
	if _, err := tx.Get(ctx, []byte("b")); !errors.Is(err, ErrConflict) {
		t.Fatalf("read of a key changed after the read point = %v; want ErrConflict", err)
	}
	if v, err := tx.Get(ctx, []byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("unchanged key: %q, %v", v, err)
	}
}

// A scan after point reads moves the read point forward when nothing read
// changed, and conflicts when something did.
func TestScanAfterPointReads(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, mem.New(), quietOpts())
	defer db.Close()
	put(t, db, "k1", "1")
	tx := db.Begin()
	if _, err := tx.Get(ctx, []byte("k1")); err != nil {
		t.Fatal(err)
	}
	put(t, db, "k2", "2") // not read by tx
	var keys []string
	err := tx.Scan(ctx, PrefixRange([]byte("k")), func(k, _ []byte) (bool, error) {
		keys = append(keys, string(k))
		return true, nil
	})
	if err != nil || len(keys) != 2 {
		t.Fatalf("scan = %v, %v; want k1 k2 at the moved read point", keys, err)
	}
	_ = tx.Put([]byte("k3"), []byte("3"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	tx = db.Begin()
	defer tx.Rollback()
	if _, err := tx.Get(ctx, []byte("k1")); err != nil {
		t.Fatal(err)
	}
	put(t, db, "k1", "changed")
	err = tx.Scan(ctx, PrefixRange([]byte("k")), func(k, _ []byte) (bool, error) { return true, nil })
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("scan after a read key changed = %v; want ErrConflict", err)
	}
}

// Read-modify-write transactions under contention lose no update: reads
// without a tree snapshot keep transactions serializable.
func TestReadModifyWriteIsSerializable(t *testing.T) {
	ctx := context.Background()
	opts := quietOpts()
	opts.ConflictRetries = 100000
	db := mustOpen(t, mem.New(), opts)
	defer db.Close()
	const workers, each = 8, 150
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := db.UpdateNonDurable(ctx, func(tx *Tx) error {
					var n uint64
					if v, err := tx.Get(ctx, []byte("n")); err == nil {
						n = binary.BigEndian.Uint64(v)
					} else if !errors.Is(err, ErrNotFound) {
						return err
					}
					return tx.Put([]byte("n"), binary.BigEndian.AppendUint64(nil, n+1))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err := db.Get(ctx, []byte("n"))
	if err != nil || binary.BigEndian.Uint64(v) != workers*each {
		t.Fatalf("counter = %x, %v; want %d", v, err, workers*each)
	}
}
