package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// faultWorkload runs producers and workers until each producer has tried n
// enqueues or the queue fails. It returns the IDs whose enqueue succeeded
// and those whose ack succeeded.
func faultWorkload(ctx context.Context, q *Queue, n int) (enqueued, acked map[string]bool) {
	var mu sync.Mutex
	enqueued, acked = map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				id := fmt.Sprintf("p%d-%d", p, i)
				if _, err := q.Enqueue(ctx, "q", []byte(id), EnqueueOptions{ID: id}); err != nil {
					return
				}
				mu.Lock()
				enqueued[id] = true
				mu.Unlock()
			}
		}()
	}
	wctx, stop := context.WithCancel(ctx)
	var ww sync.WaitGroup
	for range 3 {
		ww.Add(1)
		go func() {
			defer ww.Done()
			for {
				c, err := q.ClaimWait(wctx, "q")
				if err != nil {
					return
				}
				id := string(c.Job.Payload)
				if err := q.Ack(ctx, c, fxEffects(id)); err != nil {
					continue // the queue may be dead; ClaimWait ends the loop
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Let the workers finish what is claimable, then stop them.
	for {
		s, err := q.Stats(ctx, "q")
		if err != nil || s.Pending+s.Scheduled == 0 {
			break
		}
		c, err := q.Claim(ctx, "q")
		if err != nil || c == nil {
			break
		}
		if q.Ack(ctx, c, fxEffects(string(c.Job.Payload))) == nil {
			mu.Lock()
			acked[string(c.Job.Payload)] = true
			mu.Unlock()
		}
	}
	stop()
	ww.Wait()
	return enqueued, acked
}

// verifyAfterFaults reopens the store without faults and checks that every
// reported enqueue and ack survived, with atomic effects.
func verifyAfterFaults(t *testing.T, f *fixture, enqueued, acked map[string]bool) {
	t.Helper()
	ctx := ctxT(t)
	checkInvariants(t, f, "q", "follow")
	checkEffectsAtomic(t, f.q)
	for id := range enqueued {
		_, err := f.q.GetJob(ctx, id)
		if errors.Is(err, ErrNotFound) && !hasKV(t, f.q, "fx/"+id+"/a") {
			t.Fatalf("job %s: enqueue reported success but the job and its ack are gone", id)
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
	}
	for id := range acked {
		if !hasKV(t, f.q, "fx/"+id+"/a") {
			t.Fatalf("job %s: ack reported success but its effects are gone", id)
		}
		if _, err := f.q.GetJob(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("job %s: acked but still present: %v", id, err)
		}
	}
}

// TestLostResponses: WAL PUTs that land but whose response is lost are
// resolved by the kv; the queue sees no error and loses nothing.
func TestLostResponses(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	f := newFixture(t, func(o *Options) { o.DefaultConfig.LeaseDuration = time.Hour })
	f.store = fs
	f.reopen()
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Rate: 0.2, LoseResponse: true})
	enq, acked := faultWorkload(ctxT(t), f.q, 30)
	if len(enq) != 90 || len(acked) != 90 {
		t.Fatalf("with lost responses only: %d enqueues and %d acks succeeded, want 90 each", len(enq), len(acked))
	}
	fs.Clear()
	f.crash()
	verifyAfterFaults(t, f, enq, acked)
}

// TestTransientStoreErrors: failed WAL PUTs are retried by the kv; the
// queue reports no error and loses nothing.
func TestTransientStoreErrors(t *testing.T) {
	fs := faults.New(mem.New(), 3)
	f := newFixture(t, func(o *Options) { o.DefaultConfig.LeaseDuration = time.Hour })
	f.store = fs
	f.reopen()
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Rate: 0.2})
	enq, acked := faultWorkload(ctxT(t), f.q, 30)
	if len(enq) != 90 || len(acked) != 90 {
		t.Fatalf("with transient errors: %d enqueues and %d acks succeeded, want 90 each", len(enq), len(acked))
	}
	fs.Clear()
	f.crash()
	verifyAfterFaults(t, f, enq, acked)
}

// TestStoreOutage: while every WAL PUT fails, a durable call returns its
// context's error, says the change is applied with unknown durability, and
// the change becomes durable once the store is back.
func TestStoreOutage(t *testing.T) {
	fs := faults.New(mem.New(), 4)
	f := newFixture(t, nil)
	f.store = fs
	f.reopen()
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Rate: 1})
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	_, err := f.q.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{ID: "during-outage"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("enqueue during an outage: %v, want context.DeadlineExceeded", err)
	}
	// Applied: visible to this writer and claimable; notifications went out.
	if j := f.job("during-outage"); j.State != StatePending {
		t.Fatalf("%+v", j)
	}
	fs.Clear()
	if err := f.q.DB().Sync(ctxT(t)); err != nil {
		t.Fatalf("sync after the outage: %v", err)
	}
	f.crash()
	if j := f.job("during-outage"); j.State != StatePending {
		t.Fatalf("after the outage and a crash: %+v", j)
	}
}
