package rttest

import (
	"context"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime"
)

func TestSubmitWaitReopen(t *testing.T) {
	runner := runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		return runtime.Succeed(append([]byte("done:"), s.Payload...)), nil
	})
	e := New(t, Runtime(runner))
	if out := e.Submit(runtime.RunSpec{RunID: "r1", Input: []byte("x")}); !out.NewlySubmitted {
		t.Fatalf("first submission not new: %+v", out)
	}
	if st := e.Status("r1"); st.State.Terminal() {
		t.Fatalf("run terminal before the worker started: %+v", st)
	}
	e.Start()
	e.Terminated("r1")
	if st := e.Status("r1"); st.State != runstate.StateSucceeded || string(st.Result) != "done:x" {
		t.Fatalf("status %+v", st)
	}
	e.Reopen()
	if e.W != nil {
		t.Fatal("worker running after Reopen")
	}
	if st := e.Status("r1"); st.State != runstate.StateSucceeded {
		t.Fatalf("status after reopening on the same store: %+v", st)
	}
}
