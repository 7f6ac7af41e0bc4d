package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// hexLLM is "llm/" hex-encoded, as it appears in the object key of an llm
// memo entry (memo keys with a slash are stored hex-encoded).
const hexLLM = "6c6c6d2f"

// TestCrashKill SIGKILLs tqw-dsl at random moments while it works
// multi-step runs with http, llm, shell, foreach, sleep and call steps, then finishes
// the store with a worker and checks that every run ended with the right
// result and that no llm call was repeated once its memo had been written.
// TQW_CRASH_KILLS sets the number of kills (default 100); TQW_CRASH_SEED
// the random seed.
func TestCrashKill(t *testing.T) {
	kills := 100
	if s := os.Getenv("TQW_CRASH_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TQW_CRASH_KILLS=%q: want a positive number", s)
		}
		kills = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TQW_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("kills %d, seed %d (TQW_CRASH_SEED)", kills, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	// The http server answers 500 to the first request of about a third
	// of the steps (picked by the seed), so retries run too, but never
	// twice to one Idempotency-Key (<run>/<step>[<item>]): a step sees at
	// most one injected failure per item, 3 for fan, below its retry
	// budget (max_attempts: 5). A failure count unbounded per step (say
	// every 7th request) can, in a rare interleaving, fail one item 5
	// times in a row and exhaust that budget, which is the workflow
	// behaving as written, not a lost or double-counted retry.
	var httpMu sync.Mutex
	failedOnce := map[string]bool{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		httpMu.Lock()
		fail := key != "" && !failedOnce[key] && fnv64(fmt.Sprint(seed, key))%3 == 0
		if fail {
			failedOnce[key] = true
		}
		httpMu.Unlock()
		if fail {
			http.Error(w, "flaky", http.StatusInternalServerError)
			return
		}
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/n/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"doubled": %d}`, 2*n)
	}))
	defer ts.Close()

	c := newCLI(t)
	store, err := storeurl.Open(context.Background(), c.store)
	if err != nil {
		t.Fatal(err)
	}
	fake := llmfake.New()
	defer fake.Close()
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
	runRE := regexp.MustCompile(`run (c[0-9]+) n `)
	var llmMu sync.Mutex
	llmCalls := map[string]int{}
	var violations, violatedRuns []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		proxy.ServeHTTP(w, r)
		if m == nil {
			return
		}
		runID := string(m[1])
		llmMu.Lock()
		defer llmMu.Unlock()
		llmCalls[runID]++
		if len(memo) > 0 && r.Context().Err() == nil {
			violations = append(violations, fmt.Sprintf("run %s: llm called again after its memo %v was written", runID, memo))
			violatedRuns = append(violatedRuns, runID)
		}
	}))
	defer front.Close()
	c.env = append(c.env, "OPENAI_BASE_URL="+front.URL+"/v1")

	wf := abs(t, testdata+"crash.yaml")
	input := func(n int) string { return fmt.Sprintf(`{"url": %q, "n": %d}`, ts.URL, n) }
	// Some runs are submitted up front by a process that is not killed, so
	// they must all be found at the end; the others are submitted by the
	// killed processes themselves and may never have been.
	const presubmitted = 10
	for i := range presubmitted {
		c.must(0, "submit", wf, "--run-id", fmt.Sprintf("c%03d", i), "--input", input(i))
	}
	ids, killed := presubmitted, 0
	for k := 0; killed < kills; k++ {
		var args []string
		if k%2 == 0 {
			args = []string{"run", wf, "--run-id", fmt.Sprintf("c%03d", ids), "--input", input(ids)}
			ids++
		} else {
			args = []string{"worker"}
		}
		cmd := exec.Command(tqwBin, append(args, "--store", c.store)...)
		cmd.Dir = c.dir
		cmd.Env = append(os.Environ(), c.env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		kill := time.NewTimer(time.Duration(rng.IntN(100_000)) * time.Microsecond)
		select {
		case <-exited:
			kill.Stop()
		case <-kill.C:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			if err := <-exited; err != nil && strings.Contains(err.Error(), "killed") {
				killed++
			}
		}
	}

	// Finish everything: a worker until the store is idle.
	c.must(0, "worker", "--idle-exit")
	finished := 0
	for i := range ids {
		runID := fmt.Sprintf("c%03d", i)
		code, out, errOut := c.run("status", runID, "--json")
		if code == exitFailed && strings.Contains(errOut, "no run") && i >= presubmitted {
			// Killed before its submission committed; then nothing of it exists.
			if code, _, _ := c.run("history", runID); code != exitFailed {
				t.Errorf("run %s: not found, yet it has a history", runID)
			}
			continue
		}
		if code != 0 {
			t.Errorf("status %s: exit %d: %s", runID, code, errOut)
			continue
		}
		var st runJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`"%d|answer-%s|2,4,6|%d"`, 2*i+1, runID, i*i)
		if st.State != "succeeded" || string(st.Result) != want {
			t.Errorf("run %s: %s %s %s; want succeeded with %s", runID, st.State, st.Result, st.Error, want)
			_, hist, _ := c.run("history", runID)
			t.Logf("history of %s:\n%s", runID, hist)
			continue
		}
		finished++
	}
	httpMu.Lock()
	injected := len(failedOnce)
	httpMu.Unlock()
	if injected == 0 {
		t.Error("the http server injected no 500: the workflow's retries went untested")
	}
	llmMu.Lock()
	defer llmMu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
	for _, runID := range violatedRuns {
		_, hist, _ := c.run("history", runID)
		t.Logf("history of %s:\n%s", runID, hist)
	}
	repeated := 0
	for _, n := range llmCalls {
		repeated += n - 1
	}
	t.Logf("%d kills; %d runs finished correctly out of %d started; %d http 500s injected; %d llm calls repeated (killed before the memo was written)", killed, finished, ids, injected, repeated)
	if finished < presubmitted {
		t.Fatalf("only %d runs finished", finished)
	}
}

// fnv64 is the FNV-1a hash of s.
func fnv64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}
