package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 3: the worker: queue name and its QueueConfig, concurrency,
// graceful shutdown.

func TestWorkerQueueNameConfigAndConcurrency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := clock.NewMock(t0)
	store := mem.New()
	q, err := queue.Open(ctx, store, queue.Options{Clock: clock, Logger: quietLogger(), SweepInterval: -1,
		QueueConfigs: map[string]queue.QueueConfig{"agent-runs": {KeepDoneJobs: 24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	g := newGate(t)
	var running, peak atomic.Int32
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		g.entered <- s
		<-g.release
		running.Add(-1)
		if s.Number == 0 {
			return ContinueNow(nil), nil
		}
		return Succeed(nil), nil
	})
	rt, err := New(q, store, r, Options{QueueName: "agent-runs", Concurrency: 3, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	w := rt.Spawn(ctx)
	for i := range 5 {
		if _, err := rt.Submit(ctx, RunSpec{RunID: "r" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		<-g.entered
	}
	if s, _ := q.Stats(ctx, "agent-runs"); s.Claimed != 3 || s.Pending != 2 {
		t.Fatalf("with 3 slots busy: %+v", s)
	}
	g.open()
	for range 7 { // 10 steps in all, 3 seen
		<-g.entered
	}
	for {
		if s, _ := q.Stats(ctx, "agent-runs"); s.Done == 10 {
			break // KeepDoneJobs of the step queue's config applies
		}
		if ctx.Err() != nil {
			t.Fatal("steps not retained as done")
		}
		yield()
	}
	if peak.Load() != 3 {
		t.Fatalf("peak concurrency %d", peak.Load())
	}
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestGracefulShutdownLetsRunningStepFinish(t *testing.T) {
	g := newGate(t)
	var cancelled atomic.Bool
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		g.entered <- s
		<-g.release
		cancelled.Store(ctx.Err() != nil)
		return Succeed([]byte("finished")), nil
	})
	e := newEnv(t, r, Options{ShutdownTimeout: time.Hour})
	e.start()
	e.submit(RunSpec{RunID: "gs"})
	<-g.entered
	w := e.w
	e.w = nil
	done := make(chan error, 1)
	go func() { done <- w.Shutdown(e.ctx) }()
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cancelled.Load() {
		t.Fatal("step context cancelled within the shutdown timeout")
	}
	e.expectState("gs", runstate.StateSucceeded)
}

func TestRunReturnsWhenQueueCloses(t *testing.T) {
	e := newEnv(t, echo())
	done := make(chan error, 1)
	go func() { done <- e.rt.Run(e.ctx) }()
	_ = e.q.Close()
	if err := <-done; !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
}

// Item 9: time injection.
func TestRuntimeInheritsQueueClockUnlessOverridden(t *testing.T) {
	r := steps{0: func(context.Context, *Step) (StepOutcome, error) { return ContinueAfter(nil, time.Hour), nil }}
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "inherit"})
	st := e.waitRun("inherit", inState(runstate.StateScheduled))
	if !st.SubmittedAt.Equal(t0) || !st.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("inherited clock: %+v", st)
	}
	e.stop()

	other := clock.NewMock(t0.Add(24 * time.Hour))
	rt2, err := New(e.q, e.store, r, Options{Clock: other, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	w := rt2.Spawn(e.ctx)
	defer w.Shutdown(e.ctx)
	if _, err := rt2.Submit(e.ctx, RunSpec{RunID: "override"}); err != nil {
		t.Fatal(err)
	}
	st = e.waitRun("override", inState(runstate.StateScheduled))
	if !st.SubmittedAt.Equal(t0.Add(24*time.Hour)) || !st.Until.Equal(t0.Add(25*time.Hour)) {
		t.Fatalf("overridden clock: %+v", st)
	}
}

// Runs survive close and reopen at every stage.
func TestRunsSurviveReopenAtEveryStage(t *testing.T) {
	var hold atomic.Bool
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		switch string(s.Payload) {
		case "sleep":
			return ContinueAfter([]byte("slept"), time.Hour), nil
		case "wait":
			return ContinueOnSignal([]byte("waited"), "sig-"+s.RunID, 2*time.Hour), nil
		}
		if hold.Load() {
			return StepOutcome{}, errors.New("not yet")
		}
		return Succeed(append(s.Payload, s.Signal...)), nil
	})
	e := newEnv(t, r)
	// running: claimed by a worker that dies.
	e.submit(RunSpec{RunID: "running", Input: []byte("r")})
	if c, err := e.q.Claim(e.ctx, DefaultQueueName); err != nil || c == nil || c.Job.Headers[headerRunID] != "running" {
		t.Fatalf("claim: %v %v", c, err)
	}
	e.expectState("running", runstate.StateRunning)
	// pending: submitted, never claimed.
	e.submit(RunSpec{RunID: "pending", Input: []byte("p")})
	// notification pending: cancelled with no worker running.
	e.submit(RunSpec{RunID: "notify", Input: []byte("n")})
	if ok, _ := e.rt.Cancel(e.ctx, "notify"); !ok {
		t.Fatal("cancel")
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Pending != 1 || s.Claimed != 1 {
		t.Fatalf("stats %+v", s)
	}
	if s, _ := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); s.Pending != 1 {
		t.Fatalf("notify stats %+v", s)
	}
	e.reopen()
	e.expectState("pending", runstate.StatePending)
	e.expectState("notify", runstate.StateCancelled)
	e.expectState("running", runstate.StatePending)

	// scheduled and waiting need a worker to get there.
	hold.Store(true)
	e.start()
	e.submit(RunSpec{RunID: "scheduled", Input: []byte("sleep")})
	e.submit(RunSpec{RunID: "waiting", Input: []byte("wait")})
	e.waitRun("scheduled", func(st runstate.Status) bool { return st.State == runstate.StateScheduled && st.Step == 1 })
	e.waitRun("waiting", inState(runstate.StateWaiting))
	e.stop()
	e.reopen()
	hold.Store(false)
	e.start()
	if _, err := e.rt.Signal(e.ctx, "sig-waiting", []byte("+sig")); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	got := map[string]string{}
	for len(got) < 5 {
		o := e.outcome()
		got[o.RunID] = o.Status.String() + ":" + string(o.Result)
	}
	want := map[string]string{"pending": "succeeded:p", "notify": "cancelled:", "running": "succeeded:r",
		"scheduled": "succeeded:slept", "waiting": "succeeded:waited+sig"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("run %s: %s, want %s", k, got[k], v)
		}
	}
}

// Run returns promptly, with kv.ErrStopped, once the store stops after a
// failed WAL write, instead of retrying claims with warnings.
func TestRunReturnsWhenStoreStops(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	e := newEnvCfg(t, fs, defaultQueueConfig(), echo())
	done := make(chan error, 1)
	go func() { done <- e.rt.Run(e.ctx) }()
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Rate: 1, Err: objstore.ErrInvalidKey})
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "lost"}); !errors.Is(err, kv.ErrStopped) {
		t.Fatalf("Submit = %v; want kv.ErrStopped", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kv.ErrStopped) {
			t.Fatalf("Run = %v; want kv.ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the store stopped")
	}
}

// runWithEverySlotBusy runs Run on store with one worker slot, no
// terminal hook (so no notification loop) and a step that holds the slot
// until its context ends, and returns once that step runs: done receives
// Run's error, cancelled is closed when the step was cancelled.
func runWithEverySlotBusy(t *testing.T, store objstore.Store) (e *env, done chan error, cancelled chan struct{}) {
	t.Helper()
	started := make(chan struct{})
	cancelled = make(chan struct{})
	runner := StepRunnerFunc(func(ctx context.Context, _ *Step) (StepOutcome, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return StepOutcome{}, ctx.Err()
	})
	e = newEnvCfg(t, store, defaultQueueConfig(), runner, Options{Concurrency: 1, TerminalHook: noopTerminalHook{}})
	done = make(chan error, 1)
	go func() { done <- e.rt.Run(e.ctx) }()
	e.submit(RunSpec{RunID: "busy"})
	<-started
	return e, done, cancelled
}

// A store that stops ends Run at once and cancels the running steps also
// when no claim is waiting to notice it: every worker slot is busy and
// no terminal hook runs a notification loop (issue 23).
func TestRunReturnsWhenStoreStopsWithEverySlotBusy(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	e, done, cancelled := runWithEverySlotBusy(t, fs)
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Rate: 1, Err: objstore.ErrInvalidKey})
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "lost"}); !errors.Is(err, kv.ErrStopped) {
		t.Fatalf("Submit = %v; want kv.ErrStopped", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kv.ErrStopped) {
			t.Fatalf("Run = %v; want kv.ErrStopped", err)
		}
	case <-e.ctx.Done():
		t.Fatal("Run did not return after the store stopped while its only slot was busy")
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("Run returned without cancelling the running step")
	}
}
