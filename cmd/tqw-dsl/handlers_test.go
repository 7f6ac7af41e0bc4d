package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gatedStep is a shell step that appends "start WORKER STEP" to the lines
// file, waits for the file <gate>.<WORKER>.<STEP> to exist, then appends
// "end WORKER STEP".
func gatedStep(id string) string {
	return fmt.Sprintf(`  - id: %s
    action: shell
    with:
      command: ["sh", "-c", "echo \"start $W $1\" >> \"$2\"; while [ ! -e \"$3.$W.$1\" ]; do sleep 0.02; done; echo \"end $W $1\" >> \"$2\"", "sh", "%s", "${ input.lines }", "${ input.gate }"]
      env: {W: "${ secrets.TQW_TEST_WORKER }"}
`, id, id)
}

// TestKillDuringOnError SIGKILLs the worker inside an on_error handler,
// twice: during its first step, and during its second once the first
// ended. Each restart resumes the handler where it was: the interrupted
// step runs again, the one that ended does not, finally runs once, and
// the run ends with its original outcome and error.
func TestKillDuringOnError(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := c.writeWorkflow("handlers.yaml", `tqw: v1
name: handler-crash
input:
  type: object
  required: [lines, gate]
  properties: {lines: {type: string}, gate: {type: string}}
secrets: [TQW_TEST_WORKER]
steps:
  - id: work
    action: shell
    with: {command: ["sh", "-c", "exit 3"]}
on_error:
`+gatedStep("undo")+gatedStep("notify")+`finally:
  - id: tell
    action: shell
    with:
      command: ["sh", "-c", "echo \"tell $W $1\" >> \"$2\"", "sh", "${ run.outcome }", "${ input.lines }"]
      env: {W: "${ secrets.TQW_TEST_WORKER }"}
`)
	lines, gate := filepath.Join(c.dir, "lines"), filepath.Join(c.dir, "gate")
	open := func(worker, step string) {
		t.Helper()
		if err := os.WriteFile(gate+"."+worker+"."+step, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	has := func(line string) func() bool {
		return func() bool { return countPrefix(readLines(t, lines), line) > 0 }
	}
	worker := func(name string) *bg {
		p := c.with("TQW_TEST_WORKER="+name).start("worker", "--inbox-poll", "200ms")
		p.waitLine("working")
		return p
	}
	a := worker("worker-A")
	c.must(0, "submit", wf, "--run-id", "k1", "--input", fmt.Sprintf(`{"lines": %q, "gate": %q}`, lines, gate))
	pollUntil(t, "worker A starts undo", has("start worker-A undo"))
	a.kill9()

	b := worker("worker-B")
	pollUntil(t, "worker B starts undo again", has("start worker-B undo"))
	open("worker-B", "undo")
	pollUntil(t, "worker B starts notify", has("start worker-B notify"))
	b.kill9()

	cw := worker("worker-C")
	pollUntil(t, "worker C starts notify again", has("start worker-C notify"))
	open("worker-C", "notify")
	c.awaitState("k1", "failed")
	cw.kill9()

	got := readLines(t, lines)
	want := []string{"start worker-A undo", "start worker-B undo", "end worker-B undo", "start worker-B notify",
		"start worker-C notify", "end worker-C notify", "tell worker-C failed"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("side effects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	end := c.runEnd("k1")
	if end.State != "failed" || !strings.HasPrefix(end.Error, "step work: shell.exit") || strings.Contains(end.Error, "handler failed") {
		t.Fatalf("run ended %s %q; want failed with the work step's error", end.State, end.Error)
	}
	out, _ := c.must(0, "history", "k1")
	for _, step := range []string{"work", "undo", "notify", "tell"} {
		if !strings.Contains(out, step) {
			t.Fatalf("history lacks %s:\n%s", step, out)
		}
	}
}

// The examples run: workflows/handlers.tqw.yaml releases and reports a
// declined order and reports a charged one; workflows/deadline.tqw.yaml
// ends at its deadline with run.timeout, on_error explaining.
func TestHandlerExamplesRun(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	handlers := abs(t, "../../workflows/handlers.tqw.yaml")
	_, errOut := c.must(exitFailed, "run", handlers, "--run-id", "e1", "--input", `{"order_id": "o-1", "decline": true}`)
	if !strings.Contains(errOut, "run e1 failed: payment declined for o-1") {
		t.Fatalf("declined order: %s", errOut)
	}
	hist, _ := c.must(0, "history", "e1")
	if !strings.Contains(hist, "release") || !strings.Contains(hist, "report") {
		t.Fatalf("declined order's history lacks its handlers:\n%s", hist)
	}
	out, _ := c.must(0, "run", handlers, "--run-id", "e2", "--input", `{"order_id": "o-2"}`)
	if strings.TrimSpace(out) != "charged o-2" {
		t.Fatalf("charged order: %q", out)
	}
	hist, _ = c.must(0, "history", "e2")
	if strings.Contains(hist, "release") || !strings.Contains(hist, "report") {
		t.Fatalf("charged order's history: want report only:\n%s", hist)
	}

	_, errOut = c.must(exitFailed, "run", abs(t, "../../workflows/deadline.tqw.yaml"), "--run-id", "e3")
	if !strings.Contains(errOut, "run.timeout") || strings.Contains(errOut, "nobody answered") {
		t.Fatalf("deadline example: %s", errOut)
	}
	hist, _ = c.must(0, "history", "e3")
	if !strings.Contains(hist, "explain") {
		t.Fatalf("deadline example's history lacks on_error:\n%s", hist)
	}
}
