package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	stdruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// env is a queue + runtime on a mem store driven by a clock.Mock.
type env struct {
	t        testing.TB
	ctx      context.Context
	store    objstore.Store
	clock    *clock.Mock
	q        *queue.Queue
	rt       *Runtime
	w        *Worker
	runner   StepRunner
	opts     Options
	qcfg     queue.QueueConfig
	outcomes chan *runstate.Outcome
}

// collector is a terminal hook that forwards every outcome to a channel.
func (e *env) hook() TerminalHook {
	return TerminalHookFunc(func(_ context.Context, o *runstate.Outcome, _ *TerminalEffects) error {
		e.outcomes <- o
		return nil
	})
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func defaultQueueConfig() queue.QueueConfig {
	return queue.QueueConfig{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute, LeaseDuration: time.Minute}
}

func newEnv(t *testing.T, runner StepRunner, opts ...Options) *env {
	t.Helper()
	return newEnvCfg(t, mem.New(), defaultQueueConfig(), runner, opts...)
}

// newEnvCfg is newEnv on store with the step queue configured as qcfg.
// opts (at most one) go to New; the env's terminal hook, a quiet logger
// and no shutdown grace period fill the fields they leave zero.
func newEnvCfg(t testing.TB, store objstore.Store, qcfg queue.QueueConfig, runner StepRunner, opts ...Options) *env {
	t.Helper()
	limit := 60 * time.Second
	if _, bench := t.(*testing.B); bench {
		limit = 10 * time.Minute // BenchmarkWaitingRuns parks 100,000 runs
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, store: store, clock: clock.NewMock(t0), runner: runner,
		outcomes: make(chan *runstate.Outcome, 1000), qcfg: qcfg}
	e.opts = oneOptions(t, opts)
	if e.opts.TerminalHook == nil {
		e.opts.TerminalHook = e.hook()
	}
	if e.opts.Logger == nil {
		e.opts.Logger = quietLogger()
	}
	if e.opts.ShutdownTimeout == 0 {
		e.opts.ShutdownTimeout = -1
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

// open opens the queue and the runtime (not the worker).
func (e *env) open() {
	e.t.Helper()
	q, err := queue.Open(e.ctx, e.store, queue.Options{
		Clock: e.clock, Logger: quietLogger(), SweepInterval: -1, ReapInterval: time.Second,
		QueueConfigs: map[string]queue.QueueConfig{DefaultQueueName: e.qcfg},
		// Notifications: a lease the tests' clock jumps never expire.
		DefaultConfig: queue.QueueConfig{LeaseDuration: 1000 * time.Hour, BackoffBase: time.Second, BackoffMax: time.Minute},
	})
	if err != nil {
		e.t.Fatalf("queue.Open: %v", err)
	}
	e.q = q
	rt, err := New(q, e.store, e.runner, e.opts)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.rt = rt
}

func (e *env) start() {
	e.t.Helper()
	if e.w != nil {
		e.t.Fatal("worker already started")
	}
	e.w = e.rt.Spawn(e.ctx)
}

func (e *env) stop() {
	e.t.Helper()
	if e.w == nil {
		return
	}
	if err := e.w.Shutdown(e.ctx); err != nil {
		e.t.Fatalf("worker shutdown: %v", err)
	}
	e.w = nil
}

func (e *env) close() {
	if e.t.Failed() {
		openGates(e.t)
	}
	e.stop()
	if e.q != nil {
		_ = e.q.Close()
		e.q = nil
	}
}

// reopen closes everything and opens a fresh queue and runtime on the same store.
func (e *env) reopen() {
	e.t.Helper()
	e.close()
	e.open()
}

func (e *env) submit(spec RunSpec) SubmitOutcome {
	e.t.Helper()
	out, err := e.rt.Submit(e.ctx, spec)
	if err != nil {
		e.t.Fatalf("Submit(%q): %v", spec.RunID, err)
	}
	return out
}

// outcome waits for the next terminal notification.
func (e *env) outcome() *runstate.Outcome {
	e.t.Helper()
	select {
	case o := <-e.outcomes:
		return o
	case <-e.ctx.Done():
		e.t.Fatal("timed out waiting for a terminal notification")
		return nil
	}
}

func (e *env) status(runID string) runstate.Status {
	e.t.Helper()
	st, err := e.rt.Status(e.ctx, runID)
	if err != nil {
		e.t.Fatalf("Status(%s): %v", runID, err)
	}
	return st
}

// expectState reads the run's status once; tests call it only where the
// state is already reached (a channel or a commit says so).
func (e *env) expectState(runID string, want runstate.State) runstate.Status {
	e.t.Helper()
	st := e.status(runID)
	if st.State != want {
		e.t.Fatalf("run %s: state %v, want %v (status %+v)", runID, st.State, want, st)
	}
	return st
}

// steps is a runner scripted per step number.
type steps map[int]func(ctx context.Context, s *Step) (StepOutcome, error)

func (m steps) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	f, ok := m[s.Number]
	if !ok {
		return StepOutcome{}, Permanent(errors.New("no such step"))
	}
	return f(ctx, s)
}

// gate lets a test hold a runner inside a step.
type gate struct {
	entered chan *Step
	release chan struct{}
	once    sync.Once
}

var (
	gatesMu sync.Mutex
	gates   = map[testing.TB][]*gate{}
)

// newGate returns a gate that opens at the latest when the test's env
// closes, so a failing test does not leave its worker's shutdown waiting
// on a runner.
func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan *Step, 16), release: make(chan struct{})}
	gatesMu.Lock()
	gates[t] = append(gates[t], g)
	gatesMu.Unlock()
	t.Cleanup(func() {
		g.open()
		gatesMu.Lock()
		delete(gates, t)
		gatesMu.Unlock()
	})
	return g
}

// openGates releases every gate of t.
func openGates(t testing.TB) {
	gatesMu.Lock()
	gs := gates[t]
	gatesMu.Unlock()
	for _, g := range gs {
		g.open()
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// waitJob spins (yielding) until job id satisfies ok; the queue commits
// asynchronously to the test, and there is no notification for every state.
func (e *env) waitJob(id string, ok func(j queue.Job) bool) queue.Job {
	e.t.Helper()
	for {
		j, err := e.q.GetJob(e.ctx, id)
		if err == nil && ok(j) {
			return j
		}
		if e.ctx.Err() != nil {
			e.t.Fatalf("job %s never reached the expected state (last %+v, err %v)", id, j, err)
		}
		stdruntime.Gosched()
	}
}

// waitRun spins (yielding) until the run's status satisfies ok.
func (e *env) waitRun(runID string, ok func(runstate.Status) bool) runstate.Status {
	e.t.Helper()
	for {
		st, err := e.rt.Status(e.ctx, runID)
		if err == nil && ok(st) {
			return st
		}
		if e.ctx.Err() != nil {
			e.t.Fatalf("run %s never reached the expected state (last %+v, err %v)", runID, st, err)
		}
		stdruntime.Gosched()
	}
}

func inState(s runstate.State) func(runstate.Status) bool {
	return func(st runstate.Status) bool { return st.State == s }
}

// yield lets other goroutines run while a test spins on a condition.
func yield() { stdruntime.Gosched() }

// oneOptions returns the Options a helper was given: none or one, so a
// call site reads like New's.
func oneOptions(t testing.TB, opts []Options) Options {
	t.Helper()
	switch len(opts) {
	case 0:
		return Options{}
	case 1:
		return opts[0]
	}
	t.Fatalf("%d Options given, want at most one", len(opts))
	return Options{}
}
