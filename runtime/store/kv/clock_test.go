package kv

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// failingGets fails the first fails GETs with an error a retry may fix.
type failingGets struct {
	objstore.Store
	fails atomic.Int32
}

func (s *failingGets) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, objstore.ObjectInfo{}, errors.New("503 slow down")
	}
	return s.Store.Get(ctx, key)
}

// A failing request is retried after a pause on Options.Clock, and the
// store's health is stamped by it: a Mock drives both.
func TestRetryPausesOnTheClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // failure guard only
	defer cancel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mock := clock.NewMock(start)
	store := &failingGets{Store: mem.New()}
	if _, err := store.Put(ctx, "k", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	store.fails.Store(1)
	o, err := newObjects(store, Options{Clock: mock}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, _, err := o.get(ctx, "k")
		got <- err
	}()
	if err := mock.WaitForTimers(ctx, 1); err != nil {
		t.Fatal("the retry did not pause on the clock:", err)
	}
	if h := o.health.get(); !h.Failing || !h.Since.Equal(start) {
		t.Fatalf("health %+v; want failing since %v (the Mock's time)", h, start)
	}
	select {
	case err := <-got:
		t.Fatalf("the retry went on before the clock moved: %v", err)
	default:
	}
	mock.Advance(time.Second) // past any backoff of the first pause
	if err := <-got; err != nil {
		t.Fatalf("get = %v; want the retry to succeed", err)
	}
	if h := o.health.get(); h.Failing {
		t.Fatalf("health %+v after the retry answered; want not failing", h)
	}
}

// A non-durable commit lingers on Options.Clock: its WAL PUT waits for the
// Mock to pass the linger, however long the linger (an hour here, which on
// the system clock would outlast the test).
func TestLingerRunsOnTheClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // failure guard only
	defer cancel()
	mock := clock.NewMock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := counting.New(mem.New())
	db, err := Open(ctx, store, Options{Clock: mock, Linger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := store.Counts().Puts
	if err := db.UpdateNonDurable(ctx, func(tx *Tx) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := mock.WaitForTimers(ctx, 1); err != nil {
		t.Fatal("the linger was not armed on the clock:", err)
	}
	if n := store.Counts().Puts - before; n != 0 {
		t.Fatalf("%d PUTs before the linger passed; want none", n)
	}
	mock.Advance(time.Hour)
	for store.Counts().Puts == before {
		select {
		case <-ctx.Done():
			t.Fatal("the lingering commit was not written once the clock passed its linger")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
