package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const literalKeyYAML = `tqw: v1
name: window
vars: {why: ""}
steps:
  - id: w
    action: wait_signal
    with: {key: deploy-window, timeout: 1h}
    catch:
      - on: [signal.key_taken]
        set: {why: "${ error.type }|${ error.message }"}
        next: busy
  - id: done
    succeed: signalled
  - id: busy
    succeed: "${ vars.why }"
`

// Two runs wait on one literal key: validate warns about the key, and the
// second run's wait fails as an ordinary step (a history record, error
// type signal.key_taken naming the run that holds the key, routed by
// catch) instead of failing the run at the step's settlement.
func TestSecondWaiterOnALiteralKeyFailsItsStep(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := filepath.Join(c.dir, "window.tqw.yaml")
	if err := os.WriteFile(wf, []byte(literalKeyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	code, vout, verr := runCLI(t, "validate", wf)
	if errOut := vout + verr; code != exitOK || !strings.Contains(errOut, "[step.wait-key-literal]") || !strings.Contains(errOut, "window.tqw.yaml:7:") {
		t.Errorf("validate does not warn about the literal key at its line:\n%s", errOut)
	}
	w := c.start("worker")
	w.waitLine("working")
	c.must(0, "submit", wf, "--run-id", "k1")
	c.awaitState("k1", "waiting")
	c.must(0, "submit", wf, "--run-id", "k2")
	st := c.awaitState("k2", "succeeded", "failed")
	if st.State != "succeeded" || !strings.HasPrefix(string(st.Result), `"signal.key_taken|`) || !strings.Contains(string(st.Result), "run k1") {
		t.Fatalf("k2 %s with %s; want succeeded through catch with signal.key_taken naming run k1", st.State, st.Result)
	}
	out, _ := c.must(0, "history", "k2")
	if !strings.Contains(out, "signal.key_taken") || !strings.Contains(out, "busy") {
		t.Fatalf("k2's history lacks the failed wait and the caught route:\n%s", out)
	}
	if c.awaitState("k1", "waiting").State != "waiting" {
		t.Fatal("k1 stopped waiting")
	}
}
