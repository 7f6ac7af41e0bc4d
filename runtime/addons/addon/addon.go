package addon

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Options are the settings of an add-on runner. Each add-on's New starts
// from its own defaults and applies the caller's Options to them.
type Options struct {
	// QueueName is the runtime queue of the runner's runs.
	QueueName string
	// KVPrefix starts the caller-KV keys of the runner's records; it must
	// be non-empty and outside runtime.ReservedKVPrefix.
	KVPrefix string
	// MaxAttempts is how many times a run's step is tried on transient
	// errors (at least 1).
	MaxAttempts int
	// Concurrency is how many steps run at once (at least 1); the runtime
	// delivers notifications with max(2, Concurrency).
	Concurrency int
	// SubmitConcurrency is how many submissions of one call a batch runner
	// keeps in flight, so their commits share WAL PUTs (bulk; jobs submits
	// one job per call and rejects it).
	SubmitConcurrency int
	// Logger is the runner's logger and its runtime's; nil means
	// slog.Default() for the runner and the runtime's own default.
	Logger *slog.Logger
	// RuntimeOptions are passed to runtime.New with the runner's own
	// settings applied over them.
	RuntimeOptions runtime.Options
}

// Option sets one of Options.
type Option func(*Options)

// WithQueueName sets the runtime queue of the runner's runs.
func WithQueueName(name string) Option { return func(o *Options) { o.QueueName = name } }

// WithKVPrefix sets the caller-KV prefix of the runner's records.
func WithKVPrefix(prefix string) Option { return func(o *Options) { o.KVPrefix = prefix } }

// WithMaxAttempts sets how many times a run's step is tried before a
// transient error fails it.
func WithMaxAttempts(n int) Option { return func(o *Options) { o.MaxAttempts = n } }

// WithConcurrency sets how many steps run at once.
func WithConcurrency(n int) Option { return func(o *Options) { o.Concurrency = n } }

// WithSubmitConcurrency sets how many submissions of one call a batch
// runner keeps in flight.
func WithSubmitConcurrency(n int) Option { return func(o *Options) { o.SubmitConcurrency = n } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithRuntimeOptions sets the options passed to runtime.New (clock,
// retention, replay...); a later call replaces an earlier one. The queue
// name, maximum attempts, concurrency (steps and notifications) and
// terminal hook are the runner's own and override these.
func WithRuntimeOptions(ro runtime.Options) Option {
	return func(o *Options) { o.RuntimeOptions = ro }
}

// Apply applies opts to o in order.
func (o *Options) Apply(opts []Option) {
	for _, opt := range opts {
		opt(o)
	}
}

// Check reports the first setting of o that a runner cannot work with,
// naming the option that set it.
func (o *Options) Check() error {
	switch {
	case o.MaxAttempts < 1:
		return fmt.Errorf("WithMaxAttempts(%d): want at least 1", o.MaxAttempts)
	case o.Concurrency < 1:
		return fmt.Errorf("WithConcurrency(%d): want at least 1", o.Concurrency)
	case o.SubmitConcurrency < 1:
		return fmt.Errorf("WithSubmitConcurrency(%d): want at least 1", o.SubmitConcurrency)
	case o.KVPrefix == "" || strings.HasPrefix(o.KVPrefix, runtime.ReservedKVPrefix):
		return fmt.Errorf("WithKVPrefix(%q): want a non-empty prefix outside %q", o.KVPrefix, runtime.ReservedKVPrefix)
	}
	return nil
}

// Log returns the runner's logger: o.Logger, or slog.Default(), tagged
// with component.
func (o *Options) Log(component string) *slog.Logger {
	l := o.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("component", component)
}

// NewRuntime opens the runner's runtime on q and store with runner and
// hook: o.RuntimeOptions first, then the runner's queue name, attempts,
// step and notification concurrency, hook and logger, which win.
func (o *Options) NewRuntime(q *queue.Queue, store objstore.Store, runner runtime.StepRunner, hook runtime.TerminalHook) (*runtime.Runtime, error) {
	ro := o.RuntimeOptions
	ro.QueueName, ro.MaxAttempts, ro.TerminalHook = o.QueueName, o.MaxAttempts, hook
	ro.Concurrency, ro.NotifyConcurrency = o.Concurrency, max(2, o.Concurrency)
	if o.Logger != nil {
		ro.Logger = o.Logger
	}
	return runtime.New(q, store, runner, ro)
}
