package runtime

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// handlerRunner parks the run at step 0 (a scheduled step, payload
// "main"), and in a step marked Cancelled reports the payload it got on
// handlers and ends the run as the runner decides (end).
type handlerRunner struct {
	handlers chan *Step
	end      func(ctx context.Context, s *Step) (StepOutcome, error)
	calls    atomic.Int32
}

func (h *handlerRunner) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	h.calls.Add(1)
	if !s.Cancelled {
		return ContinueAfter([]byte("main"), time.Hour), nil
	}
	h.handlers <- s
	return h.end(ctx, s)
}

func cancelRun(ctx context.Context, _ *Step) (StepOutcome, error) {
	return CancelRun("cancelled after its handlers"), nil
}

// A first Cancel of a run submitted with CancelHandlers does not end it:
// the scheduled step is discarded and the run goes on, at the next step
// number with the discarded step's payload, marked Cancelled; it ends as
// the runner ends it.
func TestCancelGoesToTheHandlers(t *testing.T) {
	h := &handlerRunner{handlers: make(chan *Step, 4), end: cancelRun}
	e := newEnv(t, h)
	e.start()
	e.submit(RunSpec{RunID: "h1", Input: []byte("in"), CancelHandlers: true})
	e.waitRun("h1", inState(runstate.StateScheduled))
	if ok, err := e.rt.Cancel(e.ctx, "h1"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	s := <-h.handlers
	if s.Number != 2 || string(s.Payload) != "main" {
		t.Fatalf("handler step %d with payload %q; want step 2 with the discarded step's payload", s.Number, s.Payload)
	}
	o := e.outcome()
	if o.Status != runstate.Cancelled || o.Error != "cancelled after its handlers" {
		t.Fatalf("outcome %+v; want the runner's cancellation", o)
	}
	if ok, err := e.rt.Cancel(e.ctx, "h1"); ok || err != nil {
		t.Fatalf("Cancel after the end: %v %v", ok, err)
	}
}

// Without CancelHandlers a Cancel ends the run at once, as always.
func TestCancelWithoutHandlersEndsTheRun(t *testing.T) {
	h := &handlerRunner{handlers: make(chan *Step, 4), end: cancelRun}
	e := newEnv(t, h)
	e.start()
	e.submit(RunSpec{RunID: "h0"})
	e.waitRun("h0", inState(runstate.StateScheduled))
	if ok, err := e.rt.Cancel(e.ctx, "h0"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	e.expectState("h0", runstate.StateCancelled)
	if o := e.outcome(); o.Status != runstate.Cancelled || o.Error != "cancelled" {
		t.Fatalf("outcome %+v", o)
	}
	if len(h.handlers) != 0 {
		t.Fatal("a run without handlers ran a Cancelled step")
	}
}

// A Cancel while the handlers run ends the run at once: the handler
// step's context is cancelled, its outcome discarded, and no step runs
// after it.
func TestCancelDuringTheHandlersEndsTheRun(t *testing.T) {
	var handlerCause atomic.Value
	h := &handlerRunner{handlers: make(chan *Step, 4)}
	h.end = func(ctx context.Context, _ *Step) (StepOutcome, error) {
		<-ctx.Done()
		handlerCause.Store(context.Cause(ctx))
		return Succeed([]byte("discarded")), nil
	}
	e := newEnv(t, h)
	e.start()
	e.submit(RunSpec{RunID: "h2", CancelHandlers: true})
	e.waitRun("h2", inState(runstate.StateScheduled))
	if ok, err := e.rt.Cancel(e.ctx, "h2"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	<-h.handlers
	if ok, err := e.rt.Cancel(e.ctx, "h2"); !ok || err != nil {
		t.Fatalf("second Cancel: %v %v", ok, err)
	}
	o := e.outcome()
	if o.Status != runstate.Cancelled || o.Error != "cancelled" {
		t.Fatalf("outcome %+v; want cancelled by the second Cancel", o)
	}
	if c, _ := handlerCause.Load().(error); c != ErrRunCancelled {
		t.Fatalf("handler context cause %v; want ErrRunCancelled", c)
	}
	if n := h.calls.Load(); n != 2 {
		t.Fatalf("runner called %d times; want 2 (the step, the handler)", n)
	}
}

// A Cancel that reaches a running step hands over once the step returns:
// its outcome is discarded and the next step is marked Cancelled.
func TestCancelOfARunningStepGoesToTheHandlers(t *testing.T) {
	g := newGate(t)
	handlers := make(chan *Step, 4)
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		if s.Cancelled {
			handlers <- s
			return Fail("handled"), nil
		}
		g.entered <- s
		<-ctx.Done()
		_ = s.Effects.Put("app/x", []byte("discarded"))
		return ContinueNow([]byte("discarded")), nil
	})
	e := newEnv(t, r)
	e.start()
	e.submit(RunSpec{RunID: "h3", Input: []byte("in"), CancelHandlers: true})
	<-g.entered
	if ok, err := e.rt.Cancel(e.ctx, "h3"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	s := <-handlers
	if s.Number != 1 || string(s.Payload) != "in" {
		t.Fatalf("handler step %d payload %q; want step 1 with the discarded step's payload", s.Number, s.Payload)
	}
	if o := e.outcome(); o.Status != runstate.Failed || o.Error != "handled" {
		t.Fatalf("outcome %+v", o)
	}
	if _, found, _ := (queueKV{e.q}).Get(e.ctx, "app/x"); found {
		t.Fatal("the discarded step's effect was applied")
	}
}

// A crash after the cancel was recorded and before it was handed over:
// the next delivery of the step hands it over itself.
func TestCrashBeforeTheHandOver(t *testing.T) {
	h := &handlerRunner{handlers: make(chan *Step, 4), end: cancelRun}
	e := newEnv(t, h)
	e.submit(RunSpec{RunID: "h4", Input: []byte("in"), CancelHandlers: true})
	rec, err := loadRun(e.ctx, e.q, "h4")
	if err != nil || rec == nil {
		t.Fatalf("run record: %v", err)
	}
	// What Cancel writes first, before it touches the step.
	if err := e.q.KVPut(e.ctx, cancelKey("h4"), []byte(handlersPending+rec.Nonce)); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	e.start()
	s := <-h.handlers
	if s.Number != 1 || string(s.Payload) != "in" {
		t.Fatalf("handler step %d payload %q; want step 1 with step 0's payload", s.Number, s.Payload)
	}
	if o := e.outcome(); o.Status != runstate.Cancelled {
		t.Fatalf("outcome %+v", o)
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("runner called %d times; want once (the handler; step 0 was discarded)", n)
	}
}

// A crash after the hand-over committed and before the handler step ran:
// the restarted worker runs it, marked Cancelled.
func TestCrashAfterTheHandOver(t *testing.T) {
	h := &handlerRunner{handlers: make(chan *Step, 4), end: cancelRun}
	e := newEnv(t, h)
	e.submit(RunSpec{RunID: "h5", Input: []byte("in"), CancelHandlers: true})
	if ok, err := e.rt.Cancel(e.ctx, "h5"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	e.expectState("h5", runstate.StatePending)
	e.reopen()
	e.start()
	if s := <-h.handlers; s.Number != 1 || string(s.Payload) != "in" {
		t.Fatalf("handler step %d payload %q", s.Number, s.Payload)
	}
	if o := e.outcome(); o.Status != runstate.Cancelled {
		t.Fatalf("outcome %+v", o)
	}
}
