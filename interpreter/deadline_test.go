package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	stdruntime "runtime"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// wantRunTimeout checks that the run failed with run.timeout and that
// the history record of step cut says so; last is the run's last step
// (cut, or the last handler).
func wantRunTimeout(t *testing.T, e *tenv, o *runstate.Outcome, last, cut string) {
	t.Helper()
	wantFailedWith(t, o, "run.timeout")
	h := e.history(o.RunID)
	if h[len(h)-1].Step != last {
		t.Fatalf("last history record %+v; want step %s", h[len(h)-1], last)
	}
	for _, r := range h {
		if r.Step == cut && r.Outcome == OutcomeFailed {
			if r.Error == nil || r.Error.Type != TypeRunTimeout {
				t.Fatalf("record %+v; want step %s failed with %s", r, cut, TypeRunTimeout)
			}
			return
		}
	}
	t.Fatalf("no failed record of step %s in %s", cut, outcomes(h))
}

const deadlineSleepYAML = `
tqw: v1
name: deadline
timeout: 1h
steps:
  - id: first
    action: sleep
    with: {duration: 30m}
  - id: nap
    action: sleep
    with: {duration: 2h}
    catch: [{next: caught}]
  - id: done
    succeed: late
  - id: caught
    succeed: caught
`

// The deadline counts from the submission, not from the step: a sleep
// begun 30 minutes in is cut at the hour, and no catch sees run.timeout.
func TestRunTimeoutCutsASleep(t *testing.T) {
	e := newTestEnv(t)
	defer e.close()
	p := e.write("deadline.yaml", deadlineSleepYAML)
	ch := e.submitUntil(p, nil, "r1", "first", OutcomeWaiting)
	e.clock.Advance(30 * time.Minute)
	e.waitEvent("nap", OutcomeWaiting)
	if st, err := e.rt.Status(e.ctx, "r1"); err != nil || !st.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("status %+v, %v; want the sleep cut at the deadline, +1h", st, err)
	}
	e.clock.Advance(30 * time.Minute)
	wantRunTimeout(t, e, e.await(ch), "nap", "nap")
	e.wantHistory("r1", "first:waiting first:ok nap:waiting nap:failed")
}

const deadlineWaitYAML = `
tqw: v1
name: deadline-wait
timeout: 1h
steps:
  - id: ask
    action: wait_signal
    with: {timeout: 3h}
    on_timeout: late
  - id: done
    succeed: "${ output }"
  - id: late
    succeed: signal timeout
`

// A wait_signal cut at the deadline ends the run with run.timeout, not
// through on_timeout, and leaves no wait record behind.
func TestRunTimeoutCutsAWaitSignal(t *testing.T) {
	e := newTestEnv(t)
	defer e.close()
	p := e.write("wait.yaml", deadlineWaitYAML)
	ch := e.submitUntil(p, nil, "r1", "ask", OutcomeWaiting)
	e.clock.Advance(time.Hour)
	wantRunTimeout(t, e, e.await(ch), "ask", "ask")
	e.wantHistory("r1", "ask:waiting ask:failed")
	if _, err := e.q.KVGet(e.ctx, waitKey("r1:ask")); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("wait record after the deadline: %v; want it gone", err)
	}
	if holder, err := e.rt.SignalKeyHolder(e.ctx, "r1:ask"); err != nil || holder != "" {
		t.Fatalf("key holder %q, %v; want none", holder, err)
	}
}

// A signal before the deadline ends a wait the deadline cut as usual.
func TestSignalBeforeTheDeadlineIsTaken(t *testing.T) {
	e := newTestEnv(t)
	defer e.close()
	p := e.write("wait.yaml", deadlineWaitYAML)
	ch := e.submitUntil(p, nil, "r1", "ask", OutcomeWaiting)
	e.clock.Advance(30 * time.Minute)
	if _, err := e.rt.Signal(e.ctx, "r1:ask", []byte(`"yes"`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"yes"`)
}

// block is an action that runs until its context ends.
type block struct{}

func (block) Name() string                { return "block" }
func (block) WithSchema() json.RawMessage { return nil }
func (block) Execute(ctx context.Context, _ *actions.Call) (any, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A running action is cut at the deadline: its context ends, and the run
// fails with run.timeout rather than retrying the step's timeout.
func TestRunTimeoutCutsAnAction(t *testing.T) {
	e := newTestEnv(t, withActions(block{}))
	defer e.close()
	p := e.write("block.yaml", `
tqw: v1
name: deadline-action
timeout: 300ms
steps:
  - id: work
    action: block
    retry: {max_attempts: 5, on: [timeout]}
    catch: [{next: caught}]
  - id: caught
    succeed: caught
`)
	o := e.run(p, nil, "r1")
	wantRunTimeout(t, e, o, "work", "work")
	e.wantHistory("r1", "work:failed")
}

// A call waiting for its child is cut at the deadline: the parent fails
// with run.timeout and its child run is cancelled.
func TestRunTimeoutCutsACall(t *testing.T) {
	e := newTestEnv(t)
	defer e.close()
	e.write("child.yaml", `
tqw: v1
name: child
steps:
  - id: nap
    action: sleep
    with: {duration: 1d}
`)
	p := e.write("parent.yaml", `
tqw: v1
name: parent
timeout: 1h
steps:
  - id: sub
    call: {workflow: child.yaml}
    timeout: 1d
    on_timeout: late
  - id: late
    succeed: late
`)
	ch := e.submitUntil(p, nil, "r1", "sub", OutcomeWaiting)
	e.clock.Advance(time.Hour)
	wantRunTimeout(t, e, e.await(ch), "sub", "sub")
	child := childRunID("r1", "sub", 0)
	for {
		st, err := e.rt.Status(e.ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == runstate.StateCancelled {
			break
		}
		if st.State.Terminal() || e.ctx.Err() != nil {
			t.Fatalf("child run %s: %s; want cancelled", child, st.State)
		}
		stdruntime.Gosched()
	}
}

// A retry's delay that would pass the deadline is cut at it: the run
// fails with run.timeout at the deadline, not at the retry.
func TestRunTimeoutCutsARetryDelay(t *testing.T) {
	n := newNote()
	e := newTestEnv(t, withActions(n))
	defer e.close()
	p := e.write("retry.yaml", `
tqw: v1
name: retry
timeout: 1h
steps:
  - id: work
    action: note
    with: {fail: true}
    retry: {max_attempts: 3, initial: 2h, max_interval: 3h, on: [custom.refused]}
`)
	ch := e.submitUntil(p, nil, "r1", "work", OutcomeRetry)
	if st, err := e.rt.Status(e.ctx, "r1"); err != nil || !st.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("status %+v, %v; want the retry due at the deadline, +1h", st, err)
	}
	e.clock.Advance(time.Hour)
	wantRunTimeout(t, e, e.await(ch), "work", "work")
	e.wantHistory("r1", "work:retry work:failed")
	if len(n.seen("work")) != 1 {
		t.Fatalf("work ran %d times; want once (the retry never ran)", len(n.seen("work")))
	}
}
