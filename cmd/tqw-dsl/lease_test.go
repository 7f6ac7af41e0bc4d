package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
)

// newS3CLI is newCLI on a fresh prefix of the test S3 server (skipped
// without one); it also returns the store, for the test's own reads.
func newS3CLI(t *testing.T) (*cli, objstore.Store) {
	cfg := s3test.Config(t)
	store, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newCLI(t)
	c.store = fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=1", cfg.Bucket, cfg.Prefix, cfg.Endpoint)
	c.env = append(c.env, "AWS_ACCESS_KEY_ID="+cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+cfg.SecretKey)
	return c, store
}

// with returns a copy of c whose processes get extra environment too.
func (c *cli) with(env ...string) *cli {
	d := *c
	d.env = append(slices.Clone(c.env), env...)
	return &d
}

// kill9 SIGKILLs p and waits until it is reaped.
func (p *bg) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	p.wait()
}

// TestS3KilledWriterIsReplacedAtOnce reproduces issue 11, item 4: on S3,
// a worker killed with SIGKILL used to block the store for its 60 s lease
// (worker refused, run sat silent). A live worker is still never taken
// over: a second worker is refused and run sends it the run. Once it is
// killed, the next worker, and the next run, take over at once (the
// holder's pid is gone on this machine) without a countdown.
func TestS3KilledWriterIsReplacedAtOnce(t *testing.T) {
	t.Parallel()
	c, _ := newS3CLI(t)
	if lease.OS().Self().BootID == "" {
		t.Skip("no boot id on this platform: a killed writer is replaced after its TTL")
	}
	hello := abs(t, "../../workflows/hello.yaml")
	a := c.start("worker", "--inbox-poll", "200ms")
	a.waitLine("working")
	code, _, errOut := c.run("worker")
	if code != exitFailed || !strings.Contains(errOut, "a second worker would fence it") || !strings.Contains(errOut, "pid "+strconv.Itoa(a.cmd.Process.Pid)) {
		t.Fatalf("second worker while the first lives: exit %d\n%s", code, errOut)
	}
	out, errOut := c.must(0, "run", hello)
	if out != "Hello, world!\n" || !strings.Contains(errOut, "sent to writer tqw-dsl-worker-") {
		t.Fatalf("run while the worker lives: %q\n%s", out, errOut)
	}
	if !a.running() {
		t.Fatalf("the live worker stopped:\n%s", a.stderr())
	}
	a.kill9()

	b := c.start("worker", "--idle-exit")
	b.waitLine("working")
	code, _, errOut = b.wait()
	gone := fmt.Sprintf("its process (pid %d) is gone", a.cmd.Process.Pid)
	if code != 0 || !strings.Contains(errOut, "took the store over from writer tqw-dsl-worker-") || !strings.Contains(errOut, gone) {
		t.Fatalf("worker after the kill: exit %d\n%s", code, errOut)
	}
	if strings.Contains(errOut, "taking over in") {
		t.Fatalf("the worker counted down for a dead holder:\n%s", errOut)
	}

	// The same for run: it works the store itself at once.
	a = c.start("worker", "--inbox-poll", "200ms")
	a.waitLine("working")
	a.kill9()
	out, errOut = c.must(0, "run", hello, "--input", `{"name": "Kim"}`)
	if out != "Hello, Kim!\n" || strings.Contains(errOut, "sent to writer") || strings.Contains(errOut, "taking over in") ||
		!strings.Contains(errOut, fmt.Sprintf("its process (pid %d) is gone", a.cmd.Process.Pid)) {
		t.Fatalf("run after the kill: %q\n%s", out, errOut)
	}
}

// staleWorkflow has three shell steps; each appends "start WORKER RUN
// STEP" to the lines file, waits for the worker's gate file (GATE.WORKER)
// to exist, then appends "end WORKER RUN STEP".
func staleWorkflow() string {
	var b strings.Builder
	b.WriteString(`tqw: v1
name: stale
input:
  type: object
  required: [lines, gate]
  properties: {lines: {type: string}, gate: {type: string}}
secrets: [TQW_TEST_WORKER]
steps:
`)
	for _, id := range []string{"s1", "s2", "s3"} {
		fmt.Fprintf(&b, `  - id: %s
    action: shell
    with:
      command: ["sh", "-c", "echo \"start $W $1 $2\" >> \"$3\"; while [ ! -e \"$4.$W\" ]; do sleep 0.02; done; echo \"end $W $1 $2\" >> \"$3\"", "sh", "${ run.id }", "%s", "${ input.lines }", "${ input.gate }"]
      env: {W: "${ secrets.TQW_TEST_WORKER }"}
`, id, id)
	}
	b.WriteString(`  - id: done
    succeed: "ok"
`)
	return b.String()
}

// readLines returns the lines of path; none while it does not exist.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// TestS3StaleWorkerStartsNoStep reproduces issue 11, item 5: worker A,
// paused (SIGSTOP) past its lease, is replaced by worker B; while A is
// still paused its running steps end, so when it resumes (SIGCONT) it has
// free slots and, in its memory, runnable steps. A must start none of
// them and exit 1 saying it lost the lease; B must wait for A's TTL (A's
// pid still runs) with a countdown, and finish every run.
func TestS3StaleWorkerStartsNoStep(t *testing.T) {
	t.Parallel()
	c, store := newS3CLI(t)
	c.env = append(c.env, leaseTTLEnv+"=2s")
	wf := filepath.Join(c.dir, "stale.yaml")
	if err := os.WriteFile(wf, []byte(staleWorkflow()), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, gate := filepath.Join(c.dir, "lines"), filepath.Join(c.dir, "gate")
	open := func(worker string) {
		t.Helper()
		if err := os.WriteFile(gate+"."+worker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	input := fmt.Sprintf(`{"lines": %q, "gate": %q}`, lines, gate)
	const runs = 4
	for i := range runs {
		c.must(0, "submit", wf, "--run-id", fmt.Sprintf("r%d", i), "--input", input)
	}

	// A fills its two slots with steps that wait for its gate.
	a := c.with("TQW_TEST_WORKER=worker-A").start("worker", "--concurrency", "2", "--inbox-poll", "200ms")
	a.waitLine("working")
	pollUntil(t, "worker A starts two steps", func() bool { return countPrefix(readLines(t, lines), "start worker-A ") == 2 })
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	ctx := context.Background()
	pollUntil(t, "worker A's lease looks expired", func() bool {
		_, live, err := lease.Live(ctx, store, lease.Options{})
		return err == nil && !live
	})

	b := c.with("TQW_TEST_WORKER=worker-B").start("worker", "--concurrency", "4", "--idle-exit", "--inbox-poll", "200ms")
	b.waitLine("working")
	pollUntil(t, "worker B starts the interrupted steps", func() bool { return countPrefix(readLines(t, lines), "start worker-B ") >= 2 })
	// A's steps end while A is paused: it resumes with free slots.
	open("worker-A")
	pollUntil(t, "worker A's steps end", func() bool { return countPrefix(readLines(t, lines), "end worker-A ") == 2 })
	before := len(readLines(t, lines))

	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	code, _, errA := a.wait()
	if code != exitFailed || !strings.Contains(errA, "lease lost to writer tqw-dsl-worker-") || !strings.Contains(errA, "this process stopped working the store") {
		t.Fatalf("stale worker A: exit %d, want 1 with the lost lease\n%s", code, errA)
	}
	if got := readLines(t, lines)[before:]; countPrefix(got, "start worker-A ") != 0 {
		t.Fatalf("worker A started steps after it resumed: %q", got)
	}

	// B finishes every run once its gate opens.
	open("worker-B")
	code, _, errB := b.wait()
	if code != 0 {
		t.Fatalf("worker B: exit %d\n%s", code, errB)
	}
	for _, want := range []string{"the store is held by writer tqw-dsl-worker-", "pid " + strconv.Itoa(a.cmd.Process.Pid), "taking over in",
		"took the store over from writer tqw-dsl-worker-", "it has not renewed its lease for "} {
		if !strings.Contains(errB, want) {
			t.Errorf("worker B's stderr lacks %q:\n%s", want, errB)
		}
	}
	all := readLines(t, lines)
	if n := countPrefix(all[before:], "start worker-A "); n != 0 {
		t.Fatalf("worker A started %d steps after it resumed:\n%s", n, strings.Join(all, "\n"))
	}
	for i := range runs {
		runID := fmt.Sprintf("r%d", i)
		st := c.awaitState(runID, "succeeded", "failed", "cancelled")
		if st.State != "succeeded" {
			t.Errorf("run %s: %s", runID, st.State)
		}
		for _, step := range []string{"s2", "s3"} {
			if n := countPrefix(all, fmt.Sprintf("start worker-B %s %s", runID, step)); n != 1 {
				t.Errorf("run %s step %s started %d times by worker B:\n%s", runID, step, n, strings.Join(all, "\n"))
			}
		}
	}
	t.Logf("worker A:\n%s\nworker B:\n%s\nlines:\n%s", errA, errB, strings.Join(all, "\n"))
}
