//go:build invariants || race

package kv

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/internal/invariants"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// A batch handed to the flusher out of commit order (a deliberately broken
// queue) trips the WAL-order invariant instead of reaching the store.
func TestInvariantWALOrderFires(t *testing.T) {
	db := mustOpen(t, mem.New(), quietOpts())
	defer db.Close()
	put(t, db, "a", "1") // the flusher has handed commit 1 to the WAL
	db.mu.Lock()
	defer db.mu.Unlock()
	defer func() {
		var v invariants.Violation
		r := recover()
		if err, ok := r.(error); !ok || !errors.As(err, &v) {
			t.Fatalf("recovered %v; want an invariant violation", r)
		}
		t.Logf("fired as expected: %v", r)
	}()
	// Commit 3 right after commit 1: commit 2 would be missing from the WAL.
	db.checkFlushOrderLocked(&batch{seq: db.nextWAL, first: 3, last: 3})
	t.Fatal("the WAL-order check did not fire")
}
