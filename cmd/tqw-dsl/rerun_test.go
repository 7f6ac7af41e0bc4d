package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// rerunWorkflow has three slow steps that each append their name to a log.
const rerunWorkflow = `tqw: v1
name: rerun
input: {type: object, required: [log], properties: {log: {type: string}}}
steps:
  - id: a
    action: shell
    with: {command: 'echo a >> "$LOG"; sleep 0.3', env: {LOG: "${ input.log }"}}
  - id: b
    action: shell
    with: {command: 'echo b >> "$LOG"; sleep 0.3', env: {LOG: "${ input.log }"}}
  - id: c
    action: shell
    with: {command: 'echo c >> "$LOG"; sleep 3', env: {LOG: "${ input.log }"}}
  - id: done
    succeed: "ok"
`

func rerunSetup(t *testing.T) (c *cli, wf, input, log string) {
	c = newCLI(t)
	wf = filepath.Join(c.dir, "rerun.yaml")
	if err := os.WriteFile(wf, []byte(rerunWorkflow), 0o644); err != nil {
		t.Fatal(err)
	}
	log = filepath.Join(c.dir, "steps.log")
	return c, wf, fmt.Sprintf(`{"log": %q}`, log), log
}

// killAfterStep starts `run wf --json` and SIGKILLs it once step was
// reported complete; it returns the run id the command announced.
func killAfterStep(t *testing.T, c *cli, step string, args ...string) string {
	t.Helper()
	p := c.start(append([]string{"run", "--json"}, args...)...)
	runID := ""
	pollUntil(t, "run reporting step "+step, func() bool {
		done := false
		sc := bufio.NewScanner(strings.NewReader(p.stdout()))
		for sc.Scan() {
			var ev runEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if ev.Event == "run_start" {
				runID = ev.Run
			}
			if ev.Event == "end" && ev.Step == step {
				done = true
			}
		}
		if !done && !p.running() {
			t.Fatalf("run exited before reporting step %s:\n%s\n%s", step, p.stdout(), p.stderr())
		}
		return done
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait()
	if runID == "" {
		t.Fatal("run --json printed no run_start event")
	}
	return runID
}

func logLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// Running the same command again after a kill -9 finishes the interrupted
// run (the same run, from where it was) instead of starting another; the
// steps the first process reported complete do not run again.
func TestRerunResumesTheInterruptedRun(t *testing.T) {
	t.Parallel()
	c, wf, input, log := rerunSetup(t)
	runID := killAfterStep(t, c, "b", wf, "--input", input)

	out, errOut := c.must(0, "run", wf, "--input", input)
	if !strings.Contains(errOut, "resuming run "+runID+" from step c") {
		t.Fatalf("the second run did not say it resumes %s from step c:\n%s", runID, errOut)
	}
	if strings.TrimSpace(out) != "ok" {
		t.Fatalf("result %q; want ok", out)
	}
	if got := logLines(t, log); strings.Join(got, " ") != "a b c" && strings.Join(got, " ") != "a b c c" {
		t.Fatalf("steps ran %v; want a and b once (reported complete), c at least once", got)
	}
	list, _ := c.must(0, "list", "--json")
	if n := strings.Count(list, `"run"`); n != 1 {
		t.Fatalf("%d runs in the store; want the one interrupted and resumed:\n%s", n, list)
	}

	// The run is reported now: the same command runs afresh.
	c.must(0, "run", wf, "--input", input)
	list, _ = c.must(0, "list", "--json")
	if n := strings.Count(list, `"run"`); n != 2 {
		t.Fatalf("%d runs after a third, uninterrupted command; want 2:\n%s", n, list)
	}
}

// --new starts a fresh run even when one of the same command was
// interrupted; that run stays for the next plain rerun (which finds it
// ended: the --new command, as the store's writer, worked it too).
func TestRerunNewStartsAnotherRun(t *testing.T) {
	t.Parallel()
	c, wf, input, _ := rerunSetup(t)
	first := killAfterStep(t, c, "a", wf, "--input", input)
	out, errOut := c.must(0, "run", wf, "--input", input, "--new", "--json")
	if strings.Contains(errOut, "resuming") || strings.Contains(out, first) && strings.Contains(out, `"resumed":true`) {
		t.Fatalf("--new resumed the interrupted run:\n%s\n%s", out, errOut)
	}
	_, errOut = c.must(0, "run", wf, "--input", input)
	if !strings.Contains(errOut, "resuming run "+first) && !strings.Contains(errOut, "run "+first+" of this command was interrupted and has ended since") {
		t.Fatalf("the plain rerun did not report the interrupted run %s:\n%s", first, errOut)
	}
	list, _ := c.must(0, "list", "--json")
	if n := strings.Count(list, `"run"`); n != 2 {
		t.Fatalf("%d runs; want the interrupted one and the --new one:\n%s", n, list)
	}
}

// A run whose command died and that another process finished is reported
// by the command started again, not run a second time.
func TestRerunReportsARunFinishedMeanwhile(t *testing.T) {
	t.Parallel()
	c, wf, input, log := rerunSetup(t)
	runID := killAfterStep(t, c, "a", wf, "--input", input)
	c.must(0, "worker", "--idle-exit")
	before := logLines(t, log)
	out, errOut := c.must(0, "run", wf, "--input", input)
	if !strings.Contains(errOut, "run "+runID+" of this command was interrupted and has ended since") || strings.TrimSpace(out) != "ok" {
		t.Fatalf("rerun after the worker finished the run:\nstdout %q\nstderr %s", out, errOut)
	}
	if after := logLines(t, log); len(after) != len(before) {
		t.Fatalf("the rerun ran steps again: %v, then %v", before, after)
	}
}
