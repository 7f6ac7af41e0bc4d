package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/server/client"
)

// killWaitWorkflow marks a step, waits for a signal, marks another; the
// marks name the serve process that ran the step (TQW_TEST_PROC).
const killWaitWorkflow = `tqw: v1
name: killwait
input: {type: object, required: [log], properties: {log: {type: string}}}
secrets: [TQW_TEST_PROC]
steps:
  - id: before
    action: shell
    with:
      command: 'printf "%s %s before\n" "$PROC" "$RUN" >> "$LOG"'
      env: {PROC: "${ secrets.TQW_TEST_PROC }", RUN: "${ run.id }", LOG: "${ input.log }"}
  - id: ask
    action: wait_signal
    with:
      key: "go:${ run.id }"
      timeout: 1h
      schema: {type: object, required: [approved], properties: {approved: {type: boolean}}}
  - id: after
    action: shell
    with:
      command: 'printf "%s %s after\n" "$PROC" "$RUN" >> "$LOG"'
      env: {PROC: "${ secrets.TQW_TEST_PROC }", RUN: "${ run.id }", LOG: "${ input.log }"}
  - id: done
    succeed: "${ output.exit_code == 0 }"
`

// killProgressWorkflow is a run in progress: a mark, a nap that spans
// the kill, another mark.
const killProgressWorkflow = `tqw: v1
name: killprogress
input: {type: object, required: [log], properties: {log: {type: string}}}
secrets: [TQW_TEST_PROC]
steps:
  - id: one
    action: shell
    with:
      command: 'printf "%s %s one\n" "$PROC" "$RUN" >> "$LOG"'
      env: {PROC: "${ secrets.TQW_TEST_PROC }", RUN: "${ run.id }", LOG: "${ input.log }"}
  - id: nap
    action: sleep
    with: {duration: 1500ms}
  - id: two
    action: shell
    with:
      command: 'printf "%s %s two\n" "$PROC" "$RUN" >> "$LOG"'
      env: {PROC: "${ secrets.TQW_TEST_PROC }", RUN: "${ run.id }", LOG: "${ input.log }"}
  - id: done
    succeed: ok
`

// TestServeSIGKILL kills a real serve process (SIGKILL) while one run
// waits on a signal and others are in progress, then starts a new serve
// on the same store: it takes the writer lease at once, its API answers,
// the waiting run gets its signal over HTTP and succeeds, every run
// succeeds, and no step the first process reported done (in a run's
// history over the API) ran again.
func TestServeSIGKILL(t *testing.T) {
	t.Parallel()
	crashtest.Parent(t, "TQW_SERVE_KILL_CHILD")
	testServeSIGKILL(t, newCLI(t))
}

// TestServeSIGKILLS3 is TestServeSIGKILL on the test S3 server, whose
// lease is an object rather than a file lock.
func TestServeSIGKILLS3(t *testing.T) {
	t.Parallel()
	crashtest.Parent(t, "TQW_SERVE_KILL_CHILD")
	c, store := newS3CLI(t)
	c.open = func() (objstore.Store, error) { return store, nil }
	testServeSIGKILL(t, c)
}

func testServeSIGKILL(t *testing.T, c *cli) {
	wfDir := filepath.Join(c.dir, "wf")
	if err := os.MkdirAll(wfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"killwait.yaml": killWaitWorkflow, "killprogress.yaml": killProgressWorkflow} {
		if err := os.WriteFile(filepath.Join(wfDir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	marks := filepath.Join(c.dir, "marks.log")
	input := []byte(fmt.Sprintf(`{"log":%q}`, marks))
	ctx := context.WithoutCancel(t.Context())

	first, addr := startServe(t, c.with("TQW_TEST_PROC="+procName(1)))
	api := client.New(addr, client.Options{})
	if _, err := api.Submit(ctx, client.SubmitRequest{Workflow: "killwait.yaml", RunID: "kw", Input: input}); err != nil {
		t.Fatal(err)
	}
	const progress = 4
	for i := range progress {
		if _, err := api.Submit(ctx, client.SubmitRequest{Workflow: "killprogress.yaml", RunID: fmt.Sprintf("kp%d", i), Input: input}); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, "kw waiting and every progress run past its first step", func() bool {
		run, err := api.Run(ctx, "kw")
		if err != nil || run.State != "waiting" {
			return false
		}
		for i := range progress {
			h, err := api.History(ctx, fmt.Sprintf("kp%d", i))
			if err != nil || len(h) == 0 {
				return false
			}
		}
		return true
	})
	// What the API reported done before the kill.
	reported := map[string]bool{} // "run step"
	for _, id := range []string{"kw", "kp0", "kp1", "kp2", "kp3"} {
		h, err := api.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range h {
			reported[id+" "+r.Step] = true
		}
	}
	inProgress := 0
	for i := range progress {
		if !reported[fmt.Sprintf("kp%d two", i)] {
			inProgress++
		}
	}
	if inProgress == 0 {
		t.Fatalf("every progress run was past its nap before the kill: nothing was in progress (history %v)", reported)
	}
	first.kill9()
	if ws, ok := first.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the first serve ended %v, not by SIGKILL", first.cmd.ProcessState)
	}

	second, addr2 := startServe(t, c.with("TQW_TEST_PROC="+procName(2)))
	defer second.cmd.Process.Kill()
	api2 := client.New(addr2, client.Options{})
	if err := api2.Readyz(ctx); err != nil {
		t.Fatalf("the new serve is not ready on the store the killed one held: %v (running %v)\n%s", err, second.running(), second.stderr())
	}
	if res, err := api2.Signal(ctx, "go:kw", []byte(`{"approved":true}`), true); err != nil || res.Delivered != "now" {
		t.Fatalf("signal over HTTP after the kill: %+v %v", res, err)
	}
	for _, id := range []string{"kw", "kp0", "kp1", "kp2", "kp3"} {
		pollUntil(t, id+" succeeded after the restart", func() bool {
			run, err := api2.Run(ctx, id)
			if err == nil && (run.State == "failed" || run.State == "cancelled") {
				t.Fatalf("run %s ended %s: %v", id, run.State, run.Error)
			}
			return err == nil && run.State == "succeeded"
		})
	}

	ran := map[string][]string{} // "run step" -> processes
	for _, line := range crashtest.ReadLines(t, marks) {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("marks line %q", line)
		}
		ran[f[1]+" "+f[2]] = append(ran[f[1]+" "+f[2]], f[0])
	}
	steps := map[string][]string{"kw": {"before", "after"}}
	for i := range progress {
		steps[fmt.Sprintf("kp%d", i)] = []string{"one", "two"}
	}
	for id, names := range steps {
		for _, s := range names {
			k := id + " " + s
			switch procs := ran[k]; {
			case len(procs) == 0:
				t.Errorf("step %s never ran", k)
			case reported[k] && (len(procs) != 1 || procs[0] != procName(1)):
				t.Errorf("step %s was reported done before the kill but ran in %v", k, procs)
			}
		}
	}
	if procs := ran["kw after"]; len(procs) != 1 || procs[0] != procName(2) {
		t.Errorf("the signalled step ran in %v, want once in the new serve", procs)
	}
	if !reported["kw before"] {
		t.Errorf("the waiting run's first step was not in its history before the kill")
	}
}
