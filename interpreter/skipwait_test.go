package interpreter

import (
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

const skipWaitWorkflow = `
tqw: v1
name: wait
steps:
  - id: hello
    set: {greeting: "hi"}
  - id: wait
    action: wait_signal
    with: {key: "go-${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ vars.greeting } ${ steps.wait.output }"
`

func TestSkipAWaitingSignalStep(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("wait.yaml", skipWaitWorkflow)
	ch := e.submitUntil(p, map[string]any{}, "r1", "wait", OutcomeWaiting)
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Skip: "hello"}); !errors.Is(err, runtime.ErrNotRedrivable) ||
		!strings.Contains(err.Error(), `waits at step "wait", not "hello"`) {
		t.Fatalf("skip of a step the run does not wait at: %v", err)
	}
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{}); !errors.Is(err, runtime.ErrNotRedrivable) || !strings.Contains(err.Error(), "is active") {
		t.Fatalf("a retry of the waiting run: %v", err)
	}
	if holder, err := e.rt.SignalKeyHolder(e.ctx, "go-r1"); err != nil || holder != "r1" {
		t.Fatalf("after the refusals the key is held by %q (%v); want r1 still waiting", holder, err)
	}
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Skip: "wait", Output: "given"}); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"hi given"`)
	e.wantHistory("r1", "hello:ok wait:waiting wait:skipped done:succeeded")
	if holder, err := e.rt.SignalKeyHolder(e.ctx, "go-r1"); err != nil || holder != "" {
		t.Fatalf("after the skip the key is held by %q (%v); want no waiter", holder, err)
	}
	if _, err := e.it.q.KVGet(e.ctx, waitKey("go-r1")); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the wait record of the skipped step: %v; want it gone", err)
	}
	out, err := e.rt.Signal(e.ctx, "go-r1", []byte(`"late"`))
	if err != nil || out != signal.Buffered {
		t.Fatalf("a signal to the skipped step's key: %v %v; want it buffered", out, err)
	}
}

func TestSkipASleepingStep(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("sleep.yaml", `
tqw: v1
name: sleep
steps:
  - id: nap
    action: sleep
    with: {duration: 1h}
  - id: done
    succeed: "${ steps.nap.output.woke }"
`)
	ch := e.submitUntil(p, map[string]any{}, "r1", "nap", OutcomeWaiting)
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Skip: "nap", Output: map[string]any{"woke": "early"}}); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"early"`)
	e.wantHistory("r1", "nap:waiting nap:skipped done:succeeded")
}
