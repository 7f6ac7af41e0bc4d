package main

import (
	"strings"
	"testing"
	"time"
)

// TestWorkerRetention runs a worker with a short --retention and checks
// that a finished run's status and history are deleted once it passed,
// and that its id can then be used again.
func TestWorkerRetention(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	hello := abs(t, "../../workflows/hello.yaml")
	// Long enough for run to read the result even on a loaded machine.
	const retention = 4 * time.Second
	w := c.start("worker", "--retention", retention.String(), "--inbox-poll", "200ms")
	w.waitLine("working")
	start := time.Now()
	out, _ := c.must(0, "run", hello, "--run-id", "r1")
	if out != "Hello, world!\n" {
		t.Fatalf("run: %q", out)
	}
	if hist, _ := c.must(0, "history", "r1"); !strings.Contains(hist, "succeeded") {
		t.Fatalf("history right after the run:\n%s", hist)
	}
	// Bounded poll (each poll is two process runs): the runtime deletes
	// the status, the interpreter's sweep the history.
	deadline := time.Now().Add(retention + 60*time.Second)
	for {
		stCode, _, stErr := c.run("status", "r1")
		hCode, hist, hErr := c.run("history", "r1")
		if stCode == exitFailed && strings.Contains(stErr, "no run") && hCode == exitFailed && strings.Contains(hErr, "no run") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run r1 is still stored after %v: status exit %d %s; history exit %d %s%s",
				time.Since(start), stCode, stErr, hCode, hist, hErr)
		}
	}
	if elapsed := time.Since(start); elapsed < retention {
		t.Fatalf("run r1 was deleted after %v, before its retention %v", elapsed, retention)
	}
	// The id is free again.
	if out, _ := c.must(0, "run", hello, "--run-id", "r1", "--input", `{"name": "again"}`); out != "Hello, again!\n" {
		t.Fatalf("run under the freed id: %q", out)
	}
	code, _, errOut := c.run("worker", "--retention", "10ms")
	if code != exitUsage || !strings.Contains(errOut, "--retention") {
		t.Fatalf("worker --retention 10ms: exit %d, %s", code, errOut)
	}
}
