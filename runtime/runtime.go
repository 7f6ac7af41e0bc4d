package runtime

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Defaults of the options.
const (
	// DefaultQueueName is the queue step jobs go to.
	DefaultQueueName = "workflow"
	// DefaultResultRetention is how long Status reports a terminated run.
	DefaultResultRetention = 24 * time.Hour
	// MaxRetainedResult bounds the Succeed result kept in the status record
	// and the notification; a larger result is omitted (ResultOmitted).
	MaxRetainedResult = 256 << 10
)

// Runtime runs durable multi-step runs on a queue: submission, the worker
// (Run, Spawn), cancellation, signals and status. One Runtime per queue
// name and process; it is safe for concurrent use.
type Runtime struct {
	q      *queue.Queue
	store  objstore.Store
	runner StepRunner
	cfg    config
	clock  clock.Clock
	log    *slog.Logger
	memo   *memo.Store
	insp   *Inspector
	// validator checks signals before they are accepted (nil: none).
	validator signal.Validator

	idMu    sync.Mutex
	entropy io.Reader

	// pending holds per-run totals not written yet (totals.go).
	pending pendingTotals
	// endObservers learn of run ends committed here (RunEndObserver).
	endObservers []RunEndObserver

	// sealer serializes seal passes (seal.go).
	sealer sealer

	deadMu   sync.Mutex
	lastDead int64 // dead count of the step queue at the last reconcile; -1 = never

	// Test hooks, set before the worker starts. beforeAdvanceCommit runs
	// after a transition read its inputs (the signal buffer among them)
	// and before its settlement commits; beforeSettleCommit runs before
	// any settlement of a step's outcome or error commits (not before a
	// cancellation's); beforeReconcileCommit likewise for the reconcile of
	// one run.
	beforeAdvanceCommit   func(runID, signalKey string)
	beforeSettleCommit    func(runID string, step int)
	beforeReconcileCommit func(runID string)
	// beforeSealCommit runs after a segment's objects are written and
	// before the commit that references them.
	beforeSealCommit func(segment string)
	// afterSweep runs after each pass of the worker's retention sweep.
	afterSweep func()
	// sealWaits runs each time the seal loop starts waiting for a batch
	// (its delay timer set), for tests on the mock clock.
	sealWaits func()
}

// Options configure New. The zero value of every field is its default,
// stated on the field, so Options{} is a working configuration.
type Options struct {
	// QueueName is the queue step jobs go to (default DefaultQueueName).
	// Key queue.Options.QueueConfigs on the same name to set retention,
	// lease and backoff of step jobs.
	QueueName string
	// TerminalHook is notified of terminations (default none). Without a
	// hook the worker runs no notification loop at all;
	// notifications left by an earlier configuration then wait in the
	// notification queue until a hook is configured again.
	TerminalHook TerminalHook
	// MemoPrefix is the object-key prefix of memo and replay entries
	// (default memo.DefaultPrefix, "workflow-memo").
	MemoPrefix string
	// StoreNamespaces declares the objects other components keep in the
	// runtime's store (object-key prefixes and their owners): New and the
	// inbox (runtime/remote) refuse a configuration in which two overlap.
	StoreNamespaces []objstore.Namespace
	// StepOutputReplay records every runner outcome (with its staged
	// effects) and replays it on redelivery instead of invoking the runner
	// again: one GET per delivery, one PUT per recorded outcome.
	StepOutputReplay bool
	// MemoRetention deletes memo and replay entries of runs terminated
	// more than this long ago (0 keeps them).
	MemoRetention time.Duration
	// ResultRetention is how long Status and ListRuns report a terminated
	// run (0: DefaultResultRetention; negative: no result is retained).
	ResultRetention time.Duration
	// SignalRetention is how long a buffered signal waits for a step to
	// wait on its key before the retention sweep drops it (0:
	// signal.DefaultRetention, 7 days; negative: buffered signals are kept
	// until they are consumed or cleared). The age counts from the
	// signal's buffering; a signal buffered by a version without retention
	// counts from the first sweep that sees it.
	SignalRetention time.Duration
	// SignalValidator checks every signal before it is accepted (nil: the
	// StepRunner, when it implements signal.Validator).
	SignalValidator signal.Validator
	// NoSignalValidator turns signal validation off, also when the
	// StepRunner implements signal.Validator.
	NoSignalValidator bool
	// SweepInterval is how often the retention sweeper runs (default 1m).
	SweepInterval time.Duration
	// ReconcileInterval is how often the worker checks the step queue's
	// dead count for steps the queue dead-lettered on its own (default 1s).
	ReconcileInterval time.Duration
	// Clock is the clock the runtime reads every time from (default the
	// queue's).
	Clock clock.Clock
	// Concurrency is how many runners the worker runs at once (default 8).
	Concurrency int
	// NotifyConcurrency is how many notifications run at once (default
	// Concurrency, at least 2).
	NotifyConcurrency int
	// ShutdownTimeout bounds how long a stopping worker waits for running
	// steps (0: 30s; negative: it does not wait).
	ShutdownTimeout time.Duration
	// MaxAttempts is the attempts of every step job (0: the queue's
	// configuration for the step queue).
	MaxAttempts int
	// Logger is the runtime's logger (default slog.Default()).
	Logger *slog.Logger
	// Entropy is the randomness of generated run and job ids (default a
	// ULID monotonic source).
	Entropy io.Reader
	// LeaseGate, when set, makes the worker start work only while the gate
	// is valid: it claims no step while the lease is not valid, invokes a
	// step's runner only while the lease stays valid for LeaseMargin more,
	// and the inbox of runtime/remote (AwaitLease) applies no command
	// otherwise. LeaseMargin must bound the time from that check to the
	// step's first side effect (lease.Lease.Margin, TTL/3, does with the
	// interpreter). When the gate is lost, Run returns an error wrapping
	// lease.ErrLost at once and running steps are cancelled. Checking the
	// gate makes no request.
	LeaseGate   lease.Gate
	LeaseMargin time.Duration
	// Sealing, when set, moves finished runs out of the KV store into
	// immutable segment objects (runtime/archive) once their end is
	// handled (the terminal hook, if it observes the run, acknowledged):
	// Run seals them in batches as they end (SealOptions.BatchRuns, or
	// SealOptions.Delay after the first), so the KV holds only recent
	// ends; the catalog finds sealed runs, and Status and ListRuns read
	// them through a bounded cache. Only runs with a retained
	// result are sealed (ResultRetention not negative). Zero fields of
	// SealOptions take their defaults. See "Sealed runs" in the package doc.
	Sealing *SealOptions
}

// config is Options with the defaults applied.
type config struct {
	queueName       string
	notifyQueue     string
	hook            TerminalHook
	memoPrefix      string
	queuePrefix     string
	namespaces      []objstore.Namespace
	replay          bool
	memoRetention   time.Duration
	resultRetention time.Duration
	signalRetention time.Duration
	validator       signal.Validator
	validatorSet    bool
	sweepInterval   time.Duration
	reconcileEvery  time.Duration
	clock           clock.Clock
	concurrency     int
	notifyConc      int
	shutdownTimeout time.Duration
	maxAttempts     int
	logger          *slog.Logger
	entropy         io.Reader
	gate            lease.Gate
	seal            *SealOptions
	gateMargin      time.Duration
}

// orDefault returns v, or def when v is zero, or 0 when v is negative (the
// fields where a negative value turns the feature off).
func orDefault(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// config applies the defaults to o.
func (o Options) config(q *queue.Queue) config {
	cfg := config{
		queueName: o.QueueName, hook: o.TerminalHook, memoPrefix: o.MemoPrefix, queuePrefix: q.Prefix(),
		namespaces: append([]objstore.Namespace(nil), o.StoreNamespaces...), replay: o.StepOutputReplay,
		memoRetention:   o.MemoRetention,
		resultRetention: orDefault(o.ResultRetention, DefaultResultRetention),
		signalRetention: orDefault(o.SignalRetention, signal.DefaultRetention),
		validator:       o.SignalValidator, validatorSet: o.SignalValidator != nil || o.NoSignalValidator,
		sweepInterval: o.SweepInterval, reconcileEvery: o.ReconcileInterval, clock: o.Clock,
		concurrency: o.Concurrency, notifyConc: o.NotifyConcurrency,
		shutdownTimeout: orDefault(o.ShutdownTimeout, 30*time.Second),
		maxAttempts:     o.MaxAttempts, logger: o.Logger, entropy: o.Entropy,
		gate: o.LeaseGate, gateMargin: o.LeaseMargin,
	}
	if o.NoSignalValidator {
		cfg.validator = nil
	}
	if cfg.queueName == "" {
		cfg.queueName = DefaultQueueName
	}
	if cfg.hook == nil {
		cfg.hook = noopTerminalHook{}
	}
	if cfg.memoPrefix == "" {
		cfg.memoPrefix = memo.DefaultPrefix
	}
	if cfg.sweepInterval == 0 {
		cfg.sweepInterval = time.Minute
	}
	if cfg.reconcileEvery == 0 {
		cfg.reconcileEvery = time.Second
	}
	if cfg.concurrency == 0 {
		cfg.concurrency = 8
	}
	if cfg.notifyConc == 0 {
		// Up to Concurrency runs can end at once; fewer notification
		// slots let ends (and their unsealed records) queue up.
		cfg.notifyConc = max(2, cfg.concurrency)
	}
	if o.Sealing != nil {
		so := o.Sealing.withDefaults()
		cfg.seal = &so
	}
	return cfg
}

// New returns a runtime for runner on q, with memo entries in store (usually
// the store q was opened on). It makes no request.
func New(q *queue.Queue, store objstore.Store, runner StepRunner, opts Options) (*Runtime, error) {
	if q == nil || store == nil || runner == nil {
		return nil, errors.New("runtime: New needs a queue, an object store and a step runner")
	}
	cfg := opts.config(q)
	switch {
	case cfg.concurrency < 1 || cfg.notifyConc < 1:
		return nil, fmt.Errorf("runtime: Options.Concurrency %d / NotifyConcurrency %d: want at least 1 (0 for the default)", cfg.concurrency, cfg.notifyConc)
	case cfg.memoRetention < 0:
		return nil, fmt.Errorf("runtime: Options.MemoRetention %v: want 0 (keep) or more", cfg.memoRetention)
	case cfg.sweepInterval < 0 || cfg.reconcileEvery < 0:
		return nil, errors.New("runtime: Options.SweepInterval and ReconcileInterval must not be negative (0 for the default)")
	case cfg.maxAttempts < 0:
		return nil, fmt.Errorf("runtime: Options.MaxAttempts %d: want 0 (queue default) or more", cfg.maxAttempts)
	case cfg.gateMargin < 0:
		return nil, fmt.Errorf("runtime: Options.LeaseMargin %v: want 0 or more", cfg.gateMargin)
	}
	if err := objstore.ValidateKey(cfg.memoPrefix); err != nil {
		return nil, fmt.Errorf("runtime: Options.MemoPrefix: %w", err)
	}
	cfg.namespaces = append(runtimeNamespaces(cfg.queuePrefix, cfg.memoPrefix), cfg.namespaces...)
	sealOpts := SealOptions{}.withDefaults()
	if cfg.seal != nil {
		sealOpts = *cfg.seal
		if err := objstore.ValidateKey(sealOpts.Prefix); err != nil {
			return nil, fmt.Errorf("runtime: Options.Sealing: %w", err)
		}
		cfg.namespaces = append(cfg.namespaces, objstore.Namespace{Owner: "sealed runs, Options.Sealing", Prefix: sealOpts.Prefix})
	}
	if err := objstore.CheckNamespaces(cfg.namespaces...); err != nil {
		return nil, err
	}
	cfg.notifyQueue = cfg.queueName + "-notify"
	// Requests made under a step's context count toward its run's totals.
	store = counting.Scoped(store)
	rt := &Runtime{q: q, store: store, runner: runner, cfg: cfg, clock: cfg.clock, log: cfg.logger,
		entropy: cfg.entropy, lastDead: -1, validator: cfg.validator}
	rt.endObservers = endObservers(runner, cfg.hook)
	rt.sealer.wake = make(chan struct{}, 1)
	if v, ok := runner.(signal.Validator); ok && !cfg.validatorSet {
		rt.validator = v
	}
	if rt.clock == nil {
		rt.clock = q.Clock()
	}
	if rt.log == nil {
		rt.log = slog.Default()
	}
	rt.log = rt.log.With("component", "runtime", "queue", cfg.queueName)
	if rt.entropy == nil {
		rt.entropy = ulid.DefaultEntropy()
	}
	rt.memo = memo.NewStore(store, cfg.memoPrefix, runstate.ValidateRunID)
	// Sealed runs stay readable also when this runtime does not seal.
	rt.insp = NewArchiveInspector(q, store, sealOpts)
	return rt, nil
}

// Queue returns the queue the runtime runs on.
func (rt *Runtime) Queue() *queue.Queue { return rt.q }

// QueueName returns the step queue's name.
func (rt *Runtime) QueueName() string { return rt.cfg.queueName }

// NotifyQueueName returns the notification queue's name.
func (rt *Runtime) NotifyQueueName() string { return rt.cfg.notifyQueue }

// StoreNamespaces returns the object-key namespaces of the runtime's
// store: the runtime's own (queue, memo, writer lease) and those declared
// with Options.StoreNamespaces, for a component that adds its own to check
// with objstore.CheckNamespaces (the inbox of runtime/remote does when it
// is served).
func (rt *Runtime) StoreNamespaces() []objstore.Namespace {
	return append([]objstore.Namespace(nil), rt.cfg.namespaces...)
}

// Store returns the object store the runtime was opened on (New's
// store), for a component that keeps its own objects beside the
// runtime's, under a namespace checked against StoreNamespaces.
func (rt *Runtime) Store() objstore.Store { return rt.store }

// Clock returns the clock the runtime reads every time from (Options.Clock,
// else the queue's), for a component that must agree with it.
func (rt *Runtime) Clock() clock.Clock { return rt.clock }

// Logger returns the runtime's logger (Options.Logger, else slog.Default(),
// with the runtime's component and queue attributes), for a component
// serving the runtime to log beside it.
func (rt *Runtime) Logger() *slog.Logger { return rt.log }

// memo.Store returns the store of memo and replay entries.
func (rt *Runtime) MemoStore() *memo.Store { return rt.memo }

// Inspector returns the runtime's read side (Status, ListRuns).
func (rt *Runtime) Inspector() *Inspector { return rt.insp }

// newID returns a fresh ULID string timestamped by the runtime's clock.
func (rt *Runtime) newID() string {
	rt.idMu.Lock()
	defer rt.idMu.Unlock()
	id, err := ulid.New(ulid.Timestamp(rt.clock.Now()), rt.entropy)
	if err != nil {
		// The entropy source failed or ran out (a monotonic source within
		// one millisecond); fall back to a fresh default source.
		rt.entropy = ulid.DefaultEntropy()
		if id, err = ulid.New(ulid.Timestamp(rt.clock.Now()), rt.entropy); err != nil {
			id = ulid.Make()
		}
	}
	return id.String()
}
