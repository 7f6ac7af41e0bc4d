package exampleenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// Main runs run with the command's arguments and stdout, under a context
// that Ctrl-C cancels. When run fails it prints "name: error" to stderr and
// exits with status 1.
func Main(name string, run func(ctx context.Context, args []string, out io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Config says where an example keeps its records and how it logs.
type Config struct {
	// StoreURL is passed to storeurl.Open (mem://NAME, file://DIR, s3://...).
	StoreURL string
	// LogLevel is the lowest level logged, as text, to stderr.
	LogLevel slog.Level
	// Queue configures storage.Open; its Logger is the Env's.
	Queue storage.Options
}

// Env is an example's open store, logger and queue, and the outcome its
// runtime's terminal hook reported.
type Env struct {
	// Store is the store the queue and the runtime use.
	Store objstore.Store
	// Queue is the queue on Store.
	Queue *storage.Queue
	// Log is the logger of the queue and the runtime.
	Log *slog.Logger

	outcomes chan *runstate.Outcome
}

// Open opens the store at cfg.StoreURL and a queue on it. Close the Env
// when done.
func Open(ctx context.Context, cfg Config) (*Env, error) {
	store, err := storeurl.Open(ctx, cfg.StoreURL)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	opts := cfg.Queue
	opts.Logger = log
	q, err := storage.Open(ctx, store, opts)
	if err != nil {
		return nil, fmt.Errorf("open the queue on %s: %w", cfg.StoreURL, err)
	}
	return &Env{Store: store, Queue: q, Log: log, outcomes: make(chan *runstate.Outcome, 1)}, nil
}

// Close closes the queue. Shut the workers down first.
func (e *Env) Close() error { return e.Queue.Close() }

// NewRuntime is runtime.New on the Env's queue and store with the Env's
// logger and a terminal hook that hands the outcome of the run runID (of
// any run when runID is empty) to Await, unless o sets its own.
func (e *Env) NewRuntime(runner runtime.StepRunner, runID string, o runtime.Options) (*runtime.Runtime, error) {
	if o.TerminalHook == nil {
		o.TerminalHook = e.hook(runID)
	}
	if o.Logger == nil {
		o.Logger = e.Log
	}
	return runtime.New(e.Queue, e.Store, runner, o)
}

// hook hands the first outcome of runID (of any run when runID is empty)
// to Await and drops the rest without blocking.
func (e *Env) hook(runID string) runtime.TerminalHook {
	return runtime.TerminalHookFunc(func(_ context.Context, o *runstate.Outcome, _ *runtime.TerminalEffects) error {
		if runID == "" || o.RunID == runID {
			select {
			case e.outcomes <- o:
			default: // a redelivered notification: the first one was taken
			}
		}
		return nil
	})
}

// Outcomes delivers the outcome the terminal hook reported, once the run's
// terminal commit is durable. For a select that waits for other things too;
// Await waits for the outcome alone.
func (e *Env) Outcomes() <-chan *runstate.Outcome { return e.outcomes }

// Await waits for the outcome the terminal hook reports, or returns
// context.Cause(ctx) when ctx is done first.
func (e *Env) Await(ctx context.Context) (*runstate.Outcome, error) {
	select {
	case o := <-e.outcomes:
		return o, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Succeeded returns nil when the run succeeded and otherwise an error that
// names the run, how it ended and why.
func Succeeded(o *runstate.Outcome) error {
	if o.Status != runstate.Succeeded {
		return fmt.Errorf("run %s ended %s: %s", o.RunID, o.Status, o.Error)
	}
	return nil
}

// Status is rt.Status, except that a run the store does not know has the
// zero RunStatus (RunID "", not terminal) rather than an error.
func Status(ctx context.Context, rt *runtime.Runtime, runID string) (runstate.Status, error) {
	st, err := rt.Status(ctx, runID)
	if errors.Is(err, runtime.ErrRunNotFound) {
		return runstate.Status{}, nil
	}
	return st, err
}

// SyncWriter returns a writer that serializes writes to w, for output that
// the worker's goroutines and the main goroutine share.
func SyncWriter(w io.Writer) io.Writer { return &lockedWriter{w: w} }

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
