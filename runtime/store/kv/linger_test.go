package kv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

func walPuts(t *testing.T, db *DB) int64 {
	t.Helper()
	return db.Stats().WALPuts
}

// A non-durable commit followed by a durable one within the linger share
// one WAL PUT: a claim and the acknowledgement that follows it cost one.
func TestNonDurableCommitRidesTheNextDurableOne(t *testing.T) {
	opts := quietOpts()
	opts.Linger = time.Hour // only the durable commit may flush
	db := mustOpen(t, mem.New(), opts)
	defer db.Close()
	ctx := context.Background()
	before := walPuts(t, db)
	if err := db.UpdateNonDurable(ctx, func(tx *Tx) error { return tx.Put([]byte("claim"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	if n := walPuts(t, db) - before; n != 0 {
		t.Fatalf("a lone non-durable commit was written at once (%d PUTs); it should linger", n)
	}
	put(t, db, "ack", "1")
	if n := walPuts(t, db) - before; n != 1 {
		t.Fatalf("claim + ack cost %d WAL PUTs; want 1", n)
	}
}

// A lone non-durable commit still reaches the store once the linger
// passed, without anyone calling Sync.
func TestNonDurableCommitFlushedAfterLinger(t *testing.T) {
	store := counting.New(mem.New())
	opts := quietOpts()
	opts.Linger = 5 * time.Millisecond
	db := mustOpen(t, store, opts)
	defer db.Close()
	before := walPuts(t, db)
	if err := db.UpdateNonDurable(context.Background(), func(tx *Tx) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for walPuts(t, db) == before {
		if time.Now().After(deadline) {
			t.Fatal("a non-durable commit never reached the store")
		}
		time.Sleep(time.Millisecond)
	}
	r, err := OpenReader(context.Background(), store, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if v, err := r.Get(context.Background(), []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("reader Get = %q, %v; want v", v, err)
	}
}

// Sync hurries a lingering batch.
func TestSyncEndsTheLinger(t *testing.T) {
	opts := quietOpts()
	opts.Linger = time.Hour
	db := mustOpen(t, mem.New(), opts)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.UpdateNonDurable(ctx, func(tx *Tx) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// Health reports a store that stopped answering while the writer retries,
// and clears when it answers again; the commit waits and then lands.
func TestHealthDuringAnOutage(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	db := mustOpen(t, fs, quietOpts())
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if h := db.Health(); h.Failing {
		t.Fatalf("Health before the outage = %+v", h)
	}
	down := errors.New("connection refused")
	fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: down})
	done := make(chan error, 1)
	go func() { done <- db.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("k"), []byte("v")) }) }()
	if err := fs.WaitInjected(ctx, 3); err != nil {
		t.Fatal(err)
	}
	h := db.Health()
	if !h.Failing || h.Since.IsZero() || !errors.Is(h.LastError, down) || h.Failures < 1 {
		t.Fatalf("Health during the outage = %+v; want failing with %v", h, down)
	}
	fs.Clear()
	if err := <-done; err != nil {
		t.Fatalf("Update after the outage: %v", err)
	}
	if h := db.Health(); h.Failing {
		t.Fatalf("Health after the outage = %+v; want healthy", h)
	}
}
