package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/server/client"
)

var (
	serverBinary  string
	serverClients int
	serverStreams int
	serverRuns    int
)

func init() {
	register(&bench{
		name:    "server",
		summary: "the HTTP API under load: submits/s with --clients clients, and every run's end reaching --streams SSE clients while --runs runs progress",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&serverBinary, "tqw-dsl", "", "tqw-dsl binary (default: go build ./cmd/tqw-dsl into a temp dir)")
			fs.IntVar(&serverClients, "clients", 64, "concurrent API clients submitting")
			fs.IntVar(&serverStreams, "streams", 100, "clients following /v1/events")
			fs.IntVar(&serverRuns, "runs", 1000, "runs submitted while the streams follow")
		},
		run: runServer,
	})
}

// serverWorkflow ends at once: the bench measures the API and the
// streams, not steps.
const serverWorkflow = `tqw: v1
name: server-bench
steps:
  - id: done
    succeed: ok
`

// startServe builds tqw-dsl if needed (bin "") and starts serve on a
// fresh file:// store with wf as its only workflow file (bench.yaml) and
// extra flags. It returns serve's address, the binary, the store URL and
// a func that stops serve and removes everything.
// servingLine is how serve says where it serves.
var servingLine = regexp.MustCompile(`serving (http://[0-9.:]+)`)

func startServe(ctx context.Context, bin, wf string, extra ...string) (addr, binPath, store string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "tqw-bench-serve-")
	if err != nil {
		return "", "", "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	if bin, err = tqwDSL(ctx, bin, dir); err != nil {
		cleanup()
		return "", "", "", nil, err
	}
	wfDir := filepath.Join(dir, "wf")
	if err := os.MkdirAll(wfDir, 0o755); err != nil {
		cleanup()
		return "", "", "", nil, err
	}
	if err := os.WriteFile(filepath.Join(wfDir, "bench.yaml"), []byte(wf), 0o644); err != nil {
		cleanup()
		return "", "", "", nil, err
	}
	store = "file://" + filepath.Join(dir, "store")
	srv := exec.CommandContext(ctx, bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--store", store, "--workflows", wfDir}, extra...)...)
	srv.Env = append(os.Environ(), "TQW_API_TOKEN=", "TQW_STORE=")
	stderr, err := srv.StderrPipe()
	if err != nil {
		cleanup()
		return "", "", "", nil, err
	}
	if err := srv.Start(); err != nil {
		cleanup()
		return "", "", "", nil, err
	}
	stop = func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
		cleanup()
	}
	addr, err = awaitLine(stderr, "where it serves", func(line string) (string, bool) {
		m := servingLine.FindStringSubmatch(line)
		if m == nil {
			return "", false
		}
		return m[1], true
	})
	if err != nil {
		stop()
		return "", "", "", nil, err
	}
	return addr, bin, store, stop, nil
}

func runServer(ctx context.Context, cfg *config) error {
	addr, _, _, stop, err := startServe(ctx, serverBinary, serverWorkflow, "--concurrency", "32")
	if err != nil {
		return err
	}
	defer stop()
	c := client.New(addr, client.Options{})

	// Submits per second with serverClients clients.
	var (
		mu     sync.Mutex
		lats   Latencies
		n      atomic.Int64
		failed atomic.Int64
	)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < serverClients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine Latencies
			for ctx.Err() == nil && !cfg.done(n.Load(), start) {
				n.Add(1)
				t0 := time.Now()
				if _, err := c.Submit(ctx, client.SubmitRequest{Workflow: "bench.yaml"}); err != nil {
					failed.Add(1)
					continue
				}
				mine.Add(time.Since(t0))
			}
			mu.Lock()
			lats.Merge(&mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := cfg.emitFor("file://", newResult("server-submit", serverClients, int64(lats.Len()), secs, &lats, counting.Counts{},
		map[string]any{"errors": failed.Load()})); err != nil {
		return err
	}

	// Fan-out: serverStreams clients follow /v1/events while serverRuns
	// runs are submitted; each must see every run end.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	ids := make([]string, serverRuns)
	for i := range ids {
		ids[i] = fmt.Sprintf("fan-%d-%d", time.Now().UnixNano(), i)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var ready, ended sync.WaitGroup
	var fanLats Latencies
	var fanMu sync.Mutex
	submitted := sync.Map{} // id -> time.Time
	lost := atomic.Int64{}
	// resyncs counts the reconnections after the server ended a stream
	// that fell behind (the client resumes with Last-Event-ID).
	resyncs := atomic.Int64{}
	for s := 0; s < serverStreams; s++ {
		st, err := c.Events(sctx)
		if err != nil {
			return fmt.Errorf("stream %d: %w", s, err)
		}
		ready.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			defer st.Close()
			defer func() { resyncs.Add(int64(st.Resyncs)) }()
			ready.Done()
			seen := map[string]bool{}
			var mine Latencies
			for len(seen) < len(want) {
				ev, err := st.Next()
				if err != nil {
					lost.Add(int64(len(want) - len(seen)))
					break
				}
				var sum client.RunSummary
				if json.Unmarshal(ev.Data, &sum) != nil || !want[sum.RunID] || sum.State != "succeeded" || seen[sum.RunID] {
					continue
				}
				seen[sum.RunID] = true
				if t0, ok := submitted.Load(sum.RunID); ok {
					mine.Add(time.Since(t0.(time.Time)))
				}
			}
			fanMu.Lock()
			fanLats.Merge(&mine)
			fanMu.Unlock()
		}()
	}
	ready.Wait()
	var apiLats Latencies
	next := atomic.Int64{}
	fanStart := time.Now()
	var sub sync.WaitGroup
	for w := 0; w < serverClients; w++ {
		sub.Add(1)
		go func() {
			defer sub.Done()
			var mine Latencies
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					break
				}
				t0 := time.Now()
				submitted.Store(ids[i], t0)
				if _, err := c.Submit(sctx, client.SubmitRequest{Workflow: "bench.yaml", RunID: ids[i]}); err != nil {
					failed.Add(1)
					continue
				}
				mine.Add(time.Since(t0))
			}
			fanMu.Lock()
			apiLats.Merge(&mine)
			fanMu.Unlock()
		}()
	}
	sub.Wait()
	ended.Wait()
	if errors.Is(sctx.Err(), context.DeadlineExceeded) {
		return errors.New("the streams did not see every run end within 5 minutes")
	}
	extra := map[string]any{"streams": serverStreams, "runs": serverRuns, "lost": lost.Load(), "resyncs": resyncs.Load(), "errors": failed.Load(),
		"submit_p50_ms": apiLats.Percentile(50), "submit_p99_ms": apiLats.Percentile(99)}
	return cfg.emitFor("file://", newResult("server-sse-fanout", serverClients, int64(fanLats.Len()), time.Since(fanStart).Seconds(), &fanLats, counting.Counts{}, extra))
}
