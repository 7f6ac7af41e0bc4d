// Command fanout_jobs composes the step runtime with typed jobs for a
// fan-out inside one run.
//
//	go run ./examples/fanout_jobs                      # fetches pages of a local test server
//	go run ./examples/fanout_jobs https://go.dev https://example.com
//
// The run's step submits one typed job (FetchPage, run by a jobs.Runner on
// the same queue) per URL, awaits every typed result, memoizes the aggregate
// in its step memo, then publishes it. With --flaky-publish (the default)
// the first publish fails, so the step is retried: the retry finds the
// aggregate in the memo and submits nothing. Had the step crashed before
// the memo write, the jobs' idempotency keys (run id and URL) would make the
// re-submission join the jobs already running or done, so no page is
// fetched twice either way.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/addons/jobs"
)

func main() { exampleenv.Main("fanout_jobs", run) }

// FetchPage is the typed job: fetch one URL for one run.
type FetchPage struct {
	RunID string `json:"run"`
	URL   string `json:"url"`
}

// Page is FetchPage's typed result.
type Page struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// JobName names the job type.
func (FetchPage) JobName() string { return "fetch.page" }

// IdempotencyKey makes one job per (run, URL): a re-submission joins it.
func (f FetchPage) IdempotencyKey() string { return f.RunID + " " + f.URL }

// Run fetches the page. A 4xx is permanent; anything else failing is
// retried by the jobs runner.
func (f FetchPage) Run(ctx context.Context, _ jobs.JobContext) (Page, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return Page{}, jobs.PermanentError(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Page{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return Page{}, err
	}
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return Page{}, jobs.PermanentError(fmt.Errorf("GET %s: %s", f.URL, resp.Status))
	case resp.StatusCode >= 300:
		return Page{}, fmt.Errorf("GET %s: %s", f.URL, resp.Status)
	}
	sum := sha256.Sum256(body)
	return Page{URL: f.URL, Status: resp.StatusCode, Bytes: len(body), SHA256: hex.EncodeToString(sum[:8])}, nil
}

// aggregate is the joined result the step memoizes.
type aggregate struct {
	Pages  []Page            `msgpack:"pages"`
	Failed map[string]string `msgpack:"failed"`
	Bytes  int               `msgpack:"bytes"`
}

// crawl is the step runner.
type crawl struct {
	out          io.Writer
	jobs         *jobs.Runner
	flakyPublish bool
	submitted    atomic.Int64
}

func (c *crawl) RunStep(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	agg, err := c.fanOut(ctx, s)
	if err != nil {
		return runtime.StepOutcome{}, err
	}
	// Publishing can fail after the fan-out: the retry of this step must
	// not fetch the pages again.
	if c.flakyPublish && s.Attempt == 1 {
		fmt.Fprintln(c.out, "step 0 (attempt 1): publish failed; the step will be retried")
		return runtime.StepOutcome{}, errors.New("publish: index unavailable")
	}
	summary := fmt.Sprintf("%d pages, %d bytes, %d failed", len(agg.Pages), agg.Bytes, len(agg.Failed))
	fmt.Fprintf(c.out, "step 0 (attempt %d): published %s\n", s.Attempt, summary)
	return runtime.Succeed([]byte(summary)), nil
}

// fanOut returns the aggregate of one FetchPage job per URL, from the step
// memo when an earlier attempt stored it.
func (c *crawl) fanOut(ctx context.Context, s *runtime.Step) (aggregate, error) {
	urls := strings.Fields(string(s.Payload))
	// The step holds its lease while it awaits the jobs.
	if err := s.Lease.EnsureAtLeast(ctx, 2*time.Minute); err != nil {
		return aggregate{}, err
	}
	fresh := false
	agg, err := memo.Memoized(ctx, s.Memo, "aggregate", func(ctx context.Context) (aggregate, error) {
		fresh = true
		handles := make([]*jobs.Handle[Page], len(urls))
		for i, u := range urls {
			h, err := jobs.Submit(ctx, c.jobs, FetchPage{RunID: s.RunID, URL: u})
			if err != nil {
				return aggregate{}, fmt.Errorf("submit %s: %w", u, err)
			}
			c.submitted.Add(1)
			handles[i] = h
		}
		fmt.Fprintf(c.out, "step 0 (attempt %d): submitted %d fetch jobs\n", s.Attempt, len(handles))
		agg := aggregate{Failed: map[string]string{}}
		for i, h := range handles {
			p, err := h.Await(ctx)
			var f *jobs.Failure
			switch {
			case errors.As(err, &f):
				agg.Failed[urls[i]] = f.Message
			case err != nil:
				return aggregate{}, err
			default:
				agg.Pages = append(agg.Pages, p)
				agg.Bytes += p.Bytes
			}
		}
		return agg, nil
	})
	if err != nil {
		return aggregate{}, err
	}
	if !fresh {
		fmt.Fprintf(c.out, "step 0 (attempt %d): aggregate served from memo; nothing submitted\n", s.Attempt)
	}
	for _, p := range agg.Pages {
		fmt.Fprintf(c.out, "  %s: %d, %d bytes, sha256 %s\n", p.URL, p.Status, p.Bytes, p.SHA256)
	}
	for _, u := range slices.Sorted(maps.Keys(agg.Failed)) {
		fmt.Fprintf(c.out, "  %s: failed: %s\n", u, agg.Failed[u])
	}
	return agg, nil
}

// run parses args, crawls the URLs in one run and prints the outcome.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fanout_jobs", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://fanout_jobs", "store URL (mem://NAME, file://DIR, s3://...)")
	runID := fs.String("run-id", "", "run id (default: a fresh one)")
	flaky := fs.Bool("flaky-publish", true, "fail the first publish, so the step is retried")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: fanout_jobs [flags] [URL...]  (no URL: pages of a local test server)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	out = exampleenv.SyncWriter(out)
	urls := fs.Args()
	if len(urls) == 0 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "page %s\n", r.URL.Path)
		}))
		defer srv.Close()
		urls = []string{srv.URL + "/a", srv.URL + "/b", srv.URL + "/c"}
	}

	fast := storage.QueueConfig{BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second}
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelError,
		Queue: storage.Options{QueueConfigs: map[string]storage.QueueConfig{
			runtime.DefaultQueueName: fast, jobs.DefaultQueueName: fast,
		}}})
	if err != nil {
		return err
	}
	defer env.Close()

	jr, err := jobs.New(env.Queue, env.Store, jobs.WithLogger(env.Log))
	if err != nil {
		return err
	}
	if err := jobs.Register[FetchPage](jr); err != nil {
		return err
	}
	runner := &crawl{out: out, jobs: jr, flakyPublish: *flaky}
	rt, err := env.NewRuntime(runner, "", runtime.Options{})
	if err != nil {
		return err
	}
	jobsWorker := jr.Spawn(ctx)
	defer jobsWorker.Shutdown(context.WithoutCancel(ctx))
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))

	sub, err := rt.Submit(ctx, runtime.RunSpec{RunID: *runID, Input: []byte(strings.Join(urls, "\n"))})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(out, "submitted run %s for %d URLs\n", sub.RunID, len(urls))
	o, err := env.Await(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s %s: %s%s\n", o.RunID, o.Status, o.Result, o.Error)
	fmt.Fprintf(out, "jobs submitted: %d\n", runner.submitted.Load())
	return exampleenv.Succeeded(o)
}
