package runtime

import (
	"context"
	"fmt"
	stdruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// waitingRunner parks every run at step 0: even runs wait for a signal,
// odd ones sleep, both for a day.
func waitingRunner() StepRunner {
	return StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		if s.Number > 0 {
			return Succeed(nil), nil
		}
		if s.RunID[len(s.RunID)-1]%2 == 0 {
			return ContinueOnSignal(nil, "sig-"+s.RunID, 24*time.Hour), nil
		}
		return ContinueAfter(nil, 24*time.Hour), nil
	})
}

// idleMinute advances the mock clock one minute in steps of a second,
// letting the worker's loops (reconcile, sweep, reaper) react to each,
// then flushes what they may have committed, and returns the requests
// the store saw meanwhile.
func idleMinute(t testing.TB, e *env, cs *counting.Store) counting.Counts {
	t.Helper()
	if err := e.q.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	before := cs.Counts()
	for range 60 {
		e.clock.Advance(time.Second)
		for range 50 {
			yield()
		}
	}
	if err := e.q.Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	return cs.Counts().Sub(before)
}

func heapInUse() uint64 {
	stdruntime.GC()
	var m stdruntime.MemStats
	stdruntime.ReadMemStats(&m)
	return m.HeapAlloc
}

// parkRuns submits n runs from 32 goroutines and waits until every one
// waits (its step 0 settled).
func parkRuns(t testing.TB, e *env, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 32 {
				if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: fmt.Sprintf("w-%07d", i), Input: []byte("x")}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	for {
		s, err := e.q.Stats(e.ctx, DefaultQueueName)
		if err == nil && s.Scheduled == int64(n) {
			return
		}
		if e.ctx.Err() != nil {
			t.Fatalf("%d of %d runs parked (err %v)", s.Scheduled, n, err)
		}
		yield()
	}
}

// Waiting runs cost nothing while they wait: an idle writer holding
// 10,000 of them (half on signals, half on timers; 2,000 under the race
// detector, which makes parking them ten times slower) makes exactly the
// requests it makes holding none. BenchmarkWaitingRuns holds 100,000.
func TestWaitingRunsAddNoRequests(t *testing.T) {
	n := 10_000
	if raceEnabled {
		n = 2_000
	}
	idle, busy, perRun := waitingRuns(t, n, mem.New())
	if busy != idle {
		t.Fatalf("an idle minute with %d waiting runs cost %+v; with none %+v", n, busy, idle)
	}
	t.Logf("an idle minute: %+v requests with none or %d waiting runs; %.0f bytes of heap per waiting run", idle, n, perRun)
}

// BenchmarkWaitingRuns reports the requests an idle writer makes in a
// minute holding 100,000 waiting runs, beyond those it makes holding
// none, and the heap per waiting run: on the mem store, whose heap also
// holds the WAL's bytes, and on a file store, where the heap is the
// runs' state alone.
func BenchmarkWaitingRuns(b *testing.B) {
	for _, kind := range []string{"mem", "file"} {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				var store objstore.Store = mem.New()
				if kind == "file" {
					fs, err := file.Open(b.TempDir())
					if err != nil {
						b.Fatal(err)
					}
					store = fs
				}
				idle, busy, perRun := waitingRuns(b, 100_000, store)
				extra := busy.Sub(idle)
				b.ReportMetric(float64(extra.Total()), "extra-requests/min")
				b.ReportMetric(perRun, "heap-B/waiting-run")
			}
		})
	}
}

func waitingRuns(t testing.TB, n int, store objstore.Store) (idle, busy counting.Counts, perRun float64) {
	cs := counting.New(store)
	e := newEnvCfg(t, cs, defaultQueueConfig(), waitingRunner(), Options{TerminalHook: noopTerminalHook{}, Concurrency: 32})
	e.start()
	// The kv collects crashed writers' leftovers once after opening (3
	// LISTs): the minute after is the idle writer's steady state.
	idleMinute(t, e, cs)
	idle = idleMinute(t, e, cs)
	heap := heapInUse()
	parkRuns(t, e, n)
	perRun = float64(int64(heapInUse())-int64(heap)) / float64(n)
	// Parking wrote thousands of WAL objects; the checkpoint they set off
	// deletes them, in the background, perhaps inside the measured minute.
	// That cost is the writes', not the waiting's: pay it first (this
	// waits for a checkpoint already running, then writes one).
	if err := e.q.DB().Checkpoint(e.ctx); err != nil {
		t.Fatal(err)
	}
	busy = idleMinute(t, e, cs)
	return idle, busy, perRun
}
