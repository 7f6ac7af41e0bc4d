package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	wf "github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// runtimeBench measures runtime (durable steps): runs of --steps no-op
// steps, each client submitting a run and waiting for it to end before the
// next; the runtime works with as many workers as clients.
var runtimeBench = struct {
	steps    int
	payload  int
	inFlight int
}{}

func init() {
	register(&bench{
		name:    "runtime",
		summary: "durable step runtime: runs/s, steps/s, per-run latency and requests per step of a no-op workflow",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&runtimeBench.steps, "steps", 10, "steps per run")
			fs.IntVar(&runtimeBench.payload, "payload", 64, "payload bytes carried from step to step")
			fs.IntVar(&runtimeBench.inFlight, "in-flight", 0, "runs in flight (clients); default: --concurrency, the runtime's worker count")
		},
		run: runRuntime,
	})
}

func runRuntime(ctx context.Context, cfg *config) error {
	if runtimeBench.steps < 1 || runtimeBench.payload < 0 {
		return fmt.Errorf("--steps must be >= 1 and --payload >= 0")
	}
	return eachStore(ctx, cfg, func(url string, inner objstore.Store) error {
		for _, c := range cfg.concurrency {
			prefix := fmt.Sprintf("bench-runtime/%d-%d", c, time.Now().UnixNano())
			// The physical limit of a lone run: one create-only PUT per
			// durable commit. Sampled before and after the runs, on the
			// same store, so the ratio compares like with like.
			var puts Latencies
			if err := probePuts(ctx, inner, prefix+"/probe-a", &puts); err != nil {
				return fmt.Errorf("create-only PUTs on %s: %w", url, err)
			}
			r, err := runtimeRuns(ctx, cfg, counting.New(inner), prefix, c)
			if err != nil {
				return fmt.Errorf("runtime on %s at concurrency %d: %w", url, c, err)
			}
			if err := probePuts(ctx, inner, prefix+"/probe-b", &puts); err != nil {
				return fmt.Errorf("create-only PUTs on %s: %w", url, err)
			}
			commits := runtimeBench.steps + 1 // the submission, then one settlement per step (the last ends the run)
			putMs := puts.Percentile(50)
			r.Extra["create_put_p50_ms"] = putMs
			r.Extra["commits_per_run"] = commits
			r.Extra["run_ms_per_commit"] = r.P50Ms / float64(commits)
			if putMs > 0 {
				r.Extra["run_ms_per_commit_over_put"] = r.P50Ms / float64(commits) / putMs
			}
			if err := cfg.emitFor(url, r); err != nil {
				return err
			}
			if err := cleanPrefix(ctx, inner, prefix+"/"); err != nil {
				return fmt.Errorf("clean up %s under %s: %w", url, prefix, err)
			}
		}
		return nil
	})
}

// probeSamples is how many sequential create-only PUTs probePuts times.
const probeSamples = 100

// probePuts times probeSamples sequential create-only PUTs of a
// WAL-object-sized value under prefix into l, then deletes them.
func probePuts(ctx context.Context, s objstore.Store, prefix string, l *Latencies) error {
	data := make([]byte, 512)
	for i := range probeSamples {
		t0 := time.Now()
		if _, err := s.Put(ctx, fmt.Sprintf("%s/%06d", prefix, i), data, objstore.CreateOnly()); err != nil {
			return err
		}
		l.Add(time.Since(t0))
	}
	return cleanPrefix(ctx, s, prefix+"/")
}

// noopSteps continues until the last step, then succeeds; it hands the
// last step's job id to the client waiting for the run.
type noopSteps struct {
	last    int
	mu      sync.Mutex
	waiters map[string]chan string
}

func (n *noopSteps) RunStep(_ context.Context, s *wf.Step) (wf.StepOutcome, error) {
	if s.Number < n.last {
		return wf.ContinueNow(s.Payload), nil
	}
	n.mu.Lock()
	ch := n.waiters[s.RunID]
	n.mu.Unlock()
	if ch != nil {
		select {
		case ch <- s.JobID:
		default: // a redelivery: the client already knows the job
		}
	}
	return wf.Succeed(nil), nil
}

func runtimeRuns(ctx context.Context, cfg *config, store *counting.Store, prefix string, c int) (Result, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Prefix: prefix + "/queue", Logger: log,
		DefaultConfig: queue.QueueConfig{LeaseDuration: time.Minute}})
	if err != nil {
		return Result{}, err
	}
	defer q.Close()
	runner := &noopSteps{last: runtimeBench.steps - 1, waiters: map[string]chan string{}}
	rt, err := wf.New(q, store, runner, wf.Options{Concurrency: c, Logger: log, MemoPrefix: prefix + "/memo"})
	if err != nil {
		return Result{}, err
	}
	w := rt.Spawn(ctx)
	defer w.Shutdown(context.WithoutCancel(ctx))

	payload := make([]byte, runtimeBench.payload)
	clients := runtimeBench.inFlight
	if clients <= 0 {
		clients = c
	}
	cpuBefore := processCPU()
	m, err := measure(ctx, cfg, clients, store, nil, timed(func(ctx context.Context, client int, n int64) error {
		id := fmt.Sprintf("c%d-%d", client, n)
		ch := make(chan string, 1)
		runner.mu.Lock()
		runner.waiters[id] = ch
		runner.mu.Unlock()
		defer func() {
			runner.mu.Lock()
			delete(runner.waiters, id)
			runner.mu.Unlock()
		}()
		if _, err := rt.Submit(ctx, wf.RunSpec{RunID: id, Input: payload}); err != nil {
			return err
		}
		var jobID string
		select {
		case jobID = <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := q.WaitForCompletion(ctx, jobID); err != nil && !errors.Is(err, queue.ErrNotFound) {
			return err
		}
		return nil
	}))
	cpuAfter := processCPU()
	if err != nil {
		return Result{}, err
	}
	n := m.ops
	steps := n * int64(runtimeBench.steps)
	secs := m.secs
	extra := map[string]any{"runs": n, "runs_in_flight": clients, "runs_per_sec": float64(n) / secs, "steps_per_run": runtimeBench.steps,
		"latency": "per run, submit to final ack", "op_unit": "step (requests per op are per step, the submit included)"}
	if cpuBefore >= 0 && cpuAfter >= 0 && steps > 0 {
		// Process CPU (user+system, all goroutines: runtime, queue, kv,
		// store client and the bench's own clients) per step; unlike wall
		// throughput it does not depend on what else runs on the machine.
		extra["cpu_us_per_step"] = float64(cpuAfter-cpuBefore) / 1e3 / float64(steps)
	}
	return m.result("runtime", c, steps, extra), nil
}
