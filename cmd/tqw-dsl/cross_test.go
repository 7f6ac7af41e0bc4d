package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// waitDeadline bounds the tests' waits for a process's output or a run's
// state: generous, for a 2-core CI host running every package's tests
// under -race at once; a passing test never waits for it.
const waitDeadline = time.Minute

// pollUntil polls cond (every 20 ms, up to waitDeadline) until it holds;
// what names it in the failure. Every CLI test's bounded wait uses it.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitDeadline)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %v", what, waitDeadline)
		}
	}
}

// bg is a tqw-dsl process running in the background.
type bg struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  lockedBuffer
	mu   sync.Mutex
	errs []string // stderr lines so far
	line chan string
	done chan struct{}
	code int
}

// start runs tqw-dsl args... --store in the background.
func (c *cli) start(args ...string) *bg {
	c.t.Helper()
	p := &bg{t: c.t, line: make(chan string, 1000), done: make(chan struct{})}
	p.cmd = exec.Command(tqwBin, append(args, "--store", c.store)...)
	p.cmd.Dir = c.dir
	p.cmd.Env = append(p.cmd.Environ(), c.env...)
	p.cmd.Stdout = &p.out
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.errs = append(p.errs, sc.Text())
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		err := p.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
		close(p.line)
	}()
	c.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine waits for a stderr line containing want.
func (p *bg) waitLine(want string) {
	p.t.Helper()
	timeout := time.NewTimer(waitDeadline)
	defer timeout.Stop()
	for {
		select {
		case l, ok := <-p.line:
			if !ok {
				p.t.Fatalf("%v exited (%d) before printing %q:\n%s", p.cmd.Args, p.code, want, p.stderr())
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout.C:
			p.t.Fatalf("%v did not print %q in %v:\n%s", p.cmd.Args, want, waitDeadline, p.stderr())
		}
	}
}

func (p *bg) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.errs, "\n")
}

// wait waits for the process to exit and returns its code, stdout and stderr.
func (p *bg) wait() (int, string, string) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * waitDeadline):
		p.t.Fatalf("%v did not exit:\n%s", p.cmd.Args, p.stderr())
	}
	return p.code, p.out.String(), p.stderr()
}

// stdout returns what the process printed on stdout so far.
func (p *bg) stdout() string { return p.out.String() }

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running reports whether the process has not exited.
func (p *bg) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// statusJSON is the part of status --json the tests read.
type statusJSON struct {
	State     string          `json:"state"`
	SignalKey string          `json:"signal_key"`
	Result    json.RawMessage `json:"result"`
}

// awaitState polls status --json RUN (a bounded loop, no sleeps: each
// poll is a process run) until the run is in one of states.
func (c *cli) awaitState(runID string, states ...string) statusJSON {
	c.t.Helper()
	deadline := time.Now().Add(waitDeadline)
	var last string
	for time.Now().Before(deadline) {
		code, out, errOut := c.run("status", runID, "--json")
		last = out + errOut
		if code == 0 {
			var st statusJSON
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				c.t.Fatalf("status --json %s: %v\n%s", runID, err, out)
			}
			for _, s := range states {
				if st.State == s {
					return st
				}
			}
		}
	}
	c.t.Fatalf("run %s did not reach %v in %v; last status:\n%s", runID, states, waitDeadline, last)
	return statusJSON{}
}

// TestCommandsWhileAWorkerRuns runs a worker in one process and drives it
// from others: submit, signal, cancel and run go through the store's inbox,
// status, history and list read the store, and the worker is never fenced.
func TestCommandsWhileAWorkerRuns(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wait := abs(t, testdata+"e2e_wait.yaml")
	hello := abs(t, "../../workflows/hello.yaml")
	w := c.start("worker", "--inbox-poll", "200ms")
	w.waitLine("working")

	// A second worker is refused instead of fencing the first.
	code, _, errOut := c.run("worker")
	if code != exitFailed || !strings.Contains(errOut, "a second worker would fence it") || !strings.Contains(errOut, "tqw-dsl-worker-") {
		t.Fatalf("second worker: exit %d, %s", code, errOut)
	}

	// submit through the inbox; the worker takes the runs' first steps.
	out, _ := c.must(0, "submit", wait, "--run-id", "w1")
	if strings.TrimSpace(out) != "w1" {
		t.Fatalf("submit: %q", out)
	}
	out, _ = c.must(0, "submit", wait, "--run-id", "w2", "--json")
	if !strings.Contains(out, `"new":true`) {
		t.Fatalf("submit --json: %q", out)
	}
	out, _ = c.must(0, "submit", wait, "--run-id", "w2", "--json")
	if !strings.Contains(out, `"new":false`) {
		t.Fatalf("submit of an active run: %q", out)
	}
	// The writer's rejection comes back with the usual exit code.
	code, _, errOut = c.run("submit", wait, "--run-id", "w2", "--input", `{"other": 1}`)
	if code != exitUsage || !strings.Contains(errOut, "in use by an active run") {
		t.Fatalf("submit with another input: exit %d, %s", code, errOut)
	}
	st := c.awaitState("w1", "waiting")
	if st.SignalKey != "w1:ask" {
		t.Fatalf("w1 waits on %q", st.SignalKey)
	}
	c.awaitState("w2", "waiting")

	// signal: the payload is checked first, then delivered by the worker.
	code, _, errOut = c.run("signal", "w1:ask", `{"approved": "yes"}`)
	if code != exitUsage || !strings.Contains(errOut, "does not match the schema") {
		t.Fatalf("bad signal: exit %d, %s", code, errOut)
	}
	out, _ = c.must(0, "signal", "w1:ask", `{"approved": true}`)
	if !strings.Contains(out, `signal "w1:ask" delivered`) {
		t.Fatalf("signal: %q", out)
	}
	st = c.awaitState("w1", "succeeded")
	if string(st.Result) != `"approved"` {
		t.Fatalf("w1 result %s", st.Result)
	}
	// A finished run's id is refused before anything is sent.
	code, _, errOut = c.run("submit", wait, "--run-id", "w1")
	if code != exitUsage || !strings.Contains(errOut, "fresh run id") {
		t.Fatalf("submit of a finished run id: exit %d, %s", code, errOut)
	}
	hist, _ := c.must(0, "history", "w1")
	for _, want := range []string{"ask", "wait_signal", "waiting", "approved", "succeeded"} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}
	// A signal nobody waits for yet is buffered by the worker.
	out, _ = c.must(0, "signal", "later:key", `1`, "--json")
	var sig signalOutcome
	if err := json.Unmarshal([]byte(out), &sig); err != nil || sig.Key != "later:key" || sig.Outcome != "buffered" || sig.Expires == nil || !sig.Expires.After(time.Now()) {
		t.Fatalf("early signal --json: %q (%v)", out, err)
	}

	// cancel.
	out, _ = c.must(0, "cancel", "w2")
	if !strings.Contains(out, "run w2 cancelled") {
		t.Fatalf("cancel: %q", out)
	}
	c.awaitState("w2", "cancelled")
	code, _, errOut = c.run("cancel", "w2")
	if code != exitFailed || !strings.Contains(errOut, "already ended: cancelled") {
		t.Fatalf("second cancel: exit %d, %s", code, errOut)
	}

	// run sends the run to the worker and follows it.
	out, errOut = c.must(0, "run", hello, "--input", `{"name": "Bo"}`)
	if out != "Hello, Bo!\n" || !strings.Contains(errOut, "sent to writer tqw-dsl-worker-") {
		t.Fatalf("run: stdout %q, stderr %q", out, errOut)
	}
	out, _ = c.must(0, "run", hello, "--run-id", "hj", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last endEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Status != "succeeded" || string(last.Result) != `"Hello, world!"` || last.RunID != "hj" {
		t.Fatalf("run --json end %+v", last)
	}
	if starts, ends := strings.Count(out, `"event":"start"`), strings.Count(out, `"event":"end"`); starts != 4 || ends != 4 {
		t.Fatalf("%d start and %d end events; want 4 each (from the history):\n%s", starts, ends, out)
	}
	out, _ = c.must(0, "run", hello, "--detach", "--run-id", "hd")
	if strings.TrimSpace(out) != "hd" {
		t.Fatalf("run --detach: %q", out)
	}
	c.awaitState("hd", "succeeded")

	// run follows to the same exit codes: 1 failed, 3 cancelled.
	r3 := c.start("run", wait, "--run-id", "w3")
	c.awaitState("w3", "waiting")
	out, _ = c.must(0, "signal", "w3:ask", `{"approved": false}`, "--json")
	if strings.TrimSpace(out) != `{"key":"w3:ask","outcome":"delivered"}` {
		t.Fatalf("signal --json: %q", out)
	}
	if code, _, errOut := r3.wait(); code != exitFailed || !strings.Contains(errOut, "run w3 failed: rejected") {
		t.Fatalf("run of a rejected w3: exit %d, %s", code, errOut)
	}
	r4 := c.start("run", wait, "--run-id", "w4")
	c.awaitState("w4", "waiting")
	c.must(0, "cancel", "w4")
	if code, _, errOut := r4.wait(); code != exitCancelled || !strings.Contains(errOut, "run w4 was cancelled") {
		t.Fatalf("run of a cancelled w4: exit %d, %s", code, errOut)
	}

	list, _ := c.must(0, "list")
	for _, want := range []string{"w1", "w2", "w3", "w4", "hj", "hd"} {
		if !strings.Contains(list, want) {
			t.Errorf("list lacks %s:\n%s", want, list)
		}
	}

	// The worker was never fenced: it is still running and stops cleanly.
	if !w.running() {
		t.Fatalf("the worker exited:\n%s", w.stderr())
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = w.wait()
	if code != 0 || !strings.Contains(errOut, "stopped; every finished step is durable") {
		t.Fatalf("worker after SIGTERM: exit %d\n%s", code, errOut)
	}
	if strings.Contains(errOut, "level=ERROR") || strings.Contains(errOut, "fenced") {
		t.Fatalf("worker logged an error:\n%s", errOut)
	}
	// With no writer left, commands open the store themselves again.
	c.must(0, "submit", hello, "--run-id", "after")
	c.must(0, "worker", "--idle-exit")
	c.awaitState("after", "succeeded")
}

// TestRunTakesOverFromAStoppedWorker follows a run in a worker, stops the
// worker, and checks that run finishes the run itself.
func TestRunTakesOverFromAStoppedWorker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wait := abs(t, testdata+"e2e_wait.yaml")
	w := c.start("worker", "--inbox-poll", "200ms")
	w.waitLine("working")
	r := c.start("run", wait, "--run-id", "t1")
	r.waitLine("sent to writer")
	c.awaitState("t1", "waiting")
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := w.wait(); code != 0 {
		t.Fatalf("worker: exit %d\n%s", code, errOut)
	}
	r.waitLine("working it here")
	// run is the writer now: the signal reaches it through its inbox.
	if code, out, errOut := c.run("signal", "t1:ask", `{"approved": true}`); code != 0 || !strings.Contains(out, "delivered") {
		rc, rout, rerr := r.wait()
		t.Fatalf("signal: exit %d, %q, %s\nrun: exit %d, %q\n%s", code, out, errOut, rc, rout, rerr)
	}
	code, out, errOut := r.wait()
	if code != 0 || strings.TrimSpace(out) != "approved" {
		t.Fatalf("run after the takeover: exit %d, stdout %q\n%s", code, out, errOut)
	}
}

// TestBriefCommandsWaitForEachOther holds the store as a brief command
// would (submit, signal, cancel) and checks that another command waits for
// it to finish instead of sending it a command it would never answer.
func TestBriefCommandsWaitForEachOther(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "TQW_LOG=info")
	hello := abs(t, "../../workflows/hello.yaml")
	ctx := context.Background()
	store, err := storeurl.Open(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	held, err := lease.Acquire(ctx, store, lease.Options{Owner: "tqw-dsl-" + briefOwner + "-TEST"})
	if err != nil {
		t.Fatal(err)
	}
	p := c.start("submit", hello, "--run-id", "b1")
	p.waitLine("waiting for a brief tqw-dsl command")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := p.wait(); code != 0 || strings.TrimSpace(out) != "b1" {
		t.Fatalf("submit after the brief holder: exit %d, %q\n%s", code, out, errOut)
	}
	if objs, err := store.List(ctx, remote.DefaultInboxPrefix+"/", "", 10); err != nil || len(objs) != 0 {
		t.Fatalf("the submit went to the inbox: %v %v", objs, err)
	}
	c.must(0, "worker", "--idle-exit")
	c.awaitState("b1", "succeeded")
}

// TestRunTakesOverAnUnansweredSubmit holds the store as a writer that
// serves no inbox, lets run send its submission there, then gives the
// store up: run notices, applies its own submission from the inbox and
// finishes the run itself.
func TestRunTakesOverAnUnansweredSubmit(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ctx := context.Background()
	store, err := storeurl.Open(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	held, err := lease.Acquire(ctx, store, lease.Options{Owner: "tqw-dsl-worker-TEST"})
	if err != nil {
		t.Fatal(err)
	}
	r := c.start("run", abs(t, "../../workflows/hello.yaml"), "--run-id", "u1")
	// The submission reaches the inbox.
	pollUntil(t, "run sending its submission to the inbox", func() bool {
		objs, err := store.List(ctx, remote.DefaultInboxPrefix+"/", "", 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs) == 1
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := r.wait()
	if code != 0 || out != "Hello, world!\n" || !strings.Contains(errOut, "working it here") {
		t.Fatalf("run: exit %d, stdout %q\n%s", code, out, errOut)
	}
	if objs, err := store.List(ctx, remote.DefaultInboxPrefix+"/", "", 1); err != nil || len(objs) != 0 {
		t.Fatalf("inbox after the takeover: %v %v", objs, err)
	}
	// The run was submitted once: its history has one record per step.
	hist, _ := c.must(0, "history", "u1")
	if n := strings.Count(hist, "attempt 1"); n != 4 || strings.Contains(hist, "attempt 2") {
		t.Fatalf("history:\n%s", hist)
	}
}
