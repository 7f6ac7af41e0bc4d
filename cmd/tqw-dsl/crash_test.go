package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
)

// hexLLM is "llm/" hex-encoded, as it appears in the object key of an llm
// memo entry (memo keys with a slash are stored hex-encoded).
const hexLLM = "6c6c6d2f"

// procEnv names the process that runs a step (see testdata/crash.yaml).
const procEnv = "TQW_TEST_PROC"

func procName(k int) string { return fmt.Sprintf("tqwproc-%05d", k) }

func procIndex(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "tqwproc-"))
	return n, err == nil && strings.HasPrefix(s, "tqwproc-")
}

// s3CLI is a cli on a fresh prefix of the local S3 server `make test`
// starts; the test is skipped without one.
func s3CLI(t *testing.T) *cli {
	t.Helper()
	cfg := s3test.Config(t)
	c := newCLI(t)
	c.store = fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=1", cfg.Bucket, cfg.Prefix, cfg.Endpoint)
	c.env = append(c.env, "AWS_ACCESS_KEY_ID="+cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+cfg.SecretKey)
	c.open = func() (objstore.Store, error) { return s3.New(cfg) }
	return c
}

// TestCrashKill SIGKILLs tqw-dsl at random moments while it works
// multi-step runs with http, llm, shell, foreach, sleep and call steps, on
// the file store and on the local S3 server. Half the processes are `run`
// commands that are simply started again after a kill, the way a user
// would; the others are workers. It checks that:
//
//   - no step that any process reported complete (a `run --json` end
//     event) is executed again by a later process: every http request and
//     shell side effect names the process that made it;
//   - every command, started again until it ends, ends its one run with
//     the right result: no second run appears for it;
//   - no llm call is paid again once its answer was memoized.
//
// TQW_CRASH_KILLS sets the kills per store (default 100); TQW_CRASH_SEED
// the random seed.
func TestCrashKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	kills := crashtest.Count(t, "TQW_CRASH_KILLS", 100)
	// The two stores' subtests run at once from goroutines rather than as
	// parallel subtests: those would queue for a -parallel slot again,
	// behind every other parallel test, and this is the package's longest.
	var wg sync.WaitGroup
	for _, store := range []struct {
		name string
		cli  func(*testing.T) *cli
	}{{"file", newCLI}, {"s3", s3CLI}} {
		wg.Go(func() { t.Run(store.name, func(t *testing.T) { crashKill(t, store.cli(t), kills) }) })
	}
	wg.Wait()
}

// effect is one side effect a step caused, and the process that caused it.
type effect struct {
	proc      int
	run, step string
}

// crashWorld is the test's side of the crash test: the servers the
// workflow calls and what they saw.
type crashWorld struct {
	t       *testing.T
	c       *cli
	store   objstore.Store
	seed    uint64
	log     string // the shell step's side-effect file
	httpURL string
	procs   []*crashProc // every process started, in order

	mu         sync.Mutex
	effects    []effect
	failedOnce map[string]bool
	llmCalls   map[string]int
	violations []string
}

func newCrashWorld(t *testing.T, c *cli, seed uint64) *crashWorld {
	store := c.openStore()
	w := &crashWorld{t: t, c: c, store: store, seed: seed, log: filepath.Join(c.dir, "effects.log"),
		failedOnce: map[string]bool{}, llmCalls: map[string]int{}}

	// The http server answers 500 to the first request of about a third
	// of the steps (picked by the seed), so retries run too, but never
	// twice to one Idempotency-Key (<run>/<step>[<item>]): a step sees at
	// most one injected failure per item, below its retry budget.
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if proc, ok := procIndex(r.Header.Get("X-Proc")); ok && key != "" {
			run, step, _ := strings.Cut(key, "/")
			step, _, _ = strings.Cut(step, "[")
			w.record(effect{proc: proc, run: run, step: step})
		}
		w.mu.Lock()
		fail := key != "" && !w.failedOnce[key] && fnv64(fmt.Sprint(seed, key))%3 == 0
		if fail {
			w.failedOnce[key] = true
		}
		w.mu.Unlock()
		if fail {
			http.Error(rw, "flaky", http.StatusInternalServerError)
			return
		}
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/n/"))
		if err != nil {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(rw, `{"doubled": %d}`, 2*n)
	}))
	t.Cleanup(ts.Close)
	w.httpURL = ts.URL

	fake := llmfake.New()
	t.Cleanup(fake.Close)
	promptRE := regexp.MustCompile(`^run (\S+) n `)
	fake.Handle(func(req llmfake.Request) llmfake.Reply {
		m := promptRE.FindStringSubmatch(req.Messages[len(req.Messages)-1].Content)
		if m == nil {
			return llmfake.Reply{Status: 400, Content: "unexpected prompt"}
		}
		return llmfake.Reply{Content: "answer-" + m[1]}
	})
	// A front proxy checks each request against the memo before passing it
	// to the fake. A request counts as a repeat only if its client was still
	// alive when the answer went back: a killed process's request may reach
	// the handler late, after its successor already paid and memoized.
	target, err := url.Parse(strings.TrimSuffix(fake.URL(), "/v1"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	runRE := regexp.MustCompile(`run (\S+) n `)
	front := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		m := runRE.FindSubmatch(body)
		var memo []string
		if m != nil {
			objs, err := store.List(context.Background(), "workflow-memo/"+string(m[1])+"/", "", 1000)
			if err != nil {
				t.Errorf("listing memo: %v", err)
			}
			for _, o := range objs {
				if strings.Contains(o.Key, hexLLM) {
					memo = append(memo, o.Key)
				}
			}
		}
		proxy.ServeHTTP(rw, r)
		if m == nil {
			return
		}
		runID := string(m[1])
		w.mu.Lock()
		defer w.mu.Unlock()
		w.llmCalls[runID]++
		if len(memo) > 0 && r.Context().Err() == nil {
			w.violations = append(w.violations, fmt.Sprintf("run %s: llm called again after its memo %v was written", runID, memo))
		}
	}))
	t.Cleanup(front.Close)
	c.env = append(c.env, "OPENAI_BASE_URL="+front.URL+"/v1")
	return w
}

func (w *crashWorld) record(e effect) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.effects = append(w.effects, e)
}

// input is the input of logical run n.
func (w *crashWorld) input(n int) string {
	return fmt.Sprintf(`{"url": %q, "n": %d, "log": %q}`, w.httpURL, n, w.log)
}

// want is the result of logical run n under run id runID.
func want(n int, runID string) string {
	return fmt.Sprintf(`"%d|answer-%s|2,4,6|%d"`, 2*n+1, runID, n*n)
}

// crashProc is one tqw-dsl process of the crash test.
type crashProc struct {
	k      int
	cmd    *exec.Cmd
	out    bytes.Buffer
	errOut bytes.Buffer
	exited chan error
	err    error // how it exited, once it did
}

func (w *crashWorld) start(k int, args ...string) *crashProc {
	p := &crashProc{k: k, exited: make(chan error, 1)}
	p.cmd = exec.Command(tqwBin, append(args, "--store", w.c.store)...)
	p.cmd.Dir = w.c.dir
	p.cmd.Env = append(os.Environ(), w.c.env...)
	p.cmd.Env = append(p.cmd.Env, procEnv+"="+procName(k))
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.errOut
	if err := p.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.procs = append(w.procs, p)
	go func() {
		err := p.cmd.Wait()
		p.err = err
		p.exited <- err
	}()
	return p
}

// runEvent is the part of a run --json line the test reads.
type runEvent struct {
	Event  string          `json:"event"`
	Run    string          `json:"run"`
	Step   string          `json:"step"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
}

// reports returns what p's stdout reported: the steps it showed complete
// and, when it printed its end, the run and its result.
func (p *crashProc) reports() (complete []effect, end *runEvent) {
	sc := bufio.NewScanner(bytes.NewReader(p.out.Bytes()))
	for sc.Scan() {
		var ev runEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue // a line cut by the kill
		}
		switch {
		case ev.Event == "end" && ev.Status != "retry" && ev.Status != "waiting":
			complete = append(complete, effect{proc: p.k, run: ev.Run, step: ev.Step})
		case ev.Event == "run_end":
			e := ev
			end = &e
		}
	}
	return complete, end
}

func crashKill(t *testing.T, c *cli, kills int) {
	rng := crashtest.Rand(t, 1)
	w := newCrashWorld(t, c, rng.Uint64())
	wf := abs(t, "testdata/crash.yaml")

	// Runs submitted up front by a process that is not killed must all
	// be found at the end, whichever process works them.
	const presubmitted = 6
	for i := range presubmitted {
		c.must(0, "submit", wf, "--run-id", fmt.Sprintf("p%03d", i), "--input", w.input(100+i))
	}

	// Logical runs: each is one `run` command, started again after every
	// kill until it ends. The first runs unkilled, to learn how long a
	// run takes, so kills land all over a run rather than at its start.
	k := 0
	var reported []effect
	results := map[int]string{} // logical run -> its run id, once ended
	// finish records what process p of logical run n reported and says
	// whether the command ended: it printed the run's end. A process
	// killed after printing it (while it deleted its rerun claim or
	// exited) ended its command too: its user saw the result, and the
	// same command started again would rightly start a new run.
	finish := func(n int, p *crashProc, err error) bool {
		complete, end := p.reports()
		reported = append(reported, complete...)
		right := end != nil && end.Status == "succeeded" && string(end.Result) == want(n, end.Run)
		if err != nil && !right {
			return false
		}
		if !right {
			t.Errorf("logical run %d: process %d ended with %+v; want succeeded with %s\n%s", n, p.k, end, want(n, "<run>"), p.out.String())
			return true
		}
		results[n] = end.Run
		return true
	}
	start := time.Now()
	p := w.start(k, "run", wf, "--input", w.input(0), "--json")
	finish(0, p, <-p.exited)
	k++
	span := max(time.Since(start)*3/2, 50*time.Millisecond)
	t.Logf("%d kills; an unkilled run took %v", kills, time.Since(start))

	pending := []int{}
	next := 1
	killed := 0
	for killed < kills {
		for len(pending) < 3 {
			pending = append(pending, next)
			next++
		}
		var n = -1
		if rng.IntN(3) == 0 {
			p = w.start(k, "worker")
		} else {
			n = pending[rng.IntN(len(pending))]
			p = w.start(k, "run", wf, "--input", w.input(n), "--json")
		}
		k++
		timer := time.NewTimer(time.Duration(rng.Int64N(int64(span))))
		select {
		case err := <-p.exited:
			timer.Stop()
			if n >= 0 && finish(n, p, err) {
				pending = removeInt(pending, n)
			}
		case <-timer.C:
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			err := <-p.exited
			if err != nil && strings.Contains(err.Error(), "killed") {
				killed++
			}
			if n >= 0 && finish(n, p, err) {
				pending = removeInt(pending, n)
			}
		}
	}
	// Every interrupted command, started once more, finishes its run.
	for _, n := range pending {
		p = w.start(k, "run", wf, "--input", w.input(n), "--json")
		k++
		err := <-p.exited
		if !finish(n, p, err) || err != nil {
			t.Errorf("logical run %d: the last start of its command failed: %v\n%s", n, err, p.out.String())
		}
	}
	p = w.start(k, "worker", "--idle-exit")
	if err := <-p.exited; err != nil {
		t.Fatalf("final worker: %v", err)
	}

	// Every presubmitted run ended right.
	for i := range presubmitted {
		runID := fmt.Sprintf("p%03d", i)
		out, _ := c.must(0, "status", runID, "--json")
		var st runJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		if st.State != "succeeded" || string(st.Result) != want(100+i, runID) {
			t.Errorf("run %s: %s %s %s; want succeeded with %s", runID, st.State, st.Result, st.Error, want(100+i, runID))
		}
	}
	// One run per command: the store holds exactly the runs of the
	// commands and the presubmitted ones (children aside).
	out, _ := c.must(0, "list", "--json", "--limit", "100000")
	var top []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var st runJSON
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(st.RunID, ":") {
			top = append(top, st.RunID)
		}
	}
	if len(top) != presubmitted+len(results) {
		t.Errorf("%d runs in the store; want %d (one per command, %d commands, plus %d presubmitted): %v",
			len(top), presubmitted+len(results), len(results), presubmitted, top)
		w.explainExtraRuns(t, top, results)
	}
	if len(results) != next {
		t.Errorf("%d of %d commands ended", len(results), next)
	}

	// No step reported complete ran again in a later process.
	first := map[[2]string]int{}
	for _, r := range reported {
		key := [2]string{r.run, r.step}
		if p, ok := first[key]; !ok || r.proc < p {
			first[key] = r.proc
		}
	}
	b, err := os.ReadFile(w.log)
	if err != nil {
		t.Fatal(err)
	}
	effects := append([]effect(nil), w.effects...)
	shellLines := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Errorf("effects.log: malformed line %q", line)
			continue
		}
		proc, ok := procIndex(f[0])
		if !ok {
			t.Errorf("effects.log: line %q names no process", line)
			continue
		}
		effects = append(effects, effect{proc: proc, run: f[1], step: f[2]})
		shellLines++
	}
	reruns := 0
	for _, e := range effects {
		if p, ok := first[[2]string{e.run, e.step}]; ok && e.proc > p {
			reruns++
			t.Errorf("step %s of run %s, reported complete by process %d, ran again in process %d", e.step, e.run, p, e.proc)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failedOnce) == 0 {
		t.Error("the http server injected no 500: the workflow's retries went untested")
	}
	for _, v := range w.violations {
		t.Error(v)
	}
	repeated := 0
	for _, n := range w.llmCalls {
		repeated += n - 1
	}
	t.Logf("%d kills, %d processes; %d commands and %d presubmitted runs ended right; %d steps reported complete, %d side effects (%d shell), %d re-runs of a reported step; %d http 500s injected; %d llm calls repeated before their memo was written",
		killed, k+1, len(results), presubmitted, len(first), len(effects), shellLines, reruns, len(w.failedOnce), repeated)
}

// explainExtraRuns logs, for each run in top that no command ended and
// that was not presubmitted, what every process that named it printed.
func (w *crashWorld) explainExtraRuns(t *testing.T, top []string, results map[int]string) {
	ended := map[string]bool{}
	for _, id := range results {
		ended[id] = true
	}
	for _, id := range top {
		if ended[id] || strings.HasPrefix(id, "p") {
			continue
		}
		t.Logf("run %s: no command ended it; the processes that named it:", id)
		for _, p := range w.procs {
			if !bytes.Contains(p.out.Bytes(), []byte(id)) && !bytes.Contains(p.errOut.Bytes(), []byte(id)) {
				continue
			}
			t.Logf("process %d %v (exit %v)\nstdout:\n%s\nstderr:\n%s", p.k, p.cmd.Args[1:], p.err, p.out.String(), p.errOut.String())
		}
	}
}

func removeInt(s []int, v int) []int {
	out := s[:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// fnv64 is the FNV-1a hash of s.
func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}
