package kv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// A WAL write that fails for good stops the DB: the commit in it reports
// ErrCommitUncertain (it was applied), every later call ErrStopped, and
// Stopped closes.
func TestWALFailureStopsWithSentinels(t *testing.T) {
	ctx := context.Background()
	fs := faults.New(mem.New(), 1)
	db := mustOpen(t, fs, quietOpts())
	defer db.Close()
	put(t, db, "before", "1")
	select {
	case <-db.Stopped():
		t.Fatal("Stopped closed on a healthy DB")
	default:
	}
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "wal/", Nth: 1, Err: objstore.ErrInvalidKey})
	err := db.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("k"), []byte("v")) })
	if !errors.Is(err, ErrCommitUncertain) || !errors.Is(err, ErrStopped) || !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("commit in the failed WAL write = %v; want ErrCommitUncertain, ErrStopped and the cause", err)
	}
	select {
	case <-db.Stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("Stopped not closed after the WAL failure")
	}
	if !errors.Is(db.Err(), ErrStopped) {
		t.Fatalf("Err = %v", db.Err())
	}
	err = db.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("k2"), []byte("v")) })
	if !errors.Is(err, ErrStopped) || errors.Is(err, ErrCommitUncertain) {
		t.Fatalf("commit after the stop = %v; want ErrStopped, not uncertain (nothing was applied)", err)
	}
	if _, err := db.Get(ctx, []byte("before")); !errors.Is(err, ErrStopped) {
		t.Fatalf("Get after the stop = %v", err)
	}
	if err := db.Sync(ctx); !errors.Is(err, ErrStopped) {
		t.Fatalf("Sync after the stop = %v", err)
	}
}

// A conflict was never applied, so it is not uncertain; a commit whose
// wait is abandoned was applied and is.
func TestCommitUncertainOnlyWhenApplied(t *testing.T) {
	ctx := context.Background()
	fs := faults.New(mem.New(), 1)
	db := mustOpen(t, fs, quietOpts())
	defer db.Close()
	tx := db.Begin()
	if _, err := tx.Get(ctx, []byte("c")); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	put(t, db, "c", "other")
	_ = tx.Put([]byte("c"), []byte("mine"))
	if err := tx.Commit(ctx); !errors.Is(err, ErrConflict) || errors.Is(err, ErrCommitUncertain) {
		t.Fatalf("conflicting commit = %v", err)
	}
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "wal/", Rate: 1})
	tx = db.Begin()
	_ = tx.Put([]byte("u"), []byte("1"))
	d, err := tx.CommitAsync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get(ctx, []byte("u")); err != nil || string(v) != "1" {
		t.Fatalf("applied commit not visible: %q %v", v, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = d.Wait(wctx)
	cancel()
	if !errors.Is(err, ErrCommitUncertain) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned wait = %v", err)
	}
	fs.Clear()
	if err := d.Wait(ctx); err != nil {
		t.Fatalf("Wait after the outage: %v", err)
	}
}

// The largest WAL header fits the room a batch reserves for it.
func TestWALHeaderFitsReservedRoom(t *testing.T) {
	var id [batchIDLen]byte
	if n := len(encodeWALHeader(true, ^uint64(0), ^uint64(0), id, 1<<32)); n > walHeaderRoom {
		t.Fatalf("header of %d bytes, room %d", n, walHeaderRoom)
	}
}
