package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 1: the outcome table of the README, one row per case.

func TestContinueChainThreadsPayloadAndHeaders(t *testing.T) {
	var seen []string
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		seen = append(seen, fmt.Sprintf("%d:%s:%s:%d", s.Number, s.Payload, s.Headers["tenant"], s.Attempt))
		if _, ok := s.Headers[headerRunID]; ok {
			return StepOutcome{}, Permanent(errors.New("reserved header leaked to the runner"))
		}
		if s.Number == 3 {
			return Succeed(append(s.Payload, '!')), nil
		}
		return ContinueNow(append(s.Payload, byte('a'+s.Number))), nil
	})
	e := newEnv(t, r, Options{Concurrency: 1})
	e.start()
	out := e.submit(RunSpec{RunID: "chain", Input: []byte("x"), Headers: map[string]string{"tenant": "t1"}})
	if !out.NewlySubmitted || out.RunID != "chain" || out.JobID == "" {
		t.Fatalf("submit outcome %+v", out)
	}
	o := e.outcome()
	if o.RunID != "chain" || o.Status != runstate.Succeeded || string(o.Result) != "xabc!" || o.Step != 3 || o.Headers["tenant"] != "t1" {
		t.Fatalf("outcome %+v", o)
	}
	want := []string{"0:x:t1:1", "1:xa:t1:1", "2:xab:t1:1", "3:xabc:t1:1"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("steps %v, want %v", seen, want)
	}
	st := e.expectState("chain", runstate.StateSucceeded)
	if string(st.Result) != "xabc!" || !st.FinishedAt.Equal(t0) {
		t.Fatalf("status %+v", st)
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Dead != 0 || s.Pending != 0 || s.Claimed != 0 {
		t.Fatalf("queue stats %+v", s)
	}
}

func TestStepJobsUseDedupKeys(t *testing.T) {
	g := newGate(t)
	r := steps{
		0: func(context.Context, *Step) (StepOutcome, error) { return ContinueAfter([]byte("p"), time.Hour), nil },
		1: func(_ context.Context, s *Step) (StepOutcome, error) { g.entered <- s; return Succeed(nil), nil },
	}
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "dd"})
	st := e.waitRun("dd", inState(runstate.StateScheduled))
	j, err := e.q.GetJob(e.ctx, st.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.DedupKey != "run:dd:1" || j.Headers[headerStep] != "1" || j.Headers[headerRunID] != "dd" {
		t.Fatalf("step job %+v", j)
	}
	// A second enqueue with the same dedup key is a duplicate.
	res, err := e.q.Enqueue(e.ctx, DefaultQueueName, nil, queue.EnqueueOptions{DedupKey: "run:dd:1"})
	if err != nil || !res.Duplicate || res.ID != st.JobID {
		t.Fatalf("dedup enqueue: %+v %v", res, err)
	}
}

func TestFailAndCancelRunAreVerdictsNotDeadLetters(t *testing.T) {
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		if err := s.Effects.Put("app/"+s.RunID, []byte("seen")); err != nil {
			return StepOutcome{}, err
		}
		if string(s.Payload) == "fail" {
			return Fail("nope"), nil
		}
		return CancelRun("changed my mind"), nil
	})
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "f", Input: []byte("fail")})
	e.submit(RunSpec{RunID: "c", Input: []byte("cancel")})
	got := map[string]*runstate.Outcome{}
	for range 2 {
		o := e.outcome()
		got[o.RunID] = o
	}
	if got["f"].Status != runstate.Failed || got["f"].Error != "nope" {
		t.Fatalf("fail outcome %+v", got["f"])
	}
	if got["c"].Status != runstate.Cancelled || got["c"].Error != "changed my mind" {
		t.Fatalf("cancel outcome %+v", got["c"])
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Dead != 0 {
		t.Fatalf("a verdict dead-lettered: %+v", s)
	}
	for _, id := range []string{"f", "c"} {
		if v, err := e.q.KVGet(e.ctx, "app/"+id); err != nil || string(v) != "seen" {
			t.Fatalf("effects of run %s not applied: %q %v", id, v, err)
		}
	}
	e.expectState("f", runstate.StateFailed)
	e.expectState("c", runstate.StateCancelled)
}

func TestTransientErrorRetriesThenDeadLetters(t *testing.T) {
	var calls atomic.Int32
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		n := calls.Add(1)
		if s.Attempt != int(n) {
			return StepOutcome{}, Permanent(fmt.Errorf("attempt %d on call %d", s.Attempt, n))
		}
		_ = s.Effects.Put("app/never", []byte("x"))
		return StepOutcome{}, fmt.Errorf("flaky %d", n)
	})
	e := newEnv(t, r)
	e.start()
	out := e.submit(RunSpec{RunID: "tr"})
	for attempt := 1; attempt < 3; attempt++ {
		e.waitJob(out.JobID, func(j queue.Job) bool { return j.State == queue.StateScheduled && j.Attempts == attempt })
		st := e.expectState("tr", runstate.StateScheduled)
		if st.LastError != "flaky "+strconv.Itoa(attempt) || st.Attempt != attempt {
			t.Fatalf("status during retry %+v", st)
		}
		e.clock.Advance(time.Minute)
	}
	o := e.outcome()
	if o.Status != runstate.Failed || o.Error != "flaky 3" || calls.Load() != 3 {
		t.Fatalf("outcome %+v after %d calls", o, calls.Load())
	}
	dead, _ := e.q.DeadJobs(e.ctx, DefaultQueueName, "", 10)
	if len(dead) != 1 || dead[0].ID != out.JobID {
		t.Fatalf("dead jobs %+v", dead)
	}
	if _, err := e.q.KVGet(e.ctx, "app/never"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("effects of a failed step applied: %v", err)
	}
	if st := e.expectState("tr", runstate.StateFailed); st.Error != "flaky 3" {
		t.Fatalf("status %+v", st)
	}
}

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	var calls atomic.Int32
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) {
		calls.Add(1)
		return StepOutcome{}, Permanent(errors.New("bad input"))
	})
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "pe"})
	o := e.outcome()
	if o.Status != runstate.Failed || o.Error != "bad input" || calls.Load() != 1 {
		t.Fatalf("outcome %+v after %d calls", o, calls.Load())
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Dead != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestInvalidOutcomeFailsRun(t *testing.T) {
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) { return StepOutcome{}, nil })
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "inv"})
	o := e.outcome()
	if o.Status != runstate.Failed || !bytes.Contains([]byte(o.Error), []byte("invalid step outcome")) {
		t.Fatalf("outcome %+v", o)
	}
}

func TestRunnerPanicIsTransient(t *testing.T) {
	var calls atomic.Int32
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return Succeed([]byte("ok")), nil
	})
	e := newEnv(t, r)
	e.start()
	out := e.submit(RunSpec{RunID: "panic"})
	e.waitJob(out.JobID, func(j queue.Job) bool { return j.State == queue.StateScheduled })
	e.clock.Advance(time.Minute)
	if o := e.outcome(); o.Status != runstate.Succeeded || string(o.Result) != "ok" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestContinueAfterSchedulesByClock(t *testing.T) {
	r := steps{
		0: func(context.Context, *Step) (StepOutcome, error) {
			return ContinueAfter([]byte("later"), 10*time.Minute), nil
		},
		1: func(_ context.Context, s *Step) (StepOutcome, error) { return Succeed(s.Payload), nil },
	}
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "after"})
	st := e.waitRun("after", inState(runstate.StateScheduled))
	if !st.Until.Equal(t0.Add(10*time.Minute)) || st.Step != 1 {
		t.Fatalf("status %+v", st)
	}
	e.clock.Advance(9 * time.Minute)
	e.expectState("after", runstate.StateScheduled)
	e.clock.Advance(time.Minute)
	if o := e.outcome(); string(o.Result) != "later" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestOutcomeConstructors(t *testing.T) {
	cases := []struct {
		o    StepOutcome
		kind outcomeKind
		trig triggerKind
	}{
		{ContinueNow([]byte("a")), outcomeContinue, triggerImmediate},
		{ContinueAfter(nil, time.Second), outcomeContinue, triggerAfter},
		{ContinueOnSignal(nil, "k", time.Second), outcomeContinue, triggerOnSignal},
		{Succeed(nil), outcomeSucceed, 0},
		{Fail("r"), outcomeFail, 0},
		{CancelRun("r"), outcomeCancel, 0},
	}
	for _, c := range cases {
		if c.o.kind != c.kind || c.o.trigger.Kind != c.trig || c.o.validate() != nil {
			t.Errorf("%+v: kind %v trigger %v validate %v", c.o, c.kind, c.trig, c.o.validate())
		}
	}
	for _, bad := range []StepOutcome{{}, ContinueAfter(nil, -1), ContinueOnSignal(nil, "", time.Second), {kind: outcomeContinue}} {
		if !errors.Is(bad.validate(), errInvalidOutcome) {
			t.Errorf("%+v validated", bad)
		}
	}
	if !IsPermanent(fmt.Errorf("wrapped: %w", Permanent(errors.New("x")))) || IsPermanent(Transient(errors.New("x"))) || IsPermanent(errors.New("x")) {
		t.Error("IsPermanent misclassifies")
	}
}

func TestWithMaxAttemptsOverridesQueueConfig(t *testing.T) {
	var calls atomic.Int32
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) {
		calls.Add(1)
		return StepOutcome{}, errors.New("once is enough")
	})
	e := newEnv(t, r, Options{MaxAttempts: 1})
	e.start()
	out := e.submit(RunSpec{RunID: "ma"})
	if o := e.outcome(); o.Status != runstate.Failed || calls.Load() != 1 {
		t.Fatalf("outcome %+v after %d calls", o, calls.Load())
	}
	if j, _ := e.q.GetJob(e.ctx, out.JobID); j.MaxAttempts != 1 || j.State != queue.StateDead {
		t.Fatalf("job %+v", j)
	}
}
