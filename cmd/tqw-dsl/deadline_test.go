package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// runEndJSON is the part of status --json a finished run's test reads.
type runEndJSON struct {
	State       string     `json:"state"`
	Error       string     `json:"error"`
	SubmittedAt time.Time  `json:"submitted_at"`
	FinishedAt  *time.Time `json:"finished_at"`
}

func (c *cli) runEnd(runID string) runEndJSON {
	c.t.Helper()
	out, _ := c.must(0, "status", runID, "--json")
	var st runEndJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		c.t.Fatalf("status --json %s: %v\n%s", runID, err, out)
	}
	return st
}

// TestRunDeadlineAcrossARestart: a run's deadline counts from its
// submission and survives a SIGKILL of its worker. The run sleeps far
// longer than its timeout; the worker is killed while it sleeps, the
// deadline passes while no process works the store (nothing ends the run
// meanwhile), and the next worker ends the run with run.timeout at the
// deadline fixed before the kill, not at one counted from its restart.
func TestRunDeadlineAcrossARestart(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := c.writeWorkflow("deadline.yaml", `
tqw: v1
name: deadline
timeout: 2s
steps:
  - id: nap
    action: sleep
    with: {duration: 1h}
    catch: [{next: caught}]
  - id: caught
    succeed: caught
`)
	w := c.start("worker", "--inbox-poll", "200ms")
	w.waitLine("working")
	c.must(0, "submit", wf, "--run-id", "d1")
	c.awaitState("d1", "scheduled")
	w.kill9()

	st := c.runEnd("d1")
	deadline := st.SubmittedAt.Add(2 * time.Second)
	// Until the deadline has passed, with no process working the store:
	// each poll is a process run, and the run must still be asleep.
	for time.Now().Before(deadline.Add(100 * time.Millisecond)) {
		if st := c.runEnd("d1"); st.State != "scheduled" {
			t.Fatalf("run state %q with no worker; want still scheduled", st.State)
		}
	}
	restarted := time.Now()
	w = c.start("worker", "--inbox-poll", "200ms")
	w.waitLine("working")
	c.awaitState("d1", "failed")
	end := c.runEnd("d1")
	if !strings.Contains(end.Error, "run.timeout") {
		t.Fatalf("error %q; want run.timeout", end.Error)
	}
	// The deadline named is the one fixed from the submission.
	want := "deadline " + deadline.UTC().Truncate(time.Second).Format(time.RFC3339)
	if !strings.Contains(end.Error, want) {
		t.Fatalf("error %q; want it to name the original %s", end.Error, want)
	}
	if end.FinishedAt == nil || end.FinishedAt.Before(restarted.Truncate(time.Millisecond)) {
		t.Fatalf("finished at %v; want after the restart at %v", end.FinishedAt, restarted)
	}
	out, _ := c.must(0, "history", "d1")
	if strings.Contains(out, "caught") {
		t.Fatalf("a catch saw run.timeout:\n%s", out)
	}
}
