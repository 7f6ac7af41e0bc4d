package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/interpreter/engine"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var (
	interpHello     string    // --hello: the workflow run end to end; "" skips it
	interpBinary    string    // --tqw-dsl: the binary; "" builds one
	interpLoop      int       // --loop: iterations per run of the step benchmark
	interpWorkloads multiFlag // --workload: which step workloads run
	interpCPUProf   string    // --cpuprofile: profile prefix; "" profiles nothing
)

// Step workloads of the interpreter benchmark.
const (
	workloadLoop = "loop" // pure steps (set, switch, succeed): interpreter-step
	workloadNoop = "noop" // effectful steps (a custom no-op action): interpreter-action
)

func init() {
	register(&bench{
		name:    "interpreter",
		summary: "per-step interpreter overhead (target p50 <= 50 µs) and 'tqw-dsl run hello.yaml' wall time (target p50 <= 150 ms)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&interpHello, "hello", "workflows/hello.yaml", "workflow 'tqw-dsl run' runs end to end (\"\" skips it)")
			fs.StringVar(&interpBinary, "tqw-dsl", "", "tqw-dsl binary to time (default: go build ./cmd/tqw-dsl into a temp dir)")
			fs.IntVar(&interpLoop, "loop", 50, "iterations of the set+switch loop per run (2 steps each)")
			listVar(fs, &interpWorkloads, "workload", "step workloads (comma-separated): loop (101 set/switch steps per run), noop (10 custom no-op action steps per run, through the engine); default both")
			fs.StringVar(&interpCPUProf, "cpuprofile", "", "write a CPU profile of each measurement to PREFIX-<workload>-<store>-c<N>.pprof")
		},
		run: runInterpreter,
	})
}

// loopWorkflow runs only set and switch steps, so the time RunStep takes
// is the interpreter's own: state decoding, expression evaluation, output
// and history encoding, state encoding. They are pure, so a run's 101
// steps fold into one runtime step (interpreter/fold.go).
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

// noopWorkflow runs ten effectful steps: each calls the custom action
// "noop", which does nothing, so what a step costs is the interpreter's
// and the runtime's share of an action step (its own durable settlement).
const noopWorkflow = `tqw: v1
name: bench-noop
steps:
  - {id: s1, action: noop}
  - {id: s2, action: noop}
  - {id: s3, action: noop}
  - {id: s4, action: noop}
  - {id: s5, action: noop}
  - {id: s6, action: noop}
  - {id: s7, action: noop}
  - {id: s8, action: noop}
  - {id: s9, action: noop}
  - {id: s10, action: noop}
`

// noopStepsPerRun is the number of DSL steps of one noopWorkflow run.
const noopStepsPerRun = 10

// noopAction is a custom action that does nothing; it counts its calls.
type noopAction struct{ calls *atomic.Int64 }

func (noopAction) Name() string { return "noop" }
func (noopAction) WithSchema() json.RawMessage {
	return json.RawMessage(`{"type": "object", "additionalProperties": false}`)
}
func (a noopAction) Execute(context.Context, *actions.Call) (any, error) {
	a.calls.Add(1)
	return nil, nil
}

func runInterpreter(ctx context.Context, cfg *config) error {
	if interpLoop < 1 {
		return fmt.Errorf("--loop %d: want at least 1", interpLoop)
	}
	workloads := interpWorkloads
	if len(workloads) == 0 {
		workloads = multiFlag{workloadLoop, workloadNoop}
	}
	for _, wl := range workloads {
		if wl != workloadLoop && wl != workloadNoop {
			return fmt.Errorf("--workload %q: want %s or %s", wl, workloadLoop, workloadNoop)
		}
	}
	err := eachStore(ctx, cfg, func(url string, raw objstore.Store) error {
		for _, wl := range workloads {
			for _, c := range cfg.concurrency {
				var err error
				if wl == workloadLoop {
					err = benchSteps(ctx, cfg, url, raw, c)
				} else {
					err = benchActions(ctx, cfg, url, raw, c)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || interpHello == "" {
		return err
	}
	return benchHello(ctx, cfg)
}

// stepMeasurement is one measurement of DSL steps: c submitters each run
// one workflow run after another until steps() says enough were done.
type stepMeasurement struct {
	workload string
	url      string
	store    *counting.Store
	c        int
	// steps counts the DSL steps done so far.
	steps func() int64
	// run submits one run, the n-th, and waits for its end.
	run func(ctx context.Context, n int64) error
}

// measureSteps runs m and returns the measurement, the steps it counted
// and the process CPU per step in µs (-1 when not measured); with
// --cpuprofile it profiles the measurement.
func measureSteps(ctx context.Context, cfg *config, m stepMeasurement) (measurement, int64, float64, error) {
	stopProfile, err := profileCPU(fmt.Sprintf("%s-%s-c%d", m.workload, storeTag(m.url), m.c))
	if err != nil {
		return measurement{}, 0, 0, err
	}
	steps0, cpu0 := m.steps(), processCPU()
	// Operations of the harness are whole runs; the measurement is the
	// steps, so it stops by their count.
	stop := func(_ int64, start time.Time) bool { return cfg.done(m.steps()-steps0, start) }
	res, err := measure(ctx, cfg, m.c, m.store, stop, timed(func(ctx context.Context, _ int, n int64) error { return m.run(ctx, n) }))
	cpu1, steps := processCPU(), m.steps()-steps0
	stopProfile()
	if err != nil {
		return res, 0, 0, err
	}
	cpuPerStep := -1.0
	if cpu0 >= 0 && cpu1 >= 0 && steps > 0 {
		cpuPerStep = float64(cpu1-cpu0) / 1e3 / float64(steps)
	}
	return res, steps, cpuPerStep, nil
}

// profileCPU starts a CPU profile to --cpuprofile's PREFIX-name.pprof
// and returns its stop; without --cpuprofile it does nothing.
func profileCPU(name string) (func(), error) { return cpuProfile(interpCPUProf, name) }

// benchSteps runs loop workflows (c at a time) on the store and reports
// the interpreter's time per DSL step (StepDurations).
func benchSteps(ctx context.Context, cfg *config, url string, raw objstore.Store, c int) error {
	var mu sync.Mutex
	var lats Latencies
	// DSL steps are counted by their end events, which fire once each
	// step's settlement is durable: one delivery runs many pure steps.
	var ended atomic.Int64
	b, err := openBenchInterpreter(ctx, raw, "loop.yaml", loopWorkflow, "bench-interp", interpreter.Options{
		Runtime: runtime.Options{Concurrency: max(c, 1)},
		Events: func(e interpreter.Event) {
			if e.Kind == "end" {
				ended.Add(1)
			}
		},
		StepDurations: func(d time.Duration) {
			mu.Lock()
			lats.Add(d)
			mu.Unlock()
		}})
	if err != nil {
		return err
	}
	defer b.close()
	store := b.store

	m, n, cpu, err := measureSteps(ctx, cfg, stepMeasurement{
		workload: workloadLoop, url: url, store: store, c: c,
		steps: ended.Load,
		run: func(ctx context.Context, n int64) error {
			_, err := b.run(ctx, map[string]any{"n": interpLoop}, fmt.Sprintf("loop-%d", n+1))
			return err
		},
	})
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	p50, p99 := lats.Percentile(50), lats.Percentile(99)
	return cfg.emitFor(url, newResult("interpreter-step", c, n, m.secs, &lats, m.counts,
		withCPU(map[string]any{"runstep_p50_us": p50 * 1000, "runstep_p99_us": p99 * 1000,
			"note": "ops are DSL steps (set/switch/succeed, counted by their end events); runstep p50/p99 are the interpreter's time per DSL step (StepDurations; many fold into one RunStep); ops_per_sec includes the runtime's commits"}, cpu)))
}

// benchActions runs noopWorkflow (c runs at a time) through an engine
// opened on the store with the no-op action registered, and reports
// steps/s and requests per step of effectful steps.
func benchActions(ctx context.Context, cfg *config, url string, raw objstore.Store, c int) error {
	path, cleanup, err := workflowFile("noop.yaml", noopWorkflow)
	if err != nil {
		return err
	}
	defer cleanup()
	store := counting.New(raw)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var calls atomic.Int64
	e, err := engine.OpenStore(ctx, store, engine.Options{Actions: []actions.Action{noopAction{calls: &calls}}, Concurrency: c, Logger: quiet})
	if err != nil {
		return err
	}
	defer func() { _ = e.Close(context.WithoutCancel(ctx)) }()
	w, err := e.Load(path)
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	// Run ids unique across invocations: the engine keeps one store.
	tag := time.Now().UnixNano()
	m, n, cpu, err := measureSteps(ctx, cfg, stepMeasurement{
		workload: workloadNoop, url: url, store: store, c: c,
		steps: calls.Load,
		run: func(ctx context.Context, n int64) error {
			id := fmt.Sprintf("noop-%d-%d", tag, n+1)
			if _, err := e.Submit(ctx, w, nil, id); err != nil {
				return err
			}
			o, err := e.Await(ctx, id)
			if err != nil {
				return err
			}
			if o.Status != runstate.Succeeded {
				return fmt.Errorf("run %s: %s: %s", id, o.Status, o.Error)
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	return cfg.emitFor(url, newResult("interpreter-action", c, n, m.secs, &m.lats, m.counts,
		withCPU(map[string]any{"steps_per_run": noopStepsPerRun,
			"note": "ops are DSL steps (a custom no-op action each, through the engine); p50/p99 are whole runs"}, cpu)))
}

// benchInterpreter is an interpreter on a fresh queue of a counting
// store, its worker running, for the benchmarks that run a workflow.
type benchInterpreter struct {
	w     *interpreter.Workflow
	store *counting.Store
	it    *interpreter.Interpreter
	close func()
}

// openBenchInterpreter loads src (as file name) and opens an interpreter
// with opts on raw under a new queue prefix; quiet logs and the built-in
// actions unless opts names others.
func openBenchInterpreter(ctx context.Context, raw objstore.Store, name, src, prefix string, opts interpreter.Options) (*benchInterpreter, error) {
	path, cleanup, err := workflowFile(name, src)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		return nil, err
	}
	store := counting.New(raw)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet, Prefix: fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())})
	if err != nil {
		return nil, err
	}
	if opts.Actions == nil {
		opts.Actions = builtin.New(builtin.Options{})
	}
	opts.Logger, opts.Runtime.Logger = quiet, quiet
	it, err := interpreter.New(q, store, opts)
	if err != nil {
		q.Close()
		return nil, err
	}
	worker := it.Runtime().Spawn(ctx)
	return &benchInterpreter{w: w, store: store, it: it, close: func() {
		_ = worker.Shutdown(context.Background())
		q.Close()
	}}, nil
}

// run submits the workflow with input as run id and waits for its end:
// an error unless it succeeded.
func (b *benchInterpreter) run(ctx context.Context, input any, id string) (*runstate.Outcome, error) {
	done, unwatch := b.it.Watch(id)
	defer unwatch()
	if _, err := b.it.Submit(ctx, b.w, input, id); err != nil {
		return nil, err
	}
	select {
	case o := <-done:
		if o.Status != runstate.Succeeded {
			return o, fmt.Errorf("run %s: %s: %s", id, o.Status, o.Error)
		}
		return o, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// workflowFile writes src as name in a new temporary folder, for Load;
// cleanup removes the folder.
func workflowFile(name, src string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "tqw-bench-wf-")
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// withCPU adds the process CPU per step to extra when it was measured.
func withCPU(extra map[string]any, cpuPerStep float64) map[string]any {
	if cpuPerStep >= 0 {
		extra["cpu_us_per_step"] = cpuPerStep
	}
	return extra
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
