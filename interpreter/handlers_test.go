package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// note is an action that records its with (by step) and returns it; a
// with of {fail: true} fails it.
type note struct {
	mu    sync.Mutex
	calls map[string][]map[string]any
	// entered receives the step of each call, once it started.
	entered chan string
	// hold makes the named step wait for its context to end.
	hold string
}

func newNote() *note {
	return &note{calls: map[string][]map[string]any{}, entered: make(chan string, 100)}
}

func (*note) Name() string                { return "note" }
func (*note) WithSchema() json.RawMessage { return nil }
func (n *note) Execute(ctx context.Context, c *actions.Call) (any, error) {
	n.mu.Lock()
	n.calls[c.StepID] = append(n.calls[c.StepID], c.Args)
	n.mu.Unlock()
	n.entered <- c.StepID
	if c.StepID == n.hold {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f, _ := c.Args["fail"].(bool); f {
		return nil, &actions.Error{Type: "custom.refused", Message: "note refused"}
	}
	return c.Args, nil
}

// seen returns the withs step ran with.
func (n *note) seen(step string) []map[string]any {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[step]
}

// wantSeen checks step ran once and that its with's key k was want.
func (n *note) wantSeen(t *testing.T, step, k, want string) {
	t.Helper()
	calls := n.seen(step)
	if len(calls) != 1 {
		t.Fatalf("step %s ran %d times; want once", step, len(calls))
	}
	if got := fmt.Sprint(calls[0][k]); got != want {
		t.Fatalf("step %s: %s = %q; want %q", step, k, got, want)
	}
}

const handlersYAML = `
tqw: v1
name: handlers
input: {type: object, properties: {fail: {type: boolean}}}
steps:
  - id: work
    action: note
    with: {fail: "${ input.fail ?? false }"}
  - id: done
    succeed: worked
on_error:
  - id: undo
    action: note
    with: {what: "${ run.outcome } ${ error.type } at ${ error.step }: ${ error.message }"}
finally:
  - id: tell
    action: note
    with: {what: "${ run.outcome }"}
`

// A failed run runs on_error, then finally, reading its error and
// outcome, and ends failed with its own error.
func TestFailureRunsOnErrorThenFinally(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("h.yaml", handlersYAML)
	o := e.run(p, map[string]any{"fail": true}, "r1")
	wantFailed(t, o, "step work: custom.refused: note refused")
	e.wantHistory("r1", "work:failed undo:succeeded tell:succeeded")
	n.wantSeen(t, "undo", "what", "failed custom.refused at work: note refused")
	n.wantSeen(t, "tell", "what", "failed")
}

// A succeeded run runs finally only, and keeps its result.
func TestSuccessRunsFinallyOnly(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("h.yaml", handlersYAML)
	o := e.run(p, map[string]any{}, "r1")
	wantSucceeded(t, o, `"worked"`)
	e.wantHistory("r1", "work:ok done:succeeded tell:succeeded")
	if len(n.seen("undo")) != 0 {
		t.Fatal("on_error ran after a success")
	}
	n.wantSeen(t, "tell", "what", "succeeded")
}

// A failing handler is recorded and does not hide the outcome: the run
// fails with its own error (the handler's appended), finally still runs
// after a failed on_error, and a failed finally leaves a success a
// success.
func TestHandlerFailureKeepsTheOutcome(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("h.yaml", `
tqw: v1
name: handlers
input: {type: object, properties: {fail: {type: boolean}}}
steps:
  - id: work
    action: note
    with: {fail: "${ input.fail ?? false }"}
  - id: done
    succeed: worked
on_error:
  - id: undo
    action: note
    with: {fail: true}
  - id: never
    action: note
finally:
  - id: tell
    action: note
    with: {fail: true}
`)
	o := e.run(p, map[string]any{"fail": true}, "r1")
	wantFailedWith(t, o, "step work: custom.refused: note refused (handler failed: on_error: step undo: custom.refused: note refused; finally: step tell: custom.refused")
	e.wantHistory("r1", "work:failed undo:failed tell:failed")
	if len(n.seen("never")) != 0 {
		t.Fatal("on_error went on after its failed step")
	}
	o = e.run(p, map[string]any{}, "r2")
	wantSucceeded(t, o, `"worked"`)
	e.wantHistory("r2", "work:ok done:succeeded tell:failed")
}

// The run deadline cuts a wait_signal and runs on_error with timed_out;
// the run fails with run.timeout. The handler is not bound by the run's
// deadline.
func TestRunTimeoutRunsOnError(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("t.yaml", `
tqw: v1
name: deadline
timeout: 1h
steps:
  - id: ask
    action: wait_signal
    with: {timeout: 1d}
    on_timeout: late
  - id: late
    succeed: late
on_error:
  - id: pause
    action: sleep
    with: {duration: 10m}
  - id: undo
    action: note
    with: {what: "${ run.outcome } ${ error.type } at ${ error.step }"}
`)
	ch := e.submitUntil(p, nil, "r1", "ask", OutcomeWaiting)
	e.clock.Advance(time.Hour)
	e.waitEvent("pause", OutcomeWaiting)
	e.clock.Advance(10 * time.Minute)
	wantRunTimeout(t, e, e.await(ch), "undo", "ask")
	e.wantHistory("r1", "ask:waiting ask:failed pause:waiting pause:ok undo:succeeded")
	n.wantSeen(t, "undo", "what", "timed_out run.timeout at ask")
}

// A handler block is bounded by HandlerTimeout: past it the block fails
// with run.timeout, finally runs, and the run keeps its own outcome.
func TestHandlerTimeout(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("t.yaml", `
tqw: v1
name: slow-handler
steps:
  - id: work
    fail: broken
on_error:
  - id: pause
    action: sleep
    with: {duration: 1d}
finally:
  - id: tell
    action: note
    with: {what: "${ run.outcome } ${ error.message }"}
`)
	ch := e.submitUntil(p, nil, "r1", "pause", OutcomeWaiting)
	e.clock.Advance(HandlerTimeout)
	o := e.await(ch)
	wantFailedWith(t, o, "broken (handler failed: on_error: step pause: run.timeout: the on_error handler did not end within 15m")
	e.wantHistory("r1", "work:failed pause:waiting pause:failed tell:succeeded")
	n.wantSeen(t, "tell", "what", "failed broken")
}

// Cancelling a run during a step discards the step and runs the handlers
// with run.outcome cancelled; the run ends cancelled.
func TestCancelDuringAStepRunsTheHandlers(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("c.yaml", `
tqw: v1
name: cancel
steps:
  - id: nap
    action: sleep
    with: {duration: 1d}
on_error:
  - id: undo
    action: note
    with: {what: "${ run.outcome } ${ error.type } at ${ error.step }"}
finally:
  - id: tell
    action: note
    with: {what: "${ run.outcome }"}
`)
	ch := e.submitUntil(p, nil, "r1", "nap", OutcomeWaiting)
	if ok, err := e.rt.Cancel(e.ctx, "r1"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	o := e.await(ch)
	if o.Status != runstate.Cancelled {
		t.Fatalf("outcome %s %q; want cancelled", o.Status, o.Error)
	}
	e.wantHistory("r1", "nap:waiting nap:cancelled undo:succeeded tell:succeeded")
	n.wantSeen(t, "undo", "what", "cancelled cancelled at nap")
	n.wantSeen(t, "tell", "what", "cancelled")
}

// A cancel while a handler runs ends the run at once: the handler's step
// is discarded and no handler is entered again, whether the handlers run
// for a cancel or for a failure.
func TestCancelDuringAHandlerEndsTheRun(t *testing.T) {
	for _, first := range []string{"cancel", "failure"} {
		t.Run(first, func(t *testing.T) {
			n := newNote()
			n.hold = "undo"
			e := newTestEnv(t, withActions(n))
			defer e.close()
			p := e.write("c.yaml", `
tqw: v1
name: cancel
input: {type: object, properties: {fail: {type: boolean}}}
steps:
  - id: nap
    switch:
      - when: input.fail
        next: broken
  - id: wait
    action: sleep
    with: {duration: 1d}
  - id: broken
    fail: broken
on_error:
  - id: undo
    action: note
finally:
  - id: tell
    action: note
`)
			ch := e.submit(p, map[string]any{"fail": first == "failure"}, "r1")
			e.start()
			if first == "cancel" {
				e.waitEvent("wait", OutcomeWaiting)
				if ok, err := e.rt.Cancel(e.ctx, "r1"); !ok || err != nil {
					t.Fatalf("first Cancel: %v %v", ok, err)
				}
			}
			for s := range n.entered {
				if s == "undo" {
					break
				}
			}
			if ok, err := e.rt.Cancel(e.ctx, "r1"); !ok || err != nil {
				t.Fatalf("Cancel during the handler: %v %v", ok, err)
			}
			o := e.await(ch)
			if o.Status != runstate.Cancelled {
				t.Fatalf("outcome %s %q; want cancelled", o.Status, o.Error)
			}
			if first == "failure" && !strings.Contains(o.Error, "cancelled while its on_error handler ran (the run had failed: broken)") {
				t.Fatalf("error %q; want it to say what the handler ran for", o.Error)
			}
			if len(n.seen("tell")) != 0 || len(n.seen("undo")) != 1 {
				t.Fatalf("undo ran %d times, tell %d; want once and never", len(n.seen("undo")), len(n.seen("tell")))
			}
		})
	}
}

// A cancel that stops a running action discards it and runs the
// handlers; the action is not run again.
func TestCancelDuringAnActionRunsTheHandlers(t *testing.T) {
	n := newNote()
	n.hold = "work"
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("h.yaml", handlersYAML)
	ch := e.submit(p, map[string]any{}, "r1")
	e.start()
	if s := <-n.entered; s != "work" {
		t.Fatalf("first call %s; want work", s)
	}
	if ok, err := e.rt.Cancel(e.ctx, "r1"); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	o := e.await(ch)
	if o.Status != runstate.Cancelled {
		t.Fatalf("outcome %s %q; want cancelled", o.Status, o.Error)
	}
	e.wantHistory("r1", "work:cancelled undo:succeeded tell:succeeded")
	n.wantSeen(t, "undo", "what", "cancelled cancelled at work: the run was cancelled")
	if len(n.seen("work")) != 1 {
		t.Fatalf("work ran %d times; want once", len(n.seen("work")))
	}
}
