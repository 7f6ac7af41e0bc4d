package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var (
	interpHello  string // --hello: the workflow run end to end
	interpBinary string // --tqw-dsl: the binary; "" builds one
	interpLoop   int    // --loop: iterations per run of the step benchmark
)

func init() {
	register(&bench{
		name:    "interpreter",
		summary: "per-step interpreter overhead (target p50 <= 50 µs) and 'tqw-dsl run hello.yaml' wall time (target p50 <= 150 ms)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&interpHello, "hello", "workflows/hello.yaml", "workflow 'tqw-dsl run' runs end to end")
			fs.StringVar(&interpBinary, "tqw-dsl", "", "tqw-dsl binary to time (default: go build ./cmd/tqw-dsl into a temp dir)")
			fs.IntVar(&interpLoop, "loop", 50, "iterations of the set+switch loop per run (2 steps each)")
		},
		run: runInterpreter,
	})
}

// loopWorkflow runs only set and switch steps, so the time RunStep takes
// is the interpreter's own: state decoding, expression evaluation, output
// and history encoding, state encoding.
const loopWorkflow = `tqw: v1
name: bench-loop
input: {type: object, properties: {n: {type: integer}}}
vars: {i: 0, total: 0, label: ""}
steps:
  - id: work
    set:
      i: "${ vars.i + 1 }"
      total: "${ vars.total + vars.i * 2 }"
      label: "item-${ vars.i } of ${ input.n }"
  - id: check
    switch:
      - when: vars.i < input.n
        next: work
    next: done
  - id: done
    succeed: {total: "${ vars.total }", last: "${ vars.label }"}
`

func runInterpreter(ctx context.Context, cfg *config) error {
	if interpLoop < 1 {
		return fmt.Errorf("--loop %d: want at least 1", interpLoop)
	}
	err := eachStore(ctx, cfg, func(url string, raw objstore.Store) error {
		for _, c := range cfg.concurrency {
			if err := benchSteps(ctx, cfg, url, raw, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return benchHello(ctx, cfg)
}

// benchSteps runs loop workflows (c at a time) on the store and reports
// the latency of the interpreter's RunStep per step.
func benchSteps(ctx context.Context, cfg *config, url string, raw objstore.Store, c int) error {
	dir, err := os.MkdirTemp("", "tqw-bench-interp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "loop.yaml")
	if err := os.WriteFile(path, []byte(loopWorkflow), 0o600); err != nil {
		return err
	}
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		return err
	}
	store := counting.New(raw)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet, Prefix: fmt.Sprintf("bench-interp-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	defer q.Close()
	var mu sync.Mutex
	var lats Latencies
	it, err := interpreter.New(q, store, interpreter.Options{Actions: builtin.New(builtin.Options{}), Logger: quiet,
		Runtime: runtime.Options{Logger: quiet, Concurrency: max(c, 1)},
		StepDurations: func(d time.Duration) {
			mu.Lock()
			lats.Add(d)
			mu.Unlock()
		}})
	if err != nil {
		return err
	}
	rt := it.Runtime()
	worker := rt.Spawn(ctx)
	defer func() { _ = worker.Shutdown(context.Background()) }()

	steps := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return int64(lats.Len())
	}
	// Operations of the harness are whole runs; the measurement is the
	// steps the hook timed, so it stops by their count.
	stop := func(_ int64, start time.Time) bool { return cfg.done(steps(), start) }
	m, err := measure(ctx, cfg, c, store, stop, timed(func(ctx context.Context, _ int, n int64) error {
		id := fmt.Sprintf("loop-%d", n+1)
		done, unwatch := it.Watch(id)
		defer unwatch()
		if _, err := it.Submit(ctx, w, map[string]any{"n": interpLoop}, id); err != nil {
			return err
		}
		select {
		case o := <-done:
			if o.Status != runstate.Succeeded {
				return fmt.Errorf("run %s: %s: %s", id, o.Status, o.Error)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	n := int64(lats.Len())
	p50, p99 := lats.Percentile(50), lats.Percentile(99)
	return cfg.emitFor(url, newResult("interpreter-step", c, n, m.secs, &lats, m.counts,
		map[string]any{"runstep_p50_us": p50 * 1000, "runstep_p99_us": p99 * 1000,
			"note": "ops are DSL steps (set/switch); p50/p99 are the interpreter's RunStep alone; ops_per_sec includes the runtime's commits"}))
}

// benchHello times 'tqw-dsl run hello.yaml' as a user runs it: a fresh
// process on a file:// store, end to end.
func benchHello(ctx context.Context, cfg *config) error {
	dir, err := os.MkdirTemp("", "tqw-bench-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := tqwDSL(ctx, interpBinary, dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(interpHello); err != nil {
		return fmt.Errorf("--hello: %w", err)
	}
	storeDir, err := os.MkdirTemp("", "tqw-bench-hello-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(storeDir)
	url := "file://" + storeDir
	var lats Latencies
	start := time.Now()
	var n int64
	for ctx.Err() == nil && !cfg.done(n, start) {
		t0 := time.Now()
		out, err := exec.CommandContext(ctx, bin, "run", interpHello, "--store", url).CombinedOutput()
		if err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				break
			}
			return fmt.Errorf("tqw-dsl run %s: %v\n%s", interpHello, err, out)
		}
		lats.Add(time.Since(t0))
		n++
	}
	secs := time.Since(start).Seconds()
	return cfg.emitFor(url, newResult("interpreter-run-hello", 1, n, secs, &lats, counting.Counts{},
		map[string]any{"note": "wall time of one 'tqw-dsl run' process, store growing across runs"}))
}
