package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/internal/tqwdslbin"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// tqwBin is the tqw-dsl binary of the end-to-end tests (tqwdslbin.Path).
var tqwBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tqw-dsl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if tqwBin, err = tqwdslbin.Path(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const testdata = "../../interpreter/testdata/"

// cli runs the tqw-dsl binary in its own folder.
type cli struct {
	t     *testing.T
	dir   string
	store string
	env   []string
	// open opens the store in the test process (nil: storeurl.Open).
	open func() (objstore.Store, error)
}

// openStore opens c's store in the test process.
func (c *cli) openStore() objstore.Store {
	c.t.Helper()
	var s objstore.Store
	var err error
	if c.open != nil {
		s, err = c.open()
	} else {
		s, err = storeurl.Open(context.Background(), c.store)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

func newCLI(t *testing.T) *cli {
	dir := t.TempDir()
	return &cli{t: t, dir: dir, store: "file://" + filepath.Join(dir, "store"),
		env: []string{"TQW_STORE=", "OPENAI_API_KEY=sk-test-key", "API_TOKEN=tok-s3cr3t-9876"}}
}

// run runs tqw-dsl args... with --store and returns exit code, stdout, stderr.
func (c *cli) run(args ...string) (int, string, string) {
	c.t.Helper()
	// Longer than answerTimeout, so a command waiting for a writer's
	// answer reports why it gave up instead of being killed.
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tqwBin, append(args, "--store", c.store)...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("tqw-dsl %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// must runs tqw-dsl and requires exit code want.
func (c *cli) must(want int, args ...string) (string, string) {
	c.t.Helper()
	code, out, errOut := c.run(args...)
	if code != want {
		c.t.Fatalf("tqw-dsl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out, errOut
}

// snapshot lists every file under the store with its size and bytes' hash.
func (c *cli) snapshot() string {
	c.t.Helper()
	root := strings.TrimPrefix(c.store, "file://")
	var lines []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		lines = append(lines, fmt.Sprintf("%s %d %x", strings.TrimPrefix(p, root), len(b), b))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func abs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRunHello(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out, _ := c.must(0, "run", abs(t, "../../workflows/hello.yaml"))
	if out != "Hello, world!\n" {
		t.Fatalf("stdout %q", out)
	}
	out, _ = c.must(0, "run", abs(t, "../../workflows/hello.yaml"), "--input", `{"name": "Ann"}`, "--run-id", "ann", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last endEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Status != "succeeded" || string(last.Result) != `"Hello, Ann!"` || last.RunID != "ann" {
		t.Fatalf("last event %+v", last)
	}
	starts, ends := strings.Count(out, `"event":"start"`), strings.Count(out, `"event":"end"`)
	if starts != 4 || ends != 4 {
		t.Fatalf("%d start and %d end events; want 4 each:\n%s", starts, ends, out)
	}
	hist, _ := c.must(0, "history", "ann")
	for _, want := range []string{"pick", "route", "greet ", "done", "succeeded", `"stdout":"Hello, Ann!\n"`} {
		if !strings.Contains(hist, want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}
	// The pure steps fold into the runtime step before them (pick and
	// route into the first, done into greet's): a record each, in order.
	histJSON, _ := c.must(0, "history", "ann", "--json")
	var places []string
	for _, line := range strings.Split(strings.TrimSpace(histJSON), "\n") {
		var r struct {
			Step   string `json:"step"`
			N, Seq int
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("history --json line %q: %v", line, err)
		}
		places = append(places, fmt.Sprintf("%s@%d.%d", r.Step, r.N, r.Seq))
	}
	if got := strings.Join(places, " "); got != "pick@0.0 route@0.1 greet@1.0 done@1.1" {
		t.Errorf("history --json records at %s; want pick@0.0 route@0.1 greet@1.0 done@1.1", got)
	}
	status, _ := c.must(0, "status", "ann", "--json")
	if !strings.Contains(status, `"state":"succeeded"`) || !strings.Contains(status, `"result":"Hello, Ann!"`) ||
		!strings.Contains(status, `"last_step":{"step":"done","attempt":1,"outcome":"succeeded"}`) {
		t.Errorf("status %s", status)
	}
	list, _ := c.must(0, "list", "--status", "succeeded")
	if strings.Count(list, "succeeded") != 2 {
		t.Errorf("list:\n%s", list)
	}
}

func TestRunHTTP(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	orderCalls, refunds := 0, map[string]int{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/order":
			orderCalls++
			if orderCalls == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintf(w, `{"amount": 120, "auth": %q}`, r.Header.Get("Authorization"))
		case "/refund":
			refunds[r.Header.Get("Idempotency-Key")]++
			fmt.Fprint(w, `{"id": "rf-1"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	c := newCLI(t)
	out, _ := c.must(0, "run", abs(t, testdata+"e2e_http.yaml"), "--input", `{"url": "`+ts.URL+`"}`, "--run-id", "h1")
	if strings.TrimSpace(out) != `{"amount":120,"note":"missing was 404","refund":"rf-1"}` {
		t.Fatalf("result %q", out)
	}
	if orderCalls != 2 || len(refunds) != 1 || refunds["h1/post"] != 1 {
		t.Fatalf("order calls %d, refunds by idempotency key %v", orderCalls, refunds)
	}
	hist, _ := c.must(0, "history", "h1", "--json")
	if strings.Contains(hist, "tok-s3cr3t-9876") || !strings.Contains(hist, "Bearer ***") {
		t.Fatalf("history leaks the secret or lacks ***:\n%s", hist)
	}
	if strings.Contains(c.snapshot(), fmt.Sprintf("%x", "tok-s3cr3t-9876")) {
		t.Fatal("a file in the store holds the secret")
	}
	if n := strings.Count(hist, `"outcome":"retry"`); n != 1 {
		t.Fatalf("%d retry records; want 1:\n%s", n, hist)
	}
}

func TestRunLLM(t *testing.T) {
	t.Parallel()
	fake := llmfake.New()
	defer fake.Close()
	fake.FailNext(1, http.StatusTooManyRequests)
	c := newCLI(t)
	c.env = append(c.env, "OPENAI_BASE_URL="+fake.URL())
	fake.Enqueue(llmfake.Reply{Status: 500, Content: "overloaded"},
		llmfake.Reply{Content: `{"label": "bug"}`, Usage: llmfake.Usage{PromptTokens: 11, CompletionTokens: 4}})
	out, _ := c.must(0, "run", abs(t, testdata+"e2e_llm.yaml"), "--input", `{"message": "it crashes"}`)
	if strings.TrimSpace(out) != `{"finish":"stop","label":"bug","tokens":15}` {
		t.Fatalf("result %q", out)
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests; want 3 (429, 500, then the answer)", len(reqs))
	}
	last := reqs[2]
	if last.Authorization != "Bearer sk-test-key" || last.ResponseFormat == nil || len(last.Messages) != 2 {
		t.Fatalf("request %+v", last)
	}
	// Invalid structured output is not retried and fails the run.
	fake.Enqueue(llmfake.Reply{Content: `{"label": "weather"}`})
	code, _, errOut := c.run("run", abs(t, testdata+"e2e_llm.yaml"), "--input", `{"message": "x"}`)
	if code != exitFailed || !strings.Contains(errOut, "llm.invalid_output") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
}

func TestRunSleepForeachAndCall(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out, _ := c.must(0, "run", abs(t, testdata+"e2e_sleep.yaml"))
	if strings.TrimSpace(out) != "a-0,b-1,c-2" {
		t.Fatalf("sleep/foreach result %q", out)
	}
	out, _ = c.must(0, "run", abs(t, testdata+"e2e_parent.yaml"), "--input", `{"word": "quiet"}`, "--run-id", "p1")
	if strings.TrimSpace(out) != "parent got QUIET" {
		t.Fatalf("call result %q", out)
	}
	hist, _ := c.must(0, "history", "p1:kid:0")
	if !strings.Contains(hist, "shout") {
		t.Fatalf("child history:\n%s", hist)
	}
}

func TestWaitSignalCancelAndErrors(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wf := abs(t, testdata+"e2e_wait.yaml")
	c.must(0, "run", wf, "--detach", "--run-id", "w1")
	c.must(0, "run", wf, "--detach", "--run-id", "w2")
	// The runs register their waits when a worker takes their first step.
	c.must(0, "worker", "--idle-exit")
	status, _ := c.must(0, "status", "w1")
	if !strings.Contains(status, "waiting") || !strings.Contains(status, "w1:ask") {
		t.Fatalf("status:\n%s", status)
	}

	before := c.snapshot()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"signal", "w1:ask", `{"approved": `}, exitUsage, "not valid JSON"},
		{[]string{"signal", "w1:ask", `{"approved": "yes"}`}, exitUsage, "does not match the schema"},
		{[]string{"signal", "w1:ask", "@/no/such/file"}, exitUsage, "no such file"},
		{[]string{"cancel", "nope"}, exitFailed, `no run "nope"`},
		{[]string{"status", "nope"}, exitFailed, `no run "nope"`},
		{[]string{"history", "nope"}, exitFailed, `no run "nope"`},
		{[]string{"status", "bad/id"}, exitUsage, "invalid run id"},
		{[]string{"list", "--status", "sleeping"}, exitUsage, "want one or more of"},
		{[]string{"run", abs(t, "../../dsl/testdata/invalid/schema_unknown_with_field.yaml")}, exitUsage, "unknown field"},
		{[]string{"run", filepath.Join(c.dir, "missing.yaml")}, exitUsage, "no such file"},
		{[]string{"run", abs(t, testdata+"e2e_http.yaml"), "--input", `{"url": 5}`}, exitUsage, "input"},
		{[]string{"run", abs(t, testdata+"e2e_http.yaml"), "--input", `{"url"`}, exitUsage, "not valid JSON"},
		{[]string{"run", abs(t, "../../workflows/hello.yaml"), "--no-shell"}, exitUsage, "--no-shell"},
		{[]string{"run", abs(t, "../../workflows/hello.yaml"), "--run-id", "a b"}, exitUsage, "run id"},
		{[]string{"submit", abs(t, testdata+"e2e_http.yaml")}, exitUsage, "missing property 'url'"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("tqw-dsl %s: exit %d (want %d), stderr %q (want %q), stdout %q", strings.Join(tc.args, " "), code, tc.code, errOut, tc.want, out)
		}
		if strings.Count(strings.TrimSpace(errOut), "tqw-dsl:") != 1 {
			t.Errorf("tqw-dsl %s: want one error message, got:\n%s", strings.Join(tc.args, " "), errOut)
		}
	}
	if after := c.snapshot(); after != before {
		t.Fatal("a rejected command changed the store")
	}

	out, _ := c.must(0, "signal", "w1:ask", `{"approved": true}`)
	if !strings.Contains(out, "w1:ask") {
		t.Fatalf("signal: %q", out)
	}
	c.must(0, "cancel", "w2")
	code, _, errOut := c.run("cancel", "w2")
	if code != exitFailed || !strings.Contains(errOut, "already ended: cancelled") {
		t.Fatalf("second cancel: exit %d %s", code, errOut)
	}
	out, _ = c.must(0, "run", wf, "--run-id", "w1") // follows the active run
	if strings.TrimSpace(out) != "approved" {
		t.Fatalf("following w1: %q", out)
	}
	status, _ = c.must(0, "status", "w1", "--json")
	if !strings.Contains(status, `"state":"succeeded"`) || !strings.Contains(status, `"result":"approved"`) {
		t.Fatalf("w1 after the signal: %s", status)
	}
	status, _ = c.must(0, "status", "w2", "--json")
	if !strings.Contains(status, `"state":"cancelled"`) {
		t.Fatalf("w2 after cancel: %s", status)
	}

	// run exits 3 for a run cancelled while it follows it, 1 for a failed one.
	c.must(0, "submit", wf, "--run-id", "w3")
	c.must(0, "worker", "--idle-exit")
	c.must(0, "signal", "w3:ask", `{"approved": false}`)
	code, _, errOut = c.run("run", wf, "--run-id", "w3")
	if code != exitFailed || !strings.Contains(errOut, "rejected") {
		t.Fatalf("following w3: exit %d, %s", code, errOut)
	}
}

func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "submit", abs(t, "../../workflows/hello.yaml"), "--run-id", "h1")
	cmd := exec.Command(tqwBin, "worker", "--store", c.store)
	cmd.Dir = c.dir
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Follow the run from another process through the read-only view.
	pollUntil(t, "the worker finishing run h1", func() bool {
		code, out, _ := c.run("status", "h1", "--json")
		return code == 0 && strings.Contains(out, `"succeeded"`)
	})
	// A second worker is refused instead of fencing this one.
	code, _, errOut2 := c.run("worker")
	if code != exitFailed || !strings.Contains(errOut2, "a second worker would fence it") {
		t.Fatalf("worker while a worker runs: exit %d, %s", code, errOut2)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "stopped") {
		t.Fatalf("worker stderr: %s", errOut.String())
	}
}
