package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/objstore"
	"github.com/tqw-dsl/tqw/runtime/objstore/storeurl"
	"github.com/tqw-dsl/tqw/runtime/queue"
)

// Exit codes of the run-time commands, besides exitOK, exitInvalid and exitUsage.
const (
	exitFailed      = 1   // the run failed, or the store could not be used
	exitCancelled   = 3   // the run was cancelled
	exitInterrupted = 130 // SIGINT/SIGTERM before the run ended
)

// stepAttempts is how many deliveries a step job gets before the queue
// gives up on it. Workflow retries are the interpreter's (durable delays);
// these attempts absorb crashes and store errors (with the queue's backoff,
// up to 5 minutes apart), so only a step that takes the process down this
// many times, or a store failing for hours, fails its run. Every process
// that opens the store claims every runnable step at once, so a crash loop
// burns an attempt of each of them: the bound must be far above the
// attempts a workflow's own retries need.
const stepAttempts = 100

// memoRetention is how long memo entries (paid llm answers, finished
// foreach items) outlive their run.
const memoRetention = 7 * 24 * time.Hour

// defaultStore is where runs live when neither --store nor TQW_STORE says.
const defaultStore = "file://.tqw"

// addStoreFlag adds --store, defaulting to $TQW_STORE, else file://.tqw.
func addStoreFlag(cmd *cobra.Command, p *string) {
	def := os.Getenv("TQW_STORE")
	if def == "" {
		def = defaultStore
	}
	cmd.Flags().StringVar(p, "store", def, "store URL: file://DIR, mem://NAME or s3://BUCKET/PREFIX?endpoint=HOST:PORT (env TQW_STORE)")
}

// logger logs warnings and errors to w; TQW_LOG=debug|info lowers the level.
func logger(w io.Writer) *slog.Logger {
	level := slog.LevelWarn
	switch strings.ToLower(os.Getenv("TQW_LOG")) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// engineOptions configure openEngine.
type engineOptions struct {
	noShell     bool
	concurrency int
	events      func(interpreter.Event)
	log         *slog.Logger
}

// engine is a store opened as its writer: queue, runtime and interpreter.
// It is the single-process form of the commands: on a file:// store an OS
// lock refuses a second writer instead of letting it fence the first. A
// runtime.Client writing command objects to the store's inbox would
// replace it for commands (submit, signal, cancel) sent to a store another
// process works; it does not exist yet.
type engine struct {
	store objstore.Store
	q     *queue.Queue
	rt    *runtime.Runtime
	it    *interpreter.Interpreter
	// release drops the writer lock, once, after the queue closed.
	release     func()
	releaseOnce sync.Once
}

func openStore(ctx context.Context, url string) (objstore.Store, error) {
	s, err := storeurl.Open(ctx, url)
	if err != nil {
		return nil, failf(exitUsage, "--store: %v", err)
	}
	return s, nil
}

// openEngine opens the store at url as its writer.
func openEngine(ctx context.Context, url string, o engineOptions) (*engine, error) {
	store, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	if o.log == nil {
		o.log = logger(os.Stderr)
	}
	release, err := lockStore(url)
	if errors.Is(err, errStoreBusy) {
		return nil, failf(exitFailed, "%s is being worked by another tqw-dsl process (worker or run); "+
			"stop it first: sending commands to a store another process works is not supported yet", url)
	}
	if err != nil {
		return nil, failf(exitFailed, "opening the store %s: %v", url, err)
	}
	q, err := queue.Open(ctx, store, queue.Options{Logger: o.log, DefaultConfig: queue.QueueConfig{MaxAttempts: stepAttempts}})
	if err != nil {
		release()
		return nil, failf(exitFailed, "opening the store %s: %v", url, err)
	}
	it, err := interpreter.New(store, interpreter.Options{
		Actions: builtin.New(builtin.Options{EnableShell: !o.noShell}),
		Logger:  o.log, Events: o.events,
	})
	if err != nil {
		_ = q.Close()
		release()
		return nil, err
	}
	opts := []runtime.Option{runtime.WithTerminalHook(it), runtime.WithLogger(o.log), runtime.WithMemoRetention(memoRetention)}
	if o.concurrency > 0 {
		opts = append(opts, runtime.WithConcurrency(o.concurrency))
	}
	rt, err := runtime.New(q, store, it, opts...)
	if err != nil {
		_ = q.Close()
		release()
		return nil, err
	}
	it.Bind(rt)
	return &engine{store: store, q: q, rt: rt, it: it, release: release}, nil
}

// errStoreBusy reports a store whose writer lock another process holds.
var errStoreBusy = errors.New("store busy")

// Close makes every commit durable and releases the store. It is idempotent.
func (e *engine) Close() error {
	err := e.q.Close()
	e.releaseOnce.Do(e.release)
	if err != nil {
		return failf(exitFailed, "closing the store: %v", err)
	}
	return nil
}

// view is a store opened read-only: it writes nothing and does not
// disturb a process working the store.
type view struct {
	store objstore.Store
	r     *queue.Reader
	insp  *runtime.Inspector
	it    *interpreter.Interpreter
}

// openView opens the store at url read-only. A store that holds no queue
// yet reads as empty.
func openView(ctx context.Context, url string) (*view, error) {
	store, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	r, err := queue.OpenReader(ctx, store, queue.Options{Logger: logger(os.Stderr)})
	if err != nil {
		return nil, failf(exitFailed, "reading the store %s: %v", url, err)
	}
	it, err := interpreter.New(store, interpreter.Options{Actions: builtin.New(builtin.Options{})})
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return &view{store: store, r: r, insp: runtime.NewInspector(r), it: it}, nil
}

func (v *view) Close() error { return v.r.Close() }

// status returns the status of runID, or a not-found error that names the store.
func (v *view) status(ctx context.Context, url, runID string) (runtime.RunStatus, error) {
	if err := runtime.ValidateRunID(runID); err != nil {
		return runtime.RunStatus{}, failf(exitUsage, "%v", err)
	}
	st, err := v.insp.Status(ctx, runID)
	if errors.Is(err, runtime.ErrRunNotFound) {
		return st, failf(exitFailed, "no run %q in %s (finished runs are kept for 24h; check --store)", runID, url)
	}
	if err != nil {
		return st, failf(exitFailed, "status of run %s: %v", runID, err)
	}
	return st, nil
}

// readJSONArg reads a JSON value given inline or as @file ("" gives def).
func readJSONArg(what, arg string, def any) (any, []byte, error) {
	if arg == "" {
		b, _ := json.Marshal(def)
		return def, b, nil
	}
	raw := []byte(arg)
	if strings.HasPrefix(arg, "@") {
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, nil, failf(exitUsage, "%s: %v", what, err)
		}
		raw = b
	}
	v, err := interpreter.DecodeJSON(raw)
	if err != nil {
		return nil, nil, failf(exitUsage, "%s is not valid JSON: %v", what, err)
	}
	return v, raw, nil
}

// loadWorkflow loads a workflow file and what it calls, printing warnings;
// an invalid file is a usage error (exit 2) with every diagnostic.
func loadWorkflow(cmd *cobra.Command, path string, noShell bool) (*interpreter.Workflow, error) {
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		var le *interpreter.LoadError
		if errors.As(err, &le) && len(le.Diagnostics) > 0 {
			fmt.Fprint(cmd.ErrOrStderr(), le.Diagnostics.String())
			return nil, failf(exitUsage, "%s is not a valid workflow (%d errors); see 'tqw-dsl validate %s'", le.File, len(le.Diagnostics.Errors()), le.File)
		}
		return nil, failf(exitUsage, "%v", err)
	}
	if len(w.Diagnostics) > 0 {
		fmt.Fprint(cmd.ErrOrStderr(), w.Diagnostics.String())
	}
	if noShell && w.UsesAction("shell") {
		return nil, failf(exitUsage, "%s uses the shell action, which --no-shell refuses", path)
	}
	return w, nil
}

// checkInput validates input before anything touches the store.
func checkInput(w *interpreter.Workflow, input any) error {
	if err := w.ValidateInput(input); err != nil {
		return failf(exitUsage, "input of %s: %v", w.Main.File, err)
	}
	return nil
}

// submitError maps a Submit error to an exit code and message.
func submitError(runID string, err error) error {
	switch {
	case errors.Is(err, runtime.ErrInputMismatch):
		return failf(exitUsage, "run id %q is in use by an active run with a different workflow or input; pick another --run-id", runID)
	case errors.Is(err, runtime.ErrInvalidRunID), errors.Is(err, dsl.ErrInputInvalid):
		return failf(exitUsage, "%v", err)
	}
	return failf(exitFailed, "submitting the run: %v", err)
}
