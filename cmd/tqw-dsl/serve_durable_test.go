package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
	"github.com/tqw-dsl/tqw/server/client"
)

// durableStepsWorkflow is four http steps, each a request the test's
// server counts by run and step.
const durableStepsWorkflow = `tqw: v1
name: durablesteps
input: {type: object, required: [url], properties: {url: {type: string}}}
steps:
  - id: a
    action: http
    with: {url: "${ input.url }/a/${ run.id }"}
  - id: b
    action: http
    with: {url: "${ input.url }/b/${ run.id }"}
  - id: c
    action: http
    with: {url: "${ input.url }/c/${ run.id }"}
  - id: d
    action: http
    with: {url: "${ input.url }/d/${ run.id }"}
  - id: done
    succeed: ok
`

// noiseWorkflow is a run of one step, submitted over and over so WAL
// PUTs follow one another, as on a busy server: a read barrier then
// waits for a PUT while other settlements commit.
const noiseWorkflow = `tqw: v1
name: noise
steps:
  - id: only
    succeed: ok
`

// walPutDelay is how long the test's proxy holds each WAL PUT: the
// window in which a settlement is in serve's memory but not in the store.
const walPutDelay = 300 * time.Millisecond

// stepWork is how long each step's request takes to answer.
const stepWork = 50 * time.Millisecond

// pollers is how many clients poll an endpoint at once.
const pollers = 4

// TestServeReportsOnlyDurableSteps reproduces issue 22's first item: on
// S3 behind a proxy that holds every WAL PUT, with noise runs keeping
// PUTs in flight as on a busy server, serve is SIGKILLed the
// moment a read endpoint (the history, a run's visited steps, the list)
// shows step c done, and started again on the same store; c never runs
// again, for every endpoint, in every trial. Before the fix the history
// and GET /v1/runs/{id} read the history after the read barrier, so they
// showed c while its settlement's PUT was held, and the new serve ran c a
// second time. TQW_DURABLE_TRIALS sets the trials per endpoint (default 5).
func TestServeReportsOnlyDurableSteps(t *testing.T) {
	t.Parallel()
	crashtest.Parent(t, "TQW_SERVE_KILL_CHILD")
	trials := crashtest.Count(t, "TQW_DURABLE_TRIALS", 5)
	cfg := s3test.Config(t)

	// A proxy in front of S3 that holds WAL PUTs (queue/wal/<seq>,
	// docs/STORE-LAYOUT.md). A PUT whose sender died while it was held
	// never reaches S3, as a PUT a killed process had not sent yet.
	target, err := url.Parse("http://" + cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	upstream := httputil.NewSingleHostReverseProxy(target)
	var heldPuts atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/queue/wal/") {
			// Read the body first, so the server notices the sender's
			// death while the PUT is held.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			heldPuts.Add(1)
			hold := time.NewTimer(walPutDelay)
			defer hold.Stop()
			select {
			case <-hold.C:
			case <-r.Context().Done():
				return
			}
		}
		upstream.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	// The side effects of each step, by "run step".
	var mu sync.Mutex
	calls := map[string]int{}
	effects := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) != 2 {
			http.Error(w, "want /STEP/RUN", http.StatusNotFound)
			return
		}
		mu.Lock()
		calls[parts[1]+" "+parts[0]]++
		mu.Unlock()
		// A step that works a while, past the kv's commit delay: a read
		// barrier waiting for the PUT before it does not wait for it.
		work := time.NewTimer(stepWork)
		defer work.Stop()
		select {
		case <-work.C:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(effects.Close)

	c := newCLI(t)
	c.store = fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=1", cfg.Bucket, cfg.Prefix, strings.TrimPrefix(proxy.URL, "http://"))
	c.env = append(c.env, "AWS_ACCESS_KEY_ID="+cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+cfg.SecretKey)
	wfDir := filepath.Join(c.dir, "wf")
	if err := os.MkdirAll(wfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"durablesteps.yaml": durableStepsWorkflow, "noise.yaml": noiseWorkflow} {
		if err := os.WriteFile(filepath.Join(wfDir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	input := []byte(fmt.Sprintf(`{"url":%q}`, effects.URL))
	ctx := context.WithoutCancel(t.Context())

	// Each endpoint answers whether it shows step c of run id done.
	pastC := func(step *string, state string) bool {
		return state == "succeeded" || step != nil && (*step == "d" || *step == "done")
	}
	endpoints := []struct {
		name  string
		showC func(api *client.Client, id string) bool
	}{
		{"history", func(api *client.Client, id string) bool {
			h, err := api.History(ctx, id)
			return err == nil && slices.ContainsFunc(h, func(r client.HistoryRecord) bool { return r.Step == "c" })
		}},
		{"run", func(api *client.Client, id string) bool {
			run, err := api.Run(ctx, id)
			return err == nil && (slices.Contains(run.VisitedSteps, "c") || pastC(run.CurrentStep, run.State))
		}},
		{"list", func(api *client.Client, id string) bool {
			list, err := api.ListRuns(ctx, client.ListOptions{Workflow: "durablesteps"})
			if err != nil {
				return false
			}
			i := slices.IndexFunc(list.Runs, func(r client.RunSummary) bool { return r.RunID == id })
			return i >= 0 && pastC(list.Runs[i].CurrentStep, list.Runs[i].State)
		}},
	}

	p, addr := startServe(t, c) // every serve is killed at the test's end (cli.start)
	// Traffic: two clients submitting noise runs back to back to the
	// serve of the moment (failures while it restarts are expected).
	var current atomic.Pointer[client.Client]
	current.Store(client.New(addr, client.Options{}))
	noise, quiet := context.WithCancel(ctx)
	var noisy sync.WaitGroup
	for range 2 {
		noisy.Add(1)
		go func() {
			defer noisy.Done()
			for noise.Err() == nil {
				if _, err := current.Load().Submit(noise, client.SubmitRequest{Workflow: "noise.yaml"}); err != nil {
					// No serve to take it: pace the retries.
					pause := time.NewTimer(50 * time.Millisecond)
					select {
					case <-pause.C:
					case <-noise.Done():
						pause.Stop()
					}
				}
			}
		}()
	}
	stopNoise := func() { quiet(); noisy.Wait() }
	defer stopNoise()
	shownBy := map[string]string{} // run -> endpoint
	for trial := range trials {
		for _, ep := range endpoints {
			id := fmt.Sprintf("t%d-%s", trial, ep.name)
			api := client.New(addr, client.Options{})
			if _, err := api.Submit(ctx, client.SubmitRequest{Workflow: "durablesteps.yaml", RunID: id, Input: input}); err != nil {
				t.Fatalf("submit %s: %v", id, err)
			}
			// Several pollers, as fast as the API answers, so one read
			// falls between c's commit and its PUT landing whenever the
			// endpoint can show it then; the kill must fall inside the
			// window the proxy holds the PUT for.
			shown := make(chan struct{})
			var once sync.Once
			pctx, stop := context.WithTimeout(ctx, waitDeadline)
			for range pollers {
				go func() {
					for pctx.Err() == nil {
						if ep.showC(api, id) {
							once.Do(func() { close(shown) })
							return
						}
					}
				}()
			}
			select {
			case <-shown:
			case <-pctx.Done():
				stop()
				t.Fatalf("%s never showed step c of %s done within %v\n%s", ep.name, id, waitDeadline, p.stderr())
			}
			p.kill9()
			stop()
			shownBy[id] = ep.name
			p, addr = startServe(t, c)
			current.Store(client.New(addr, client.Options{}))
		}
	}
	stopNoise()
	api := client.New(addr, client.Options{})
	for id := range shownBy {
		pollUntil(t, id+" succeeded after the restarts", func() bool {
			run, err := api.Run(ctx, id)
			if err == nil && (run.State == "failed" || run.State == "cancelled") {
				t.Fatalf("run %s ended %s: %v", id, run.State, run.Error)
			}
			return err == nil && run.State == "succeeded"
		})
	}
	if heldPuts.Load() == 0 {
		t.Fatal("the proxy held no WAL PUT: the store's WAL is not where docs/STORE-LAYOUT.md says")
	}
	mu.Lock()
	defer mu.Unlock()
	for id, ep := range shownBy {
		if n := calls[id+" c"]; n != 1 {
			t.Errorf("step c of run %s ran %d times: %s showed it done before its settlement was durable, and the killed serve's successor ran it again", id, n, ep)
		}
		for _, s := range []string{"a", "b", "d"} {
			if calls[id+" "+s] == 0 {
				t.Errorf("step %s of run %s never ran", s, id)
			}
		}
	}
}
