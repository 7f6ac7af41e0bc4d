package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// An idle Work returns as soon as its store stops after a WAL failure,
// with an error callers can match, instead of waiting for work forever.
// With Concurrency 1 the one worker is known to be waiting when the store
// fails.
func TestWorkReturnsWhenStoreStops(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	f := &fixture{t: t, store: fs, clock: clock.NewMock(t0)}
	f.opts = Options{Clock: f.clock, SweepInterval: -1, Logger: quietLogger()}
	f.open()
	t.Cleanup(func() { _ = f.q.Close() })
	ctx := ctxT(t)
	idle := make(chan struct{}, 2)
	hook := func(string) {
		select {
		case idle <- struct{}{}:
		default:
		}
	}
	f.q.idleHook.Store(&hook)
	done := make(chan error, 1)
	go func() {
		done <- f.q.Work(ctx, "q", WorkerOptions{Concurrency: 1}, func(context.Context, *Claim) error { return nil })
	}()
	<-idle // a worker waits for work
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Rate: 1, Err: objstore.ErrInvalidKey})
	err := f.q.KVPut(ctx, "k", []byte("v"))
	if !errors.Is(err, kv.ErrStopped) || !errors.Is(err, kv.ErrCommitUncertain) {
		t.Fatalf("KVPut in the failed WAL write = %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kv.ErrStopped) {
			t.Fatalf("Work = %v; want kv.ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Work still waiting for work on a stopped store")
	}
	if _, err := f.q.Enqueue(ctx, "q", nil, EnqueueOptions{}); !errors.Is(err, kv.ErrStopped) {
		t.Fatalf("Enqueue on a stopped store = %v", err)
	}
}
