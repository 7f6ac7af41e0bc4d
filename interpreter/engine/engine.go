package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/interpreter/tracing"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// Defaults of Options.
const (
	// DefaultStepAttempts bounds the deliveries of one step job.
	// Workflow retries are the interpreter's (durable delays); these
	// attempts absorb crashes and store errors (with the queue's backoff,
	// up to 5 minutes apart), so only a step that takes the process down
	// this many times, or a store failing for hours, fails its run. Every
	// process that opens the store claims every runnable step at once, so
	// a crash loop burns an attempt of each: the bound is far above the
	// attempts a workflow's own retries need.
	DefaultStepAttempts = 100
	// DefaultMemoRetention is how long memo entries (paid llm answers,
	// finished foreach items) outlive their run.
	DefaultMemoRetention = 7 * 24 * time.Hour
)

// ErrNotStarted reports a call that needs the worker before Start.
var ErrNotStarted = errors.New("engine: not started")

// Options configure Open. The zero value is usable: the built-in http
// and llm actions, no shell, results kept for runtime.DefaultResultRetention.
type Options struct {
	// Actions are the program's own actions, callable from workflow files
	// by name; an action that implements actions.SchemaDeclarer has its
	// with fields checked at load. Registered once, here.
	Actions []actions.Action
	// Shell enables the built-in shell action.
	Shell bool
	// Concurrency is how many steps run at once (default the runtime's).
	Concurrency int
	// Retention is how long a finished run's status, result, history and
	// outputs are kept (default runtime.DefaultResultRetention).
	Retention time.Duration
	// StepAttempts bounds one step's deliveries (default DefaultStepAttempts).
	StepAttempts int
	// MemoRetention is how long memo entries outlive their run (default
	// DefaultMemoRetention).
	MemoRetention time.Duration
	// HistoryVisits is how many visits of each step a run's history keeps
	// (interpreter.Options.HistoryVisits: 0 the default, negative all).
	HistoryVisits int
	// Owner names this process in the writer lease (default
	// "tqw-engine-<ULID>"); Endpoint is advertised in it.
	Owner, Endpoint string
	// LeaseTTL is the writer lease's TTL on stores without a file lock
	// (default lease.DefaultTTL).
	LeaseTTL time.Duration
	// InboxPoll bounds the pause between two reads of the store inbox
	// (default the runtime's).
	InboxPoll time.Duration
	// Getenv reads secrets (default os.Getenv).
	Getenv func(string) string
	// Events, when set, is called as steps start and end; it must not block.
	Events func(interpreter.Event)
	// Ended, when set, is called with the outcome of each run that did
	// not succeed (interpreter.Options.Ended); it must not block.
	Ended func(*runstate.Outcome)
	// TracerProvider, when set, traces runs, steps and the http and llm
	// actions' requests (interpreter.Options.TracerProvider,
	// tracing.Transport); nil traces nothing. tracing.FromEnv builds one
	// from the OTEL_* environment; the caller shuts it down after Close.
	TracerProvider trace.TracerProvider
	// Logger receives logs (default slog.Default()).
	Logger *slog.Logger
	// KeepFinishedInKV turns sealing off: finished runs' status, history
	// and outputs stay in the KV store (in memory) for the whole
	// retention instead of moving into sealed segments once their end is
	// handled (runtime.WithSealing, see runtime's "Sealed runs"). Sealed
	// runs read the same through status, history, list and the API; turn
	// it off only while a build that predates runtime/archive still reads
	// the store (such a build does not see sealed runs).
	KeepFinishedInKV bool
}

// Engine is a store opened as its writer, ready to run workflows.
type Engine struct {
	store objstore.Store
	lease *lease.Lease
	q     *storage.Queue
	rt    *runtime.Runtime
	it    *interpreter.Interpreter
	acts  *actions.Registry
	log   *slog.Logger
	opts  Options

	mu      sync.Mutex
	started bool
	worker  *runtime.Worker
	stop    context.CancelFunc
	loops   sync.WaitGroup
	loopErr error

	closeOnce sync.Once
	closeErr  error
}

// Open opens the store at url (file://DIR, s3://BUCKET/PREFIX?..., mem://NAME)
// and takes its writer lease. See storeurl for the URL forms.
func Open(ctx context.Context, url string, o Options) (*Engine, error) {
	store, err := storeurl.Open(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("engine: open the store %s: %w", url, err)
	}
	return OpenStore(ctx, store, o)
}

// OpenStore is Open on a store the caller opened (and may have wrapped).
func OpenStore(ctx context.Context, store objstore.Store, o Options) (*Engine, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Owner == "" {
		o.Owner = "tqw-engine-" + ulid.Make().String()
	}
	held, err := lease.Acquire(ctx, store, lease.Options{Owner: o.Owner, Endpoint: o.Endpoint, TTL: o.LeaseTTL, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("engine: take the store's writer lease: %w", err)
	}
	e, err := New(ctx, store, held, o)
	if err != nil {
		_ = held.Release(context.WithoutCancel(ctx)) // the error that matters is err
		return nil, err
	}
	return e, nil
}

// New builds an engine on a store whose writer lease the caller already
// holds (the CLI takes it with its own waiting rules). The engine owns
// the lease from then on: Close releases it.
func New(ctx context.Context, store objstore.Store, held *lease.Lease, o Options) (*Engine, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.StepAttempts <= 0 {
		o.StepAttempts = DefaultStepAttempts
	}
	if o.MemoRetention <= 0 {
		o.MemoRetention = DefaultMemoRetention
	}
	if o.Retention <= 0 {
		o.Retention = runtime.DefaultResultRetention
	}
	acts := builtin.New(builtin.Options{EnableShell: o.Shell, HTTPClient: tracing.HTTPClient(o.TracerProvider)})
	for _, a := range o.Actions {
		if err := acts.Register(a); err != nil {
			return nil, fmt.Errorf("engine: register action %q: %w", a.Name(), err)
		}
	}
	e := &Engine{store: store, lease: held, acts: acts, log: o.Logger, opts: o}
	q, err := storage.Open(ctx, store, storage.Options{Logger: o.Logger, DefaultConfig: storage.QueueConfig{MaxAttempts: o.StepAttempts}})
	if err != nil {
		return nil, fmt.Errorf("engine: open the queue: %w", err)
	}
	e.q = q
	// The interpreter's records (history, outputs) expire with the
	// runtime's result, so a run's id is free again once both are gone.
	sweep := SweepInterval(o.Retention)
	// No step starts and no command is applied unless the lease stays
	// valid for its margin: a writer that lost the store stops before
	// another may take over.
	ropts := runtime.Options{Logger: o.Logger, MemoRetention: o.MemoRetention, ResultRetention: o.Retention, SweepInterval: sweep, LeaseGate: held, LeaseMargin: held.Margin(), StoreNamespaces: interpreter.StoreNamespaces()}
	if o.Concurrency > 0 {
		ropts.Concurrency = o.Concurrency
	}
	if !o.KeepFinishedInKV {
		// Memory then holds active runs and bounded caches, not the
		// retained history (runtime's "Sealed runs").
		ropts.Sealing = &runtime.SealOptions{}
	}
	e.it, err = interpreter.New(q, store, interpreter.Options{
		Actions: acts, Getenv: o.Getenv, Logger: o.Logger, Events: o.Events, TracerProvider: o.TracerProvider,
		Ended:     o.Ended,
		Retention: o.Retention, SweepInterval: sweep, Runtime: ropts, HistoryVisits: o.HistoryVisits,
	})
	if err != nil {
		_ = q.Close()
		return nil, err
	}
	e.rt = e.it.Runtime()
	return e, nil
}

// SweepInterval is how often a writer with the given retention looks for
// expired runs: a tenth of the retention, between 100 ms and a minute,
// so a short retention is honored closely and a long one costs one pass
// a minute (a pass with nothing expired costs nothing).
func SweepInterval(retention time.Duration) time.Duration {
	return min(max(retention/10, 100*time.Millisecond), interpreter.DefaultSweepInterval)
}

// Load reads a workflow file (and the files it calls), knowing the
// engine's actions.
func (e *Engine) Load(path string) (*interpreter.Workflow, error) {
	return interpreter.Load(path, e.LoadOptions())
}

// LoadOptions are the dsl options that know the engine's actions, for
// loading workflows some other way (dsl.LoadBytes and the like).
func (e *Engine) LoadOptions() dsl.Options { return interpreter.LoadOptions(e.acts, dsl.Options{}) }

// Start starts the worker, the retention sweep and the store inbox in the
// background; Close stops them. Calling it twice is an error.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return errors.New("engine: already started")
	}
	e.started = true
	base := context.WithoutCancel(ctx)
	lctx, stop := context.WithCancel(base)
	e.stop = stop
	e.worker = e.rt.Spawn(base)
	e.loops.Add(2)
	go func() {
		defer e.loops.Done()
		e.it.SweepLoop(lctx)
	}()
	go func() {
		defer e.loops.Done()
		err := remote.ServeInbox(lctx, e.rt, remote.InboxOptions{Writer: e.lease.Info().String(), MaxInterval: e.opts.InboxPoll})
		if err != nil && lctx.Err() == nil {
			e.log.Error("engine: applying other processes' commands stopped", "err", err)
			e.mu.Lock()
			e.loopErr = err
			e.mu.Unlock()
		}
	}()
	return nil
}

// Submit submits w on input under runID (empty: a fresh ULID). The same
// id with the same workflow and input again is a no-op (NewlySubmitted
// false); a different input under an active id is refused.
func (e *Engine) Submit(ctx context.Context, w *interpreter.Workflow, input any, runID string, opts ...interpreter.SubmitOption) (runtime.SubmitOutcome, error) {
	if runID == "" {
		runID = ulid.Make().String()
	}
	return e.it.Submit(ctx, w, input, runID, opts...)
}

// Await waits until runID ends and returns its outcome, or ctx's error.
// A run that ended before the call (and is still retained) returns at
// once. The engine must be started for a run to progress.
func (e *Engine) Await(ctx context.Context, runID string) (*runstate.Outcome, error) {
	done, unwatch := e.it.Watch(runID)
	defer unwatch()
	st, err := e.rt.Status(ctx, runID)
	if err != nil {
		return nil, err
	}
	if st.State.Terminal() {
		return OutcomeOf(st), nil
	}
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if !started {
		return nil, ErrNotStarted
	}
	select {
	case o := <-done:
		return o, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run submits w on input under a fresh run id and awaits its outcome.
func (e *Engine) Run(ctx context.Context, w *interpreter.Workflow, input any) (*runstate.Outcome, error) {
	runID := ulid.Make().String()
	done, unwatch := e.it.Watch(runID)
	defer unwatch()
	if _, err := e.Submit(ctx, w, input, runID); err != nil {
		return nil, err
	}
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if !started {
		return nil, fmt.Errorf("engine: run %s submitted; %w: it runs once Start is called", runID, ErrNotStarted)
	}
	select {
	case o := <-done:
		return o, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// OutcomeOf is the outcome of a terminated run's status.
func OutcomeOf(st runstate.Status) *runstate.Outcome {
	o := &runstate.Outcome{RunID: st.RunID, Status: runstate.Failed, Result: st.Result, ResultOmitted: st.ResultOmitted,
		Error: st.Error, Step: st.Step, Headers: st.Headers, SubmittedAt: st.SubmittedAt, FinishedAt: st.FinishedAt}
	switch st.State {
	case runstate.StateSucceeded:
		o.Status = runstate.Succeeded
	case runstate.StateCancelled:
		o.Status = runstate.Cancelled
	}
	return o
}

// Interpreter, Runtime, Store and Lease give the layers for what the
// engine does not wrap (signals, cancel, status and listing are the
// runtime's; history is the interpreter's).
func (e *Engine) Interpreter() *interpreter.Interpreter { return e.it }

// Runtime returns the step runtime.
func (e *Engine) Runtime() *runtime.Runtime { return e.rt }

// Store returns the store the engine writes.
func (e *Engine) Store() objstore.Store { return e.store }

// Lease returns the store's writer lease the engine holds.
func (e *Engine) Lease() *lease.Lease { return e.lease }

// Close stops the worker (letting steps in flight finish, up to ctx's
// deadline), the sweep and the inbox, closes the queue (everything
// committed is durable) and releases the lease (a failed release is
// logged: the lease expires by itself). It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		var errs []error
		e.mu.Lock()
		worker, stop := e.worker, e.stop
		e.mu.Unlock()
		if stop != nil {
			stop()
			e.loops.Wait()
		}
		if worker != nil {
			if err := worker.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("engine: stop the worker: %w", err))
			}
		}
		if err := e.q.Close(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close the queue: %w", err))
		}
		// After the last commit: the runs that ended have ended their spans.
		e.it.EndRunSpans()
		// Bounded: a lease object that cannot be released expires by
		// itself, and everything is durable already.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := e.lease.Release(rctx); err != nil {
			e.log.Warn("engine: releasing the writer lease failed; it expires by itself", "err", err)
		}
		cancel()
		e.mu.Lock()
		if e.loopErr != nil {
			errs = append(errs, e.loopErr)
		}
		e.mu.Unlock()
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}
