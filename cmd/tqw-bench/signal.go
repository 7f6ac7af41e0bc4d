package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var (
	sigBinary string        // --tqw-dsl: the binary; "" builds one
	sigGap    time.Duration // --gap: pause before each signal
	sigIdle   time.Duration // --idle: window for the idle request rate
)

func init() {
	register(&bench{
		name:    "signal-latency",
		summary: "end-to-end signal latency through the store inbox, real processes: 'tqw-dsl signal' start -> the waiting run's next step starts (goal p50 <= 500 ms on file, <= 1 s on S3), and an idle worker's requests per minute",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&sigBinary, "tqw-dsl", "", "tqw-dsl binary (default: go build ./cmd/tqw-dsl into a temp dir)")
			fs.DurationVar(&sigGap, "gap", 6*time.Second, "pause before each signal, longer than the worker's idle backoff (5 s) so each signal finds it idle")
			fs.DurationVar(&sigIdle, "idle", time.Minute, "how long the idle worker's store requests are counted")
		},
		run: runSignalLatency,
	})
}

const latencyWorkflow = `tqw: v1
name: latency
steps:
  - id: wait
    action: wait_signal
    with: {key: "lat:${ run.id }", timeout: 1h}
  - id: mark
    action: shell
    with:
      command: ["sh", "-c", "date +%s%N > \"$1\"", "sh", "${ input.out }"]
  - id: done
    succeed: "${ true }"
`

func runSignalLatency(ctx context.Context, cfg *config) error {
	dir, err := os.MkdirTemp("", "tqw-bench-signal")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := tqwDSL(ctx, sigBinary, dir)
	if err != nil {
		return err
	}
	wf := filepath.Join(dir, "latency.yaml")
	if err := os.WriteFile(wf, []byte(latencyWorkflow), 0o600); err != nil {
		return err
	}
	n := cfg.ops
	if n == 0 {
		n = 20
	}
	for _, url := range cfg.stores {
		if strings.HasPrefix(url, "mem://") {
			return fmt.Errorf("--store %s: signal-latency runs a worker and CLI processes, which need a shared file:// or s3:// store", url)
		}
		if err := signalLatencyOn(ctx, cfg, bin, wf, dir, url, n); err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
	}
	return nil
}

func signalLatencyOn(ctx context.Context, cfg *config, bin, wf, dir, url string, n int) error {
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	worker := exec.CommandContext(wctx, bin, "worker", "--store", url, "--metrics", "127.0.0.1:0")
	worker.Cancel = func() error { return worker.Process.Signal(os.Interrupt) }
	worker.WaitDelay = time.Minute
	stderr, err := worker.StderrPipe()
	if err != nil {
		return err
	}
	if err := worker.Start(); err != nil {
		return err
	}
	defer func() { stopWorker(); _ = worker.Wait() }()
	metricsURL, err := awaitLine(stderr, "where it serves metrics", func(line string) (string, bool) {
		return strings.CutPrefix(line, "tqw-dsl worker: metrics at ")
	})
	if err != nil {
		return err
	}
	runs := make([]string, n)
	for i := range runs {
		runs[i] = fmt.Sprintf("lat-%d-%d", time.Now().UnixNano(), i)
		in := fmt.Sprintf(`{"out": %q}`, filepath.Join(dir, runs[i]))
		if out, err := exec.CommandContext(ctx, bin, "submit", wf, "--store", url, "--run-id", runs[i], "--input", in).CombinedOutput(); err != nil {
			return fmt.Errorf("submit: %v\n%s", err, out)
		}
	}
	var step, cli Latencies
	for _, run := range runs {
		if !sleepCtx(ctx, sigGap) {
			return ctx.Err()
		}
		start := time.Now()
		out, err := exec.CommandContext(ctx, bin, "signal", "lat:"+run, `"go"`, "--store", url).CombinedOutput()
		cli.Add(time.Since(start))
		if err != nil {
			return fmt.Errorf("signal: %v\n%s", err, out)
		}
		began, err := awaitMark(ctx, filepath.Join(dir, run))
		if err != nil {
			return err
		}
		step.Add(began.Sub(start))
	}
	before, err := scrapeRequests(ctx, metricsURL)
	if err != nil {
		return err
	}
	if !sleepCtx(ctx, sigIdle) {
		return ctx.Err()
	}
	after, err := scrapeRequests(ctx, metricsURL)
	if err != nil {
		return err
	}
	perMin := map[string]float64{}
	total := 0.0
	for op, v := range after {
		d := (v - before[op]) / sigIdle.Minutes()
		perMin[op] = d
		total += d
	}
	return cfg.emit(Result{Bench: "signal-latency", Store: url, Concurrency: 1, Ops: int64(step.Len()),
		P50Ms: step.Percentile(50), P99Ms: step.Percentile(99),
		Extra: map[string]any{"p90_ms": step.Percentile(90), "cli_p50_ms": cli.Percentile(50), "cli_p90_ms": cli.Percentile(90),
			"idle_requests_per_min": total, "idle_requests_per_min_by_op": perMin, "gap_s": sigGap.Seconds(),
			"note": "signal start -> next step's shell 'date'; each signal after --gap of idleness"}})
}

// awaitMark waits for the run's mark step to write its start time.
func awaitMark(ctx context.Context, path string) (time.Time, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("mark file %s: %v", path, err)
			}
			return time.Unix(0, ns), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the run's next step did not start within a minute of its signal (%s)", path)
		}
		if !sleepCtx(ctx, 2*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
}

// scrapeRequests returns the worker's tqw_objstore_requests_total by op.
func scrapeRequests(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping the worker's metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "tqw_objstore_requests_total{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(labels, ",") {
			if op, ok := strings.CutPrefix(l, `op="`); ok {
				out[strings.TrimSuffix(op, `"`)] += v
			}
		}
	}
	return out, sc.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
