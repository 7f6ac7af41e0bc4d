package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// childArgs names the environment variable that makes the test binary run
// the example (its arguments, JSON-encoded) instead of the tests.
const childArgs = "DURABLE_APPROVALS_CHILD_ARGS"

func TestMain(m *testing.M) {
	if enc := os.Getenv(childArgs); enc != "" {
		var args []string
		if err := json.Unmarshal([]byte(enc), &args); err != nil {
			os.Exit(3)
		}
		if err := run(context.Background(), args, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// invoke runs the example in a new process on store and returns its output.
func invoke(t *testing.T, store string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enc, err := json.Marshal(append([]string{"--store", store}, args...))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), raceNoExitSleep(), childArgs+"="+string(enc))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("durable_approvals %q: %v\n%s", args, err, out)
	}
	return string(out)
}

func mustContain(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func mustNotContain(t *testing.T, out string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(out, w) {
			t.Errorf("output has %q:\n%s", w, out)
		}
	}
}

// The three paths share one file store; each invocation is its own process.
func TestApprovalPaths(t *testing.T) {
	store := "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "store"))

	t.Run("approve after the wait", func(t *testing.T) {
		out := invoke(t, store, "--run-id", "a")
		mustContain(t, out, "submitted run a\n", "turn 2: proposing a refund of 42.00",
			"run a is waiting for a decision until ")
		mustNotContain(t, out, "turn 3")
		// A plain invocation before the decision changes nothing.
		out = invoke(t, store, "--run-id", "a")
		mustContain(t, out, "run a is waiting for a decision")
		mustNotContain(t, out, "turn ")
		out = invoke(t, store, "--run-id", "a", "approve")
		mustContain(t, out, `decision {"approve":true} for run a: delivered`,
			"turn 3: approved; refund of 42.00 issued\n", "run a succeeded: refund of 42.00 issued\n")
		mustNotContain(t, out, "turn 0", "turn 1", "turn 2")
		out = invoke(t, store, "--run-id", "a")
		mustContain(t, out, "run a already succeeded: refund of 42.00 issued")
	})

	t.Run("decision before the wait is buffered", func(t *testing.T) {
		out := invoke(t, store, "--run-id", "b", "reject", "duplicate", "claim")
		mustContain(t, out, `for run b: buffered`, "the run has not started")
		mustNotContain(t, out, "turn ")
		out = invoke(t, store, "--run-id", "b")
		mustContain(t, out, "turn 2: proposing", "turn 3: refund rejected: duplicate claim\n",
			"run b succeeded: refund rejected: duplicate claim\n")
		mustNotContain(t, out, "waiting for a decision until")
	})

	t.Run("timeout escalates at the next plain invocation", func(t *testing.T) {
		out := invoke(t, store, "--run-id", "c", "--timeout", "1h")
		mustContain(t, out, "run c is waiting for a decision until ")
		// 59 minutes later the wait is not due yet.
		out = invoke(t, store, "--run-id", "c", "--clock-skew", "59m")
		mustContain(t, out, "run c is waiting for a decision")
		mustNotContain(t, out, "turn ")
		out = invoke(t, store, "--run-id", "c", "--clock-skew", "61m")
		mustContain(t, out, "turn 3: escalated to a supervisor: no decision within 1h0m0s\n",
			"run c succeeded: escalated to a supervisor")
		// A decision after the escalation finds a finished run.
		out = invoke(t, store, "--run-id", "c", "approve")
		mustContain(t, out, "run c already succeeded: escalated")
		mustNotContain(t, out, "delivered", "buffered")
	})
}

// raceNoExitSleep drops the race detector's one-second sleep at exit from
// the children, keeping any other GORACE option.
func raceNoExitSleep() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}
