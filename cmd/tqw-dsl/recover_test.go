package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

const flakyWorkflow = `tqw: v1
name: flaky
steps:
  - id: fetch
    action: http
    with: {url: "${ input.url }"}
  - id: done
    succeed: "${ output.body }"
`

// flakyHTTP answers 503 until fixed, then "fixed".
func flakyHTTP(t *testing.T) (*httptest.Server, *atomic.Bool) {
	var fixed atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("fixed"))
	}))
	t.Cleanup(ts.Close)
	return ts, &fixed
}

// failRun runs the flaky workflow under id until it fails at fetch.
func (c *cli) failRun(path, id, url string) {
	c.t.Helper()
	_, errOut := c.must(exitFailed, "run", path, "--run-id", id, "--input", fmt.Sprintf(`{"url": %q}`, url))
	if !strings.Contains(errOut, "fetch") {
		c.t.Fatalf("run %s: %s; want it failed at fetch", id, errOut)
	}
}

// outcomesOf is the "step:outcome" list of a run's history.
func (c *cli) outcomesOf(id string) string {
	c.t.Helper()
	out, _ := c.must(exitOK, "history", id, "--json")
	var parts []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var h struct {
			Step    string `json:"step"`
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal([]byte(line), &h); err != nil {
			c.t.Fatalf("history line %q: %v", line, err)
		}
		parts = append(parts, h.Step+":"+h.Outcome)
	}
	return strings.Join(parts, " ")
}

func TestRetrySkipAndClearThroughTheBinary(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ts, fixed := flakyHTTP(t)
	path := c.writeWorkflow("flaky.yaml", flakyWorkflow)
	c.failRun(path, "r1", ts.URL)

	bad := c.writeWorkflow("bad.yaml", "tqw: v1\nname: flaky\nsteps:\n  - id: fetch\n    action: sleep\n    with: {duration: 1s}\n")
	_, errOut := c.must(exitFailed, "retry", "r1", "--definition", bad)
	if !strings.Contains(errOut, `step "fetch" is http in the run, sleep in the new definition`) {
		t.Fatalf("incompatible retry: %s", errOut)
	}
	if st := c.awaitState("r1", "failed"); st.State != "failed" {
		t.Fatal(st.State)
	}
	fixed.Store(true)
	if out, _ := c.must(exitOK, "retry", "r1"); out != "run r1 redriven\n" {
		t.Fatalf("retry: %q", out)
	}
	c.must(exitOK, "worker", "--idle-exit")
	if st := c.awaitState("r1", "succeeded"); string(st.Result) != `"fixed"` {
		t.Fatalf("result %s", st.Result)
	}
	if got := c.outcomesOf("r1"); got != "fetch:failed fetch:redriven fetch:ok done:succeeded" {
		t.Fatalf("history %q", got)
	}
	if _, errOut := c.must(exitFailed, "retry", "r1"); !strings.Contains(errOut, "succeeded; only a failed or cancelled run can be redriven") {
		t.Fatalf("retry of a succeeded run: %s", errOut)
	}

	fixed.Store(false)
	c.failRun(path, "s1", ts.URL)
	if _, errOut := c.must(exitFailed, "skip", "s1", "done"); !strings.Contains(errOut, `at step "fetch", not "done"`) {
		t.Fatalf("skip of a step the run is not at: %s", errOut)
	}
	c.must(exitUsage, "skip", "s1", "fetch", "--output", "{not json")
	c.must(exitOK, "skip", "s1", "fetch", "--output", `{"body": "given"}`)
	c.must(exitOK, "worker", "--idle-exit")
	if st := c.awaitState("s1", "succeeded"); string(st.Result) != `"given"` {
		t.Fatalf("result after skip %s", st.Result)
	}

	c.must(exitOK, "signal", "nobody:waits", "1")
	if out, _ := c.must(exitOK, "signals", "clear", "nobody:waits"); out != "signal \"nobody:waits\" cleared\n" {
		t.Fatalf("clear: %q", out)
	}
	if out, _ := c.must(exitOK, "signals", "clear", "nobody:waits", "--json"); strings.TrimSpace(out) != `{"cleared":false,"key":"nobody:waits"}` {
		t.Fatalf("clear again: %q", out)
	}
	if out, _ := c.must(exitOK, "signals"); strings.Contains(out, "nobody:waits") {
		t.Fatalf("signals after clear:\n%s", out)
	}
}

// TestRetryKilled SIGKILLs `retry` at random moments: the run is then
// either still failed or redriven once, never half of it, and the command
// run again finishes it (or says it is done).
func TestRetryKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kill test skipped in -short mode")
	}
	c := newCLI(t)
	ts, fixed := flakyHTTP(t)
	path := c.writeWorkflow("flaky.yaml", flakyWorkflow)
	rng := crashtest.Rand(t, 26)
	const runs = 6
	for i := range runs {
		c.failRun(path, fmt.Sprintf("k%d", i), ts.URL)
	}
	fixed.Store(true)
	// The kills land within the time a whole retry takes here, measured
	// on the first run (not killed).
	began := time.Now()
	c.must(exitOK, "retry", "k0")
	span := time.Since(began)
	killed := 0
	for i := 1; i < runs; i++ {
		id := fmt.Sprintf("k%d", i)
		cmd := exec.Command(tqwBin, "retry", id, "--store", c.store)
		cmd.Dir, cmd.Env = c.dir, append(cmd.Environ(), c.env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-time.After(crashtest.Delay(rng, span)):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			killed++
		case <-exited:
		}
		// Repeated: it redrives the run unless the first one did; a
		// second redrive is refused, the run being active.
		code, _, errOut := c.run("retry", id)
		if code != exitOK && !strings.Contains(errOut, "is active; only a failed or cancelled run can be redriven") {
			t.Fatalf("retry %s again: exit %d: %s", id, code, errOut)
		}
	}
	t.Logf("%d of %d retries killed", killed, runs-1)
	c.must(exitOK, "worker", "--idle-exit")
	for i := range runs {
		id := fmt.Sprintf("k%d", i)
		c.awaitState(id, "succeeded")
		if got := c.outcomesOf(id); got != "fetch:failed fetch:redriven fetch:ok done:succeeded" {
			t.Fatalf("run %s: history %q; want one redrive", id, got)
		}
	}
	c.must(exitOK, "store", "check")
}

// TestBulkCancelKilledHalfway cancels 500 runs selected by label, kills
// the command half-way, and runs it again with the same request id: every
// run is cancelled, once.
func TestBulkCancelKilledHalfway(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kill test skipped in -short mode")
	}
	const n = 500
	c := newCLI(t)
	ctx := context.Background()
	path := c.writeWorkflow("nap.yaml", "tqw: v1\nname: nap\nsteps:\n  - id: nap\n    action: sleep\n    with: {duration: 1h}\n")
	e, err := openEngine(ctx, c.store, engineOptions{name: "test", brief: true, log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := e.it.Submit(ctx, w, map[string]any{}, fmt.Sprintf("b%03d", i), interpreter.WithLabels(map[string]string{"batch": "x"})); err != nil {
			t.Fatal(err)
		}
	}
	// One more outside the label: never touched.
	if _, err := e.it.Submit(ctx, w, map[string]any{}, "other"); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	dry, _ := c.must(exitOK, "cancel", "--label", "batch=x")
	if got := strings.Count(dry, " selected\n"); got != n {
		t.Fatalf("dry run selected %d runs; want %d", got, n)
	}

	// First pass, killed after half the runs were reported.
	first := map[string]string{}
	cmd := exec.Command(tqwBin, "cancel", "--label", "batch=x", "--yes", "--request-id", "req-1", "--store", c.store)
	cmd.Dir, cmd.Env = c.dir, append(cmd.Environ(), c.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		first[f[0]] = f[1]
		if len(first) == n/2 {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	_ = cmd.Wait()
	if len(first) != n/2 {
		t.Fatalf("the first pass reported %d runs before it ended; want to kill it at %d", len(first), n/2)
	}

	out, _ := c.must(exitOK, "cancel", "--label", "batch=x", "--yes", "--request-id", "req-1")
	second := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		second[f[0]] = f[1]
	}
	if len(second) != n {
		t.Fatalf("the second pass reported %d runs; want %d", len(second), n)
	}
	for id, o := range second {
		switch {
		case first[id] == "cancelled" && o != "done":
			t.Errorf("run %s: cancelled by the first pass, %q by the second; want done", id, o)
		case first[id] == "" && o != "cancelled" && o != "done":
			// "done": cancelled by the first pass after its last report.
			t.Errorf("run %s: %q by the second pass", id, o)
		}
	}

	v, err := openView(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	runs, err := v.insp.ListRuns(ctx, runstate.ListOptions{Labels: map[string]string{"batch": "x"}, Limit: 1000})
	if err != nil || len(runs) != n {
		t.Fatalf("list: %d runs, %v", len(runs), err)
	}
	for _, r := range runs {
		if r.State != runstate.StateCancelled {
			t.Fatalf("run %s is %s; want cancelled", r.RunID, r.State)
		}
	}
	recs, err := v.r.KVScan(ctx, "workflow/bulk/req-1/", "", 1000)
	if err != nil || len(recs) != n {
		t.Fatalf("done-records: %d, %v; want one per run", len(recs), err)
	}
	for _, r := range recs {
		var rec struct {
			Outcome string `msgpack:"o"`
		}
		if err := msgpack.Unmarshal(r.Value, &rec); err != nil || rec.Outcome != "cancelled" {
			t.Fatalf("done-record %s: %q %v; want cancelled", r.Key, rec.Outcome, err)
		}
	}
	if st, err := v.insp.Status(ctx, "other"); err != nil || st.State.Terminal() {
		t.Fatalf("the run outside the label: %v %v; want it untouched", st.State, err)
	}
	c.must(exitOK, "store", "check")
}

// While a worker holds the store, retry, skip and the bulk forms go
// through its inbox, which applies each exactly once.
func TestRecoverThroughTheInbox(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ts, fixed := flakyHTTP(t)
	path := c.writeWorkflow("flaky.yaml", flakyWorkflow)
	for _, id := range []string{"i1", "i2", "i3"} {
		c.failRun(path, id, ts.URL)
	}
	w := c.start("worker", "--inbox-poll", "200ms")
	w.waitLine("working")
	fixed.Store(true)
	c.must(exitOK, "retry", "i1")
	if st := c.awaitState("i1", "succeeded"); string(st.Result) != `"fixed"` {
		t.Fatalf("i1: %s", st.Result)
	}
	c.must(exitOK, "skip", "i2", "fetch", "--output", `{"body": "given"}`)
	if st := c.awaitState("i2", "succeeded"); string(st.Result) != `"given"` {
		t.Fatalf("i2: %s", st.Result)
	}
	out, _ := c.must(exitOK, "retry", "--workflow", "flaky", "--status", "failed", "--yes", "--request-id", "inbox-1")
	if out != "i3 redriven\n" {
		t.Fatalf("bulk retry: %q", out)
	}
	c.awaitState("i3", "succeeded")
	// Repeated over every run of the workflow: i3 is done already; the
	// others are refused (they succeeded), and the command says so.
	out, _ = c.must(exitFailed, "retry", "--workflow", "flaky", "--yes", "--request-id", "inbox-1")
	if !strings.Contains(out, "i3 done (redriven)\n") || !strings.Contains(out, "i1 skipped (") || strings.Contains(out, "i3 redriven") {
		t.Fatalf("bulk retry repeated: %q", out)
	}
	if _, errOut := c.must(exitFailed, "retry", "i1"); !strings.Contains(errOut, "only a failed or cancelled run can be redriven") {
		t.Fatalf("retry of a succeeded run through the inbox: %s", errOut)
	}
}

// skip of a run waiting at a wait_signal step: as the store's writer, and
// through a worker's inbox; the step is recorded skipped and the run goes
// on with the given output.
func TestSkipAWaitingRunThroughTheBinary(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	path := c.writeWorkflow("waits.yaml", `tqw: v1
name: waits
steps:
  - id: wait
    action: wait_signal
    with: {key: "go-${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ steps.wait.output }"
`)
	c.must(exitOK, "submit", path, "--run-id", "w1")
	c.must(exitOK, "submit", path, "--run-id", "w2")
	c.must(exitOK, "worker", "--idle-exit")
	c.awaitState("w1", "waiting")
	if _, errOut := c.must(exitFailed, "skip", "w1", "done"); !strings.Contains(errOut, `waits at step "wait", not "done"`) {
		t.Fatalf("skip of a step the run does not wait at: %s", errOut)
	}
	c.must(exitOK, "skip", "w1", "wait", "--output", `"given"`)
	c.must(exitOK, "worker", "--idle-exit")
	if st := c.awaitState("w1", "succeeded"); string(st.Result) != `"given"` {
		t.Fatalf("w1: %s", st.Result)
	}
	if got := c.outcomesOf("w1"); got != "wait:waiting wait:skipped done:succeeded" {
		t.Fatalf("history of w1: %s", got)
	}
	w := c.start("worker", "--inbox-poll", "200ms")
	w.waitLine("working")
	c.must(exitOK, "skip", "w2", "wait", "--output", `"by inbox"`)
	if st := c.awaitState("w2", "succeeded"); string(st.Result) != `"by inbox"` {
		t.Fatalf("w2: %s", st.Result)
	}
}
