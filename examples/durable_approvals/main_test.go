package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
)

// childArgs names the environment variable that makes the test binary run
// the example (its arguments, JSON-encoded) instead of the tests.
const childArgs = "DURABLE_APPROVALS_CHILD_ARGS"

func TestMain(m *testing.M) {
	exampletest.RunIfChild(childArgs, run)
	os.Exit(m.Run())
}

// invoke runs the example in a new process on store and returns its output.
func invoke(t *testing.T, store string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exampletest.Command(ctx, childArgs, append([]string{"--store", store}, args...))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("durable_approvals %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// The three paths share one file store; each invocation is its own process.
func TestApprovalPaths(t *testing.T) {
	store := "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "store"))

	t.Run("approve after the wait", func(t *testing.T) {
		out := invoke(t, store, "--run-id", "a")
		exampletest.Contains(t, out, "submitted run a\n", "turn 2: proposing a refund of 42.00",
			"run a is waiting for a decision until ")
		exampletest.NotContains(t, out, "turn 3")
		// A plain invocation before the decision changes nothing.
		out = invoke(t, store, "--run-id", "a")
		exampletest.Contains(t, out, "run a is waiting for a decision")
		exampletest.NotContains(t, out, "turn ")
		out = invoke(t, store, "--run-id", "a", "approve")
		exampletest.Contains(t, out, `decision {"approve":true} for run a: delivered`,
			"turn 3: approved; refund of 42.00 issued\n", "run a succeeded: refund of 42.00 issued\n")
		exampletest.NotContains(t, out, "turn 0", "turn 1", "turn 2")
		out = invoke(t, store, "--run-id", "a")
		exampletest.Contains(t, out, "run a already succeeded: refund of 42.00 issued")
	})

	t.Run("decision before the wait is buffered", func(t *testing.T) {
		out := invoke(t, store, "--run-id", "b", "reject", "duplicate", "claim")
		exampletest.Contains(t, out, `for run b: buffered`, "the run has not started")
		exampletest.NotContains(t, out, "turn ")
		out = invoke(t, store, "--run-id", "b")
		exampletest.Contains(t, out, "turn 2: proposing", "turn 3: refund rejected: duplicate claim\n",
			"run b succeeded: refund rejected: duplicate claim\n")
		exampletest.NotContains(t, out, "waiting for a decision until")
	})

	t.Run("timeout escalates at the next plain invocation", func(t *testing.T) {
		out := invoke(t, store, "--run-id", "c", "--timeout", "1h")
		exampletest.Contains(t, out, "run c is waiting for a decision until ")
		// 59 minutes later the wait is not due yet.
		out = invoke(t, store, "--run-id", "c", "--clock-skew", "59m")
		exampletest.Contains(t, out, "run c is waiting for a decision")
		exampletest.NotContains(t, out, "turn ")
		out = invoke(t, store, "--run-id", "c", "--clock-skew", "61m")
		exampletest.Contains(t, out, "turn 3: escalated to a supervisor: no decision within 1h0m0s\n",
			"run c succeeded: escalated to a supervisor")
		// A decision after the escalation finds a finished run.
		out = invoke(t, store, "--run-id", "c", "approve")
		exampletest.Contains(t, out, "run c already succeeded: escalated")
		exampletest.NotContains(t, out, "delivered", "buffered")
	})
}
