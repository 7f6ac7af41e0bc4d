package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 4: cancellation.

func TestCancelPendingStepTerminatesAtOnce(t *testing.T) {
	var calls atomic.Int32
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) { calls.Add(1); return Succeed(nil), nil })
	e := newEnv(t, r)
	e.submit(RunSpec{RunID: "cp"})
	ok, err := e.rt.Cancel(e.ctx, "cp")
	if err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	// Terminated before any worker ran: the commit that removed the job
	// wrote the terminal state.
	e.expectState("cp", runstate.StateCancelled)
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Pending != 0 {
		t.Fatalf("step job not removed: %+v", s)
	}
	e.start()
	if o := e.outcome(); o.Status != runstate.Cancelled || o.RunID != "cp" {
		t.Fatalf("outcome %+v", o)
	}
	if calls.Load() != 0 {
		t.Fatal("runner ran for a cancelled run")
	}
	if ok, err := e.rt.Cancel(e.ctx, "cp"); ok || err != nil {
		t.Fatalf("second Cancel: %v %v", ok, err)
	}
	if ok, err := e.rt.Cancel(e.ctx, "nope"); ok || err != nil {
		t.Fatalf("Cancel of unknown run: %v %v", ok, err)
	}
}

func TestCancelScheduledStep(t *testing.T) {
	r := steps{0: func(context.Context, *Step) (StepOutcome, error) { return ContinueAfter(nil, time.Hour), nil }}
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "cs"})
	e.waitRun("cs", inState(runstate.StateScheduled))
	if ok, err := e.rt.Cancel(e.ctx, "cs"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	e.expectState("cs", runstate.StateCancelled)
	if o := e.outcome(); o.Status != runstate.Cancelled || o.Step != 1 {
		t.Fatalf("outcome %+v", o)
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Scheduled != 0 {
		t.Fatalf("scheduled job left: %+v", s)
	}
}

func TestCancelRunningStepCancelsContextAndDiscardsOutcome(t *testing.T) {
	g := newGate(t)
	var cause atomic.Value
	var calls atomic.Int32
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		calls.Add(1)
		g.entered <- s
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		<-g.release // returns only when the test says so: Cancelling is observable
		_ = s.Effects.Put("app/x", []byte("discarded"))
		return StepOutcome{}, ctx.Err() // would be a transient retry
	})
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "cr"})
	<-g.entered
	if ok, err := e.rt.Cancel(e.ctx, "cr"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	e.waitRun("cr", inState(runstate.StateCancelling))
	g.open()
	if o := e.outcome(); o.Status != runstate.Cancelled || o.Error != "cancelled" {
		t.Fatalf("outcome %+v", o)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, ErrRunCancelled) {
		t.Fatalf("context cause %v", c)
	}
	if _, err := e.q.KVGet(e.ctx, "app/x"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("effects of an externally cancelled step applied: %v", err)
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Scheduled+s.Pending+s.Dead != 0 || calls.Load() != 1 {
		t.Fatalf("retry not suppressed: %+v, %d calls", s, calls.Load())
	}
}

func TestCancelOverridesSucceedOfRunnerIgnoringContext(t *testing.T) {
	g := newGate(t)
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		g.entered <- s
		<-g.release
		return Succeed([]byte("too late")), nil
	})
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "ig"})
	<-g.entered
	if ok, _ := e.rt.Cancel(e.ctx, "ig"); !ok {
		t.Fatal("Cancel returned false")
	}
	e.expectState("ig", runstate.StateCancelling)
	g.open()
	if o := e.outcome(); o.Status != runstate.Cancelled || o.Result != nil {
		t.Fatalf("outcome %+v", o)
	}
}

// The cancel request is durable and reaches a run this process did not
// submit: a step claimed by a process that then died is not run again.
func TestCancelIsDurableAcrossRestart(t *testing.T) {
	var calls atomic.Int32
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) { calls.Add(1); return Succeed(nil), nil })
	e := newEnv(t, r)
	e.submit(RunSpec{RunID: "dur"})
	// Another worker process claims the step and dies.
	c, err := e.q.Claim(e.ctx, DefaultQueueName)
	if err != nil || c == nil {
		t.Fatalf("claim %v %v", c, err)
	}
	// A fresh Runtime (think: another process's runtime) cancels.
	other, err := New(e.q, e.store, r, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := other.Cancel(e.ctx, "dur"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	e.expectState("dur", runstate.StateCancelling)
	e.reopen()
	e.expectState("dur", runstate.StateCancelling)
	e.start()
	if o := e.outcome(); o.Status != runstate.Cancelled {
		t.Fatalf("outcome %+v", o)
	}
	if calls.Load() != 0 {
		t.Fatalf("runner ran %d times for a cancelled run", calls.Load())
	}
	if _, err := e.q.KVGet(e.ctx, cancelKey("dur")); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("cancel request not cleaned up: %v", err)
	}
}

// A stale cancel request of an earlier run under the same id does not
// cancel a new run.
func TestStaleCancelRequestIgnored(t *testing.T) {
	e := newEnv(t, echo())
	e.start()
	if err := e.q.KVPut(e.ctx, cancelKey("st"), []byte("some-old-nonce")); err != nil {
		t.Fatal(err)
	}
	e.submit(RunSpec{RunID: "st", Input: []byte("v")})
	if o := e.outcome(); o.Status != runstate.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
}

func TestShutdownCancelsStepContext(t *testing.T) {
	g := newGate(t)
	var cause atomic.Value
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		if s.Attempt > 1 {
			return Succeed([]byte("second")), nil
		}
		g.entered <- s
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return StepOutcome{}, ctx.Err()
	})
	e := newEnv(t, r) // Options{ShutdownTimeout: -1}: cancel at once
	e.start()
	out := e.submit(RunSpec{RunID: "sd"})
	<-g.entered
	e.stop()
	if c, _ := cause.Load().(error); !errors.Is(c, ErrShutdown) {
		t.Fatalf("cause %v", c)
	}
	j, _ := e.q.GetJob(e.ctx, out.JobID)
	if j.State != queue.StateScheduled {
		t.Fatalf("interrupted step not retried: %+v", j)
	}
	e.start()
	e.clock.Advance(time.Minute)
	if o := e.outcome(); string(o.Result) != "second" {
		t.Fatalf("outcome %+v", o)
	}
}

// A Cancel that lands after the runner returned but before the step's
// settlement commits wins: the settlement checks the job's cancel request
// in its own transaction, so the outcome is discarded, no next step is
// enqueued and the run ends Cancelled at this step. Without that check the
// settlement would enqueue the next step and the run would stay Cancelling.
func TestCancelBetweenRunnerReturnAndSettlement(t *testing.T) {
	cases := []struct {
		name string
		out  func() (StepOutcome, error)
	}{
		{"continue after", func() (StepOutcome, error) { return ContinueAfter([]byte("next"), time.Hour), nil }},
		{"continue now", func() (StepOutcome, error) { return ContinueNow([]byte("next")), nil }},
		{"continue on signal", func() (StepOutcome, error) { return ContinueOnSignal([]byte("next"), "race:sig", time.Hour), nil }},
		{"succeed", func() (StepOutcome, error) { return Succeed([]byte("too late")), nil }},
		{"fail", func() (StepOutcome, error) { return Fail("too late"), nil }},
		{"permanent error", func() (StepOutcome, error) { return StepOutcome{}, Permanent(errors.New("too late")) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
				calls.Add(1)
				_ = s.Effects.Put("app/x", []byte("discarded"))
				return tc.out()
			})
			e := newEnv(t, r)
			cancelled := make(chan error, 1)
			e.rt.beforeSettleCommit = func(runID string, step int) {
				if runID != "race" || step != 0 {
					return
				}
				ok, err := e.rt.Cancel(e.ctx, runID)
				if err == nil && !ok {
					err = errors.New("Cancel returned false for a run whose step is running")
				}
				cancelled <- err
			}
			e.start()
			e.submit(RunSpec{RunID: "race"})
			// Step 0's settlement either ends the run or moves it on.
			st := e.waitRun("race", func(st runstate.Status) bool { return st.State.Terminal() || st.Step != 0 })
			if st.State != runstate.StateCancelled || st.Step != 0 {
				t.Fatalf("run after step 0 settled: %s at step %d, want cancelled at step 0", st.State, st.Step)
			}
			if err := <-cancelled; err != nil {
				t.Fatalf("Cancel from the hook: %v", err)
			}
			if o := e.outcome(); o.RunID != "race" || o.Status != runstate.Cancelled || o.Step != 0 || o.Error != "cancelled" || o.Result != nil {
				t.Fatalf("outcome %+v, want cancelled at step 0", o)
			}
			if s, err := e.q.Stats(e.ctx, DefaultQueueName); err != nil || s.Pending+s.Scheduled+s.Claimed+s.Dead != 0 {
				t.Fatalf("step queue after the cancel: %+v %v; want no next step", s, err)
			}
			if _, err := e.q.KVGet(e.ctx, "app/x"); !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("effects of the discarded outcome applied: %v", err)
			}
			for _, k := range []string{cancelKey("race"), stepKey("race"), sigWaitKey("race:sig")} {
				if _, err := e.q.KVGet(e.ctx, k); !errors.Is(err, queue.ErrNotFound) {
					t.Fatalf("%s left after the cancel: %v", k, err)
				}
			}
			e.stop()
			if n := calls.Load(); n != 1 {
				t.Fatalf("runner called %d times, want 1", n)
			}
		})
	}
}

// A Cancel racing its run's end reports the run cancelled or already
// ended, never a corrupt record: it reads the run record and the step
// pointer apart, and the end may commit between the two reads (it then
// finds no pointer for a run that no longer exists either).
func TestCancelRacingTheRunsEnd(t *testing.T) {
	runner := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		if s.Number < 1 {
			return ContinueNow(nil), nil
		}
		return Succeed(nil), nil
	})
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), runner, Options{Concurrency: 4, ResultRetention: time.Hour})
	e.start()
	n := 400
	if raceEnabled {
		n = 150
	}
	for i := range n {
		id := fmt.Sprintf("c-%04d", i)
		e.submit(RunSpec{RunID: id})
		if _, err := e.rt.Cancel(e.ctx, id); err != nil {
			t.Fatalf("run %d of %d: Cancel racing the run's end: %v", i+1, n, err)
		}
	}
}
