package interpreter

import (
	"errors"
	stdruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime"
)

// Issue 12, item 2: a signal that breaks the wait's schema, buffered
// before the run existed, is set aside when the wait consumes it (history
// and status say so) and the run waits on; a good signal then completes it.
func TestBufferedBadSignalIsSetAside(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("wait.yaml", waitYAML)
	bad := []byte(`{"approved": "yes"}`)
	if res, err := e.rt.Signal(e.ctx, "r1:ask", bad); err != nil || res != signal.Buffered {
		t.Fatalf("Signal before the run: %v, %v; want buffered (nothing to check it against yet)", res, err)
	}
	ch := e.submitUntil(p, map[string]any{}, "r1", "ask", OutcomeSignalRejected)
	h := e.wantHistory("r1", "ask:waiting ask:signal_rejected")
	rej := h[1]
	if rej.Rejected == nil || rej.Rejected.Key != "r1:ask" || rej.Rejected.Size != len(bad) ||
		!strings.Contains(rej.Rejected.Reason, "at '/approved': got string, want boolean") {
		t.Fatalf("rejection record %+v; want key r1:ask, size %d and the field in the reason", rej.Rejected, len(bad))
	}
	if rej.Error == nil || rej.Error.Type != TypeSignalRejected || rej.Error.Message != rej.Rejected.Reason {
		t.Fatalf("rejection record error %+v", rej.Error)
	}
	if rej.WaitKey != "r1:ask" || rej.Until != t0.Add(time.Hour).UnixMilli() {
		t.Fatalf("rejection record waits on %q until %v; want r1:ask until the original deadline", rej.WaitKey, time.UnixMilli(rej.Until))
	}
	st, err := e.rt.Status(e.ctx, "r1")
	if err != nil || st.State != runstate.StateWaiting || st.SignalKey != "r1:ask" || !st.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("status after the rejection %+v, %v; want waiting on r1:ask until +1h", st, err)
	}
	// The wait still checks what it is sent.
	if _, err := e.rt.Signal(e.ctx, "r1:ask", bad); !errors.Is(err, signal.ErrRejected) {
		t.Fatalf("the same bad signal while waiting: %v; want ErrSignalRejected", err)
	}
	if _, err := e.rt.Signal(e.ctx, "r1:ask", []byte(`{"approved": true}`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"approved"`)
	e.wantHistory("r1", "ask:waiting ask:signal_rejected ask:ok yes:succeeded")
}

// A signal the step cannot use that reaches it while it waits (sent by a
// writer that does not check signals) is set aside too, and the wait keeps
// its original deadline rather than starting a fresh timeout.
func TestRejectedSignalKeepsTheRemainingTimeout(t *testing.T) {
	e := newTestEnv(t, withRuntimeOptions(runtime.Options{NoSignalValidator: true}))
	p := e.write("wait.yaml", waitYAML)
	ch := e.submitUntil(p, map[string]any{}, "r1", "ask", OutcomeWaiting)
	e.clock.Advance(20 * time.Minute)
	if _, err := e.rt.Signal(e.ctx, "r1:ask", []byte(`not json`)); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("ask", OutcomeSignalRejected)
	h := e.wantHistory("r1", "ask:waiting ask:signal_rejected")
	if r := h[1].Rejected; r == nil || !strings.Contains(r.Reason, "not JSON") {
		t.Fatalf("rejection %+v; want the payload named as not JSON", r)
	}
	// The rejection's event goes out with its settlement; the run waits
	// again once that settlement is applied.
	st, err := e.rt.Status(e.ctx, "r1")
	for err == nil && st.State == runstate.StateRunning && e.ctx.Err() == nil {
		stdruntime.Gosched()
		st, err = e.rt.Status(e.ctx, "r1")
	}
	if err != nil || st.State != runstate.StateWaiting || !st.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("status %+v, %v; want waiting until +1h (40 minutes left), not a fresh hour", st, err)
	}
	e.clock.Advance(40*time.Minute - time.Millisecond)
	if st, _ := e.rt.Status(e.ctx, "r1"); st.State != runstate.StateWaiting {
		t.Fatalf("before the deadline: %s; want still waiting", st.State)
	}
	e.clock.Advance(time.Millisecond)
	wantFailed(t, e.await(ch), "nobody answered")
	e.wantHistory("r1", "ask:waiting ask:signal_rejected ask:caught late:failed")
}

const predictedYAML = `
tqw: v1
name: approval
input: {type: object, properties: {skip: {type: boolean}}}
steps:
  - id: prepare
    switch:
      - when: input.skip ?? false
        next: skipped
  - id: pause
    action: sleep
    with: {duration: 1h}
  - id: ask
    action: wait_signal
    with:
      key: "approve:${ run.id }"
      timeout: 3d
      schema: {type: object, required: [approved], properties: {approved: {type: boolean}}}
  - id: done
    succeed: "${ output.approved }"
  - id: skipped
    succeed: skipped
`

// A wait whose key and schema depend only on the run and its input is
// known from the submission on: a bad signal sent before the run reaches
// it is refused at send time, naming the step and the field; a good one is
// buffered and consumed. The run's end removes the prediction, also when
// the run never reached the step.
func TestSignalCheckedBeforeTheRunWaits(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("approval.yaml", predictedYAML)
	ch := e.submitUntil(p, map[string]any{}, "r1", "pause", OutcomeWaiting)
	w, err := e.it.Waiting(e.ctx, e.q, "approve:r1")
	if err != nil || w == nil || !w.Expected || w.Step.ID != "ask" || w.RunID != "r1" {
		t.Fatalf("Waiting before the wait = %+v, %v; want the predicted step ask of r1", w, err)
	}
	_, err = e.rt.Signal(e.ctx, "approve:r1", []byte(`{"approved": "yes"}`))
	if !errors.Is(err, signal.ErrRejected) || !strings.Contains(err.Error(), `step "ask" of run r1`) ||
		!strings.Contains(err.Error(), "at '/approved': got string, want boolean") {
		t.Fatalf("bad signal before the wait: %v; want ErrSignalRejected naming the step and the field", err)
	}
	if list, err := e.rt.ListSignals(e.ctx, signal.ListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("buffered after a refused signal: %v, %v; want nothing", list, err)
	}
	if res, err := e.rt.Signal(e.ctx, "approve:r1", []byte(`{"approved": true}`)); err != nil || res != signal.Buffered {
		t.Fatalf("good signal before the wait: %v, %v; want buffered", res, err)
	}
	e.clock.Advance(time.Hour)
	wantSucceeded(t, e.await(ch), "true")
	e.settleNotifications()
	if w, err := e.it.Waiting(e.ctx, e.q, "approve:r1"); err != nil || w != nil {
		t.Fatalf("Waiting after the run = %+v, %v; want none", w, err)
	}

	// A run that ends without reaching the wait leaves no prediction.
	wantSucceeded(t, e.run(p, map[string]any{"skip": true}, "r2"), `"skipped"`)
	e.settleNotifications()
	if w, err := e.it.Waiting(e.ctx, e.q, "approve:r2"); err != nil || w != nil {
		t.Fatalf("Waiting after a run that skipped the wait = %+v, %v; want none", w, err)
	}
	// Once the run ended, a signal on its key is nobody's: buffered unchecked.
	if res, err := e.rt.Signal(e.ctx, "approve:r2", []byte(`{"approved": "yes"}`)); err != nil || res != signal.Buffered {
		t.Fatalf("signal after the run: %v, %v; want buffered", res, err)
	}
}

// A wait whose with reads the run's state (vars, steps, now()) is known
// only once the run waits; keys without the run id are never predicted.
func TestWaitsPredictedOnlyWhenKnownAtSubmission(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("unpredictable.yaml", `
tqw: v1
name: unpredictable
vars: {n: 1}
steps:
  - id: a
    action: wait_signal
    with: {key: "a:${ run.id }:${ vars.n }", timeout: 1h}
  - id: b
    action: wait_signal
    with: {key: "shared", timeout: 1h, schema: {type: boolean}}
  - id: c
    action: wait_signal
    with: {timeout: "${ duration('1h') }", schema: {type: integer}}
`)
	e.submit(p, map[string]any{}, "r1")
	for key, want := range map[string]bool{"a:r1:1": false, "shared": false, "r1:c": true} {
		w, err := e.it.Waiting(e.ctx, e.q, key)
		if err != nil || (w != nil) != want {
			t.Errorf("Waiting(%q) at submission = %+v, %v; want predicted %v", key, w, err, want)
		}
	}
	st, err := e.rt.Status(e.ctx, "r1")
	if err != nil || st.Headers[headerSignalKeys] != `["r1:c"]` {
		t.Fatalf("run headers %v, %v; want %s listing the prediction", st.Headers, err, headerSignalKeys)
	}
}
