package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Issue 12, item 2, through the built binary: a signal that breaks the
// wait's schema, sent before the run exists, is buffered; the run reaches
// its wait, sets the payload aside (history and status show it, with the
// reason) and waits on; a good payload then completes it. Sent once the
// run is known, the same payload is refused at once and nothing is
// written.
func TestBadSignalBeforeTheWaitNeverFailsTheRun(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := abs(t, "../../workflows/approval.tqw.yaml")
	bad := `{"approved":"yes"}`

	_, errOut := c.must(0, "signal", "approve:r1", bad)
	if !strings.Contains(errOut, `no run is waiting on "approve:r1"`) {
		t.Fatalf("signal before the run: stderr %q; want the no-waiter warning", errOut)
	}
	c.must(0, "submit", wf, "--run-id", "r1", "--input", `{"request": "laptop"}`)
	c.must(0, "worker", "--idle-exit")

	status, _ := c.must(0, "status", "r1")
	for _, want := range []string{"state      waiting", "waiting on approve:r1", "last step  ask (attempt 1, signal_rejected)",
		"rejected   signal on approve:r1 (18 bytes) set aside by step ask", "at '/approved': got string, want boolean"} {
		if !strings.Contains(status, want) {
			t.Fatalf("status after the bad signal lacks %q:\n%s", want, status)
		}
	}
	out, _ := c.must(0, "status", "r1", "--json")
	var st runJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if r := st.RejectedSignal; st.State != "waiting" || r == nil || r.Key != "approve:r1" || r.Step != "ask" || r.Size != len(bad) ||
		!strings.Contains(r.Reason, "at '/approved'") || r.At.IsZero() {
		t.Fatalf("status --json: state %s, rejected_signal %+v", st.State, st.RejectedSignal)
	}
	hist, _ := c.must(0, "history", "r1")
	if !strings.Contains(hist, "signal_rejected") || !strings.Contains(hist, "error  signal.rejected: the payload does not match the schema: at '/approved'") {
		t.Fatalf("history lacks the rejection:\n%s", hist)
	}
	if strings.Contains(hist, `"yes"`) {
		t.Fatalf("history keeps the rejected payload:\n%s", hist)
	}

	// While the run waits, the same payload is refused when sent.
	before := c.snapshot()
	code, _, errOut := c.run("signal", "approve:r1", bad)
	if code != exitUsage || !strings.Contains(errOut, `step "ask" of run r1 cannot use it`) || !strings.Contains(errOut, "at '/approved': got string, want boolean") {
		t.Fatalf("bad signal while waiting: exit %d, stderr %q; want exit %d naming the step and the field", code, errOut, exitUsage)
	}
	if c.snapshot() != before {
		t.Fatal("a refused signal changed the store")
	}

	out, _ = c.must(0, "signal", "approve:r1", `{"approved": true, "by": "ann"}`)
	if !strings.Contains(out, "delivered") {
		t.Fatalf("good signal: %q", out)
	}
	c.must(0, "worker", "--idle-exit")
	status, _ = c.must(0, "status", "r1")
	if !strings.Contains(status, "succeeded") || !strings.Contains(status, `"approved_by":"ann"`) {
		t.Fatalf("status after the good signal:\n%s", status)
	}
}

// The order of events: submit, then a bad signal before the run
// reaches its wait (no worker has run it yet). The wait's key and schema
// are known from the submission, so the signal is refused then, naming
// the field, with exit code 2 and nothing written; a good one is buffered
// for that step and completes the run.
func TestBadSignalRefusedBeforeTheRunWaits(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := abs(t, "../../workflows/approval.tqw.yaml")
	c.must(0, "submit", wf, "--run-id", "r2", "--input", `{"request": "desk"}`)

	before := c.snapshot()
	code, out, errOut := c.run("signal", "approve:r2", `{"approved":"yes"}`)
	if code != exitUsage || !strings.Contains(errOut, `signal "approve:r2" refused, nothing sent`) ||
		!strings.Contains(errOut, `step "ask" of run r2, which the run has not reached yet,`) ||
		!strings.Contains(errOut, "at '/approved': got string, want boolean") {
		t.Fatalf("bad signal before the wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if c.snapshot() != before {
		t.Fatal("a refused signal changed the store")
	}
	code, _, errOut = c.run("signal", "approve:r2", `{"approved": 1}`, "--require-waiting")
	if code != exitUsage || !strings.Contains(errOut, "got number, want boolean") {
		t.Fatalf("bad signal with --require-waiting: exit %d, stderr %q; the payload check comes first", code, errOut)
	}

	_, errOut = c.must(0, "signal", "approve:r2", `{"approved": false, "by": "bob"}`)
	if !strings.Contains(errOut, `run r2 has not reached step "ask" yet`) {
		t.Fatalf("good signal before the wait: stderr %q; want the note naming the run and step", errOut)
	}
	c.must(0, "worker", "--idle-exit")
	status, _ := c.must(0, "status", "r2")
	if !strings.Contains(status, "failed") || !strings.Contains(status, "rejected by bob") || strings.Contains(status, "rejected   signal") {
		t.Fatalf("status after the decision:\n%s", status)
	}
}

// Issue 12, item 7: a signal to a key nobody waits on says so on stderr,
// with how long it stays buffered; --require-waiting exits 1 and writes
// nothing; 'signals' lists what is buffered, read-only.
func TestSignalToNobody(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "run", abs(t, "../../workflows/hello.yaml")) // the store exists

	before := c.snapshot()
	code, out, errOut := c.run("signal", "01NOPE:wait", `{}`, "--require-waiting")
	if code != exitFailed || !strings.Contains(errOut, `no run is waiting on "01NOPE:wait"; nothing was sent`) {
		t.Fatalf("--require-waiting to nobody: exit %d, stdout %q, stderr %q; want exit %d", code, out, errOut, exitFailed)
	}
	if c.snapshot() != before {
		t.Fatal("signal --require-waiting to nobody changed the store")
	}
	if out, _ := c.must(0, "signals"); strings.Contains(out, "01NOPE") {
		t.Fatalf("signals after a refused signal:\n%s", out)
	}

	start := time.Now()
	out, errOut = c.must(0, "signal", "01NOPE:wait", `{}`)
	if !strings.Contains(out, "buffered") {
		t.Fatalf("signal to nobody: stdout %q", out)
	}
	if !strings.Contains(errOut, `warning: no run is waiting on "01NOPE:wait"`) || !strings.Contains(errOut, "stays buffered for 7d0h (until ") {
		t.Fatalf("signal to nobody: stderr %q; want the warning with the retention", errOut)
	}
	// The expiry is the default retention, 7 days, after the send.
	i := strings.Index(errOut, "until ")
	if i < 0 {
		t.Fatalf("no expiry in %q", errOut)
	}
	until, err := time.Parse(time.RFC3339, strings.TrimSuffix(strings.Fields(errOut[i+len("until "):])[0], ","))
	if err != nil {
		t.Fatalf("expiry in %q: %v", errOut, err)
	}
	if d := until.Sub(start); d < 7*24*time.Hour-time.Minute || d > 7*24*time.Hour+time.Minute {
		t.Fatalf("buffered until %v, %v after the send; want 7 days", until, d)
	}

	before = c.snapshot()
	out, _ = c.must(0, "signals")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "KEY SIZE AGE BUFFERED" {
		t.Fatalf("signals:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 4 || f[0] != "01NOPE:wait" || f[1] != "2" || !strings.HasSuffix(f[2], "s") {
		t.Fatalf("signals row %q; want the key, size 2 and an age in seconds", lines[1])
	}
	out, _ = c.must(0, "signals", "--json")
	var sig signalJSON
	if err := json.Unmarshal([]byte(out), &sig); err != nil || sig.Key != "01NOPE:wait" || sig.Size != 2 ||
		sig.BufferedAt == nil || sig.AgeSeconds == nil || *sig.AgeSeconds < 0 || *sig.AgeSeconds > 600 {
		t.Fatalf("signals --json: %q, %v", out, err)
	}
	if c.snapshot() != before {
		t.Fatal("signals changed the store")
	}
}
