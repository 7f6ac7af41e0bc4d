package runtime

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

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
	memo   *MemoStore
	insp   *Inspector
	// validator checks signals before they are accepted (nil: none).
	validator SignalValidator

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
}

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
	validator       SignalValidator
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
	gate            LeaseGate
	seal            *SealOptions
	gateMargin      time.Duration
}

// Option configures New.
type Option func(*config)

// WithQueueName sets the queue step jobs go to (default "workflow").
// Key queue.Options.QueueConfigs on the same name to set retention, lease
// and backoff; notifications go to name + "-notify".
func WithQueueName(name string) Option { return func(c *config) { c.queueName = name } }

// WithTerminalHook sets the hook notified of terminations (default
// NoopTerminalHook). With NoopTerminalHook the worker runs no notification
// loop at all; notifications left by an earlier configuration then wait in
// the notification queue until a runtime with a hook works it.
func WithTerminalHook(h TerminalHook) Option { return func(c *config) { c.hook = h } }

// WithMemoPrefix sets the object-key prefix of memo and replay entries
// (default "workflow-memo").
func WithMemoPrefix(prefix string) Option { return func(c *config) { c.memoPrefix = prefix } }

// WithStoreNamespaces declares the objects other components keep in the
// runtime's store (an interpreter's definitions, a server's uploads), so
// New and the inbox (runtime/remote) refuse a configuration in which two
// components share keys (objstore.ErrNamespaceOverlap).
func WithStoreNamespaces(spaces ...objstore.Namespace) Option {
	return func(c *config) { c.namespaces = append(c.namespaces, spaces...) }
}

// WithStepOutputReplay records every runner outcome (with its staged
// effects) before settling it, and replays it on a redelivery of the same
// step and payload without invoking the runner. Cost: one GET per step
// delivery and one PUT per recorded outcome.
func WithStepOutputReplay(on bool) Option { return func(c *config) { c.replay = on } }

// WithMemoRetention deletes memo and replay entries of runs terminated more
// than d ago (0, the default, keeps them forever).
func WithMemoRetention(d time.Duration) Option { return func(c *config) { c.memoRetention = d } }

// WithResultRetention sets how long Status and ListRuns report a terminated
// run with its result (default 24h; 0 keeps no result record).
func WithResultRetention(d time.Duration) Option {
	return func(c *config) { c.resultRetention = d }
}

// WithSweepInterval sets how often the retention sweeper runs (default 1m).
func WithSweepInterval(d time.Duration) Option { return func(c *config) { c.sweepInterval = d } }

// WithReconcileInterval sets how often the worker checks the step queue's
// dead count for steps dead-lettered outside the runtime's own settlements
// (default 1s; the check reads memory only).
func WithReconcileInterval(d time.Duration) Option {
	return func(c *config) { c.reconcileEvery = d }
}

// WithClock overrides the clock; by default the runtime reads the queue's.
func WithClock(clock clock.Clock) Option { return func(c *config) { c.clock = clock } }

// WithConcurrency sets how many runners the worker runs at once (default
// 8). A step gives its slot back when its runner returns; up to three times
// as many more steps may then be waiting for their settlement to commit.
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithNotifyConcurrency sets how many notifications run at once (default 2).
func WithNotifyConcurrency(n int) Option { return func(c *config) { c.notifyConc = n } }

// WithShutdownTimeout bounds how long a stopping worker waits for running
// steps before cancelling their contexts (default 30s).
func WithShutdownTimeout(d time.Duration) Option { return func(c *config) { c.shutdownTimeout = d } }

// WithMaxAttempts sets the attempts of every step job (default: the queue's
// configuration for the step queue).
func WithMaxAttempts(n int) Option { return func(c *config) { c.maxAttempts = n } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithEntropy sets the randomness of generated run and job ids (default a
// monotonic source seeded from crypto/rand).
func WithEntropy(r io.Reader) Option { return func(c *config) { c.entropy = r } }

// New returns a runtime for runner on q, with memo entries in store (usually
// the store q was opened on). It makes no request.
func New(q *queue.Queue, store objstore.Store, runner StepRunner, opts ...Option) (*Runtime, error) {
	if q == nil || store == nil || runner == nil {
		return nil, errors.New("runtime: New needs a queue, an object store and a step runner")
	}
	cfg := config{
		queueName: DefaultQueueName, hook: NoopTerminalHook{}, memoPrefix: DefaultMemoPrefix, queuePrefix: q.Prefix(),
		resultRetention: DefaultResultRetention, signalRetention: DefaultSignalRetention, sweepInterval: time.Minute, reconcileEvery: time.Second,
		concurrency: 8, notifyConc: 2, shutdownTimeout: 30 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.queueName == "":
		return nil, errors.New("runtime: WithQueueName: empty queue name")
	case cfg.hook == nil:
		return nil, errors.New("runtime: WithTerminalHook: nil hook; use NoopTerminalHook{}")
	case cfg.concurrency < 1 || cfg.notifyConc < 1:
		return nil, fmt.Errorf("runtime: concurrency %d / notify concurrency %d: want at least 1", cfg.concurrency, cfg.notifyConc)
	case cfg.memoRetention < 0 || cfg.resultRetention < 0 || cfg.signalRetention < 0:
		return nil, errors.New("runtime: retention must not be negative")
	case cfg.sweepInterval <= 0 || cfg.reconcileEvery <= 0 || cfg.shutdownTimeout < 0:
		return nil, errors.New("runtime: sweep and reconcile intervals must be positive, the shutdown timeout not negative")
	case cfg.maxAttempts < 0:
		return nil, fmt.Errorf("runtime: WithMaxAttempts(%d): want 0 (queue default) or more", cfg.maxAttempts)
	case cfg.gateMargin < 0:
		return nil, fmt.Errorf("runtime: WithLeaseGate margin %v: want 0 or more", cfg.gateMargin)
	}
	if err := objstore.ValidateKey(cfg.memoPrefix); err != nil {
		return nil, fmt.Errorf("runtime: WithMemoPrefix: %w", err)
	}
	cfg.namespaces = append(runtimeNamespaces(cfg.queuePrefix, cfg.memoPrefix), cfg.namespaces...)
	sealOpts := SealOptions{}.withDefaults()
	if cfg.seal != nil {
		sealOpts = *cfg.seal
		if err := objstore.ValidateKey(sealOpts.Prefix); err != nil {
			return nil, fmt.Errorf("runtime: WithSealing: %w", err)
		}
		cfg.namespaces = append(cfg.namespaces, objstore.Namespace{Owner: "sealed runs, WithSealing", Prefix: sealOpts.Prefix})
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
	if v, ok := runner.(SignalValidator); ok && !cfg.validatorSet {
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
	rt.memo = &MemoStore{store: store, prefix: cfg.memoPrefix}
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
// with WithStoreNamespaces, for a component that adds its own to check
// with objstore.CheckNamespaces (the inbox of runtime/remote does when it
// is served).
func (rt *Runtime) StoreNamespaces() []objstore.Namespace {
	return append([]objstore.Namespace(nil), rt.cfg.namespaces...)
}

// Store returns the object store the runtime was opened on (New's
// store), for a component that keeps its own objects beside the
// runtime's, under a namespace checked against StoreNamespaces.
func (rt *Runtime) Store() objstore.Store { return rt.store }

// Clock returns the clock the runtime reads every time from (WithClock,
// else the queue's), for a component that must agree with it.
func (rt *Runtime) Clock() clock.Clock { return rt.clock }

// Logger returns the runtime's logger (WithLogger, else slog.Default(),
// with the runtime's component and queue attributes), for a component
// serving the runtime to log beside it.
func (rt *Runtime) Logger() *slog.Logger { return rt.log }

// MemoStore returns the store of memo and replay entries.
func (rt *Runtime) MemoStore() *MemoStore { return rt.memo }

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
