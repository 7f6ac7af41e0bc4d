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

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	tqwengine "github.com/tqw-dsl/tqw/interpreter/engine"
	"github.com/tqw-dsl/tqw/interpreter/tracing"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

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

// engineOptions configure openEngine and openSession.
type engineOptions struct {
	noShell     bool
	concurrency int
	events      func(interpreter.Event)
	log         *slog.Logger
	// name is the command ("worker", "run", "submit", ...), for the
	// client and lease descriptions.
	name string
	// brief marks a command that holds the store only for a moment
	// (submit, signal, cancel, run --detach): another process waits for
	// it to finish instead of sending it commands it will not serve.
	brief bool
	// inboxPoll is the longest pause between two reads of the inbox
	// (default runtime's, 5 s).
	inboxPoll time.Duration
	// retention is how long a finished run's status, result, history and
	// outputs are kept (default runtime.DefaultResultRetention).
	retention time.Duration
	// historyVisits is --history-visits (0: the interpreter's default).
	historyVisits int
	// errOut receives the lease takeover countdown (default os.Stderr).
	errOut io.Writer
	// wrapStore, when set, wraps the store the writer works through (for
	// metrics).
	wrapStore func(objstore.Store) objstore.Store
	// inboxAnswered, when set, observes the commands the inbox answers.
	inboxAnswered func(remote.Answered)
	// ended, when set, observes the runs that did not succeed (metrics).
	ended func(*runstate.Outcome)
	// endpoint is the HTTP address the writer serves (serve), advertised
	// in its lease for other processes (lease.Info.Endpoint).
	endpoint string
	// getenv, when set, reads the secrets of the runs the writer works
	// (serve: only those its operator allows); nil is os.Getenv.
	getenv func(string) string
}

// leaseOwner names a writer lease holder: tqw-dsl-<command>-<ULID>, with
// the command "brief" for one that holds the store only for a moment.
func (o engineOptions) leaseOwner() string {
	name := o.name
	if o.brief {
		name = briefOwner
	}
	return "tqw-dsl-" + name + "-" + ulid.Make().String()
}

// briefOwner is the command part of the lease owner of a brief command.
const briefOwner = "brief"

// isBrief reports whether a lease owner is a brief tqw-dsl command, or
// not known yet (a lock file its holder has not written yet).
func isBrief(owner string) bool {
	return owner == "" || strings.HasPrefix(owner, "tqw-dsl-"+briefOwner+"-")
}

// briefWait bounds how long a process waits for a brief command to give
// the store's writer lease back.
const briefWait = 30 * time.Second

// engine is a store opened as its writer: writer lease, queue, runtime and
// interpreter. The lease (a flock on file:// stores, a renewed lease
// object elsewhere) makes a second process that wants to write find this
// one live and send its commands to this one's inbox instead of fencing
// it; see serve.
type engine struct {
	url   string
	store objstore.Store
	lease *lease.Lease
	q     *storage.Queue
	rt    *runtime.Runtime
	it    *interpreter.Interpreter
	core  *tqwengine.Engine
	log   *slog.Logger
	// inboxPoll is InboxOptions.MaxInterval of serve (0: the default).
	inboxPoll time.Duration
	// inboxAnswered is InboxOptions.OnAnswered of serve.
	inboxAnswered func(remote.Answered)
	// tracing exports the spans of the runs (off unless OTEL_* says).
	tracing *tracing.Provider

	closeOnce sync.Once
	closeErr  error
}

// storeSourceKey is the context key of where the command's --store value
// came from (storeSource), set by the root command before any RunE.
type storeSourceKey struct{}

// storeSource says where a --store value came from: the flag, the
// environment or the default.
func storeSource(flagGiven bool) string {
	switch {
	case flagGiven:
		return "from --store"
	case os.Getenv("TQW_STORE") != "":
		return "from TQW_STORE"
	}
	return "the default: neither --store nor TQW_STORE is set"
}

// openStore opens the store at url for reading and writing (a file
// store's folder is created). A URL that names no store is a usage error;
// a store that cannot be opened is a failure.
func openStore(ctx context.Context, url string) (objstore.Store, error) {
	s, err := storeurl.Open(ctx, url)
	if errors.Is(err, storeurl.ErrInvalid) {
		return nil, failf(exitUsage, "--store: %v", err)
	}
	if err != nil {
		return nil, failf(exitFailed, "opening the store %s: %v", url, err)
	}
	return s, nil
}

// openReadOnlyStore opens the store at url for a command that only reads
// it: nothing is created or changed, every write fails, and a URL at which
// nothing is stored is an error naming it and where it came from.
func openReadOnlyStore(ctx context.Context, url string) (objstore.Store, error) {
	s, err := storeurl.OpenReadOnly(ctx, url)
	var none *storeurl.NoStoreError
	switch {
	case errors.As(err, &none):
		source, _ := ctx.Value(storeSourceKey{}).(string)
		if source == "" {
			source = "from --store"
		}
		return nil, &exitError{code: exitFailed, msg: fmt.Sprintf("no store at %s (%s): %s; check the URL", url, source, none.Reason), cause: none}
	case errors.Is(err, storeurl.ErrInvalid):
		return nil, failf(exitUsage, "--store: %v", err)
	case err != nil:
		return nil, failf(exitFailed, "reading the store %s: %v", url, err)
	}
	return s, nil
}

// refuseMem refuses a mem:// store for a command whose run must outlive
// the process (submit, run --detach): the store dies with it.
func refuseMem(url, what string) error {
	if strings.HasPrefix(url, "mem://") {
		return failf(exitUsage, "%s with --store %s: a mem:// store lives only in this process, so the run would vanish when it exits; use a file:// or s3:// store", what, url)
	}
	return nil
}

// busyError reports a store a live writer holds: the caller sends its
// command to that writer (openSession) or gives up (worker).
type busyError struct {
	url    string
	holder *lease.ActiveError
}

func (e *busyError) Error() string {
	return fmt.Sprintf("%s is worked by %s, whose lease is live", e.url, e.holder.Holder)
}

func (e *busyError) Unwrap() error { return e.holder }

// openEngine opens the store at url as its writer. When a live writer
// holds it, the error is a *busyError (it matches lease.ErrActive).
func openEngine(ctx context.Context, url string, o engineOptions) (*engine, error) {
	store, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	return openEngineOn(ctx, url, store, o)
}

func openEngineOn(ctx context.Context, url string, store objstore.Store, o engineOptions) (*engine, error) {
	if o.log == nil {
		o.log = logger(os.Stderr)
	}
	if o.wrapStore != nil {
		store = o.wrapStore(store)
	}
	tr, err := tracing.FromEnv(ctx, tracing.Options{ServiceName: "tqw-dsl", Logger: o.log})
	if err != nil {
		return nil, failf(exitUsage, "%v", err)
	}
	held, err := acquireLease(ctx, store, o)
	if err != nil {
		shutdownTracing(tr, o.log)
	}
	var active *lease.ActiveError
	if errors.As(err, &active) {
		return nil, &busyError{url: url, holder: active}
	}
	var exit *exitError
	if errors.As(err, &exit) {
		return nil, err
	}
	if err != nil {
		return nil, failf(exitFailed, "taking the writer lease of %s: %v", url, err)
	}
	core, err := tqwengine.New(ctx, store, held, tqwengine.Options{
		Shell: !o.noShell, Concurrency: o.concurrency, Retention: o.retention,
		Events: o.events, Logger: o.log, InboxPoll: o.inboxPoll, TracerProvider: tr.TracerProvider(), Getenv: o.getenv,
		Ended: o.ended, HistoryVisits: o.historyVisits,
	})
	if err != nil {
		e := &engine{lease: held, log: o.log}
		e.releaseLease()
		shutdownTracing(tr, o.log)
		return nil, failf(exitFailed, "opening the store %s: %v", url, err)
	}
	return &engine{url: url, store: store, lease: held, core: core, q: core.Runtime().Queue(), rt: core.Runtime(),
		it: core.Interpreter(), log: o.log, inboxPoll: o.inboxPoll, inboxAnswered: o.inboxAnswered, tracing: tr}, nil
}

// tracingFlushTimeout bounds the flush of the spans as a writer closes:
// an unreachable collector does not hold the process up.
const tracingFlushTimeout = 5 * time.Second

// shutdownTracing flushes the spans of tr (a no-op when tracing is off).
func shutdownTracing(tr *tracing.Provider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("tracing: some spans were not sent", "err", err)
	}
}

// acquireLease takes the store's writer lease. A dead holder on this
// machine is replaced at once; one that stopped renewing is watched for
// its TTL, with a countdown on stderr, then replaced. A brief command
// holding it is waited for (up to briefWait): it serves no inbox, so
// sending it a command would go unanswered.
func acquireLease(ctx context.Context, store objstore.Store, o engineOptions) (*lease.Lease, error) {
	ttl, err := leaseTTL()
	if err != nil {
		return nil, err
	}
	errOut := o.errOut
	if errOut == nil {
		errOut = os.Stderr
	}
	p := &waitPrinter{w: errOut, name: o.name, tty: isTerminal(errOut)}
	opts := lease.Options{Owner: o.leaseOwner(), Logger: o.log, TTL: ttl, OnWait: p.wait, Endpoint: o.endpoint}
	deadline := time.Now().Add(briefWait)
	delay := 20 * time.Millisecond
	for {
		held, err := lease.Acquire(ctx, store, opts)
		p.done()
		if err == nil {
			if from, reason, ok := held.TookOver(); ok {
				fmt.Fprintf(errOut, "tqw-dsl %s: took the store over from %s: %s\n", o.name, from, reason)
			}
			return held, nil
		}
		var active *lease.ActiveError
		if !errors.As(err, &active) || !isBrief(active.Holder.Owner) || time.Now().After(deadline) {
			return nil, err
		}
		if delay == 20*time.Millisecond {
			o.log.Info("waiting for a brief tqw-dsl command to give the store back", "holder", active.Holder.String())
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// leaseTTLEnv sets the writer lease's TTL on stores without a file lock
// (default lease.DefaultTTL); tests shorten it.
const leaseTTLEnv = "TQW_LEASE_TTL"

func leaseTTL() (time.Duration, error) {
	s := os.Getenv(leaseTTLEnv)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 100*time.Millisecond || d > lease.MaxTTL {
		return 0, failf(exitUsage, "%s=%q: want a duration between 100ms and %v, e.g. 15s", leaseTTLEnv, s, lease.MaxTTL)
	}
	return d, nil
}

// countdownEvery is how often the takeover countdown prints a line when
// stderr is not a terminal.
const countdownEvery = 5 * time.Second

// waitPrinter shows who holds the store and the countdown to the takeover
// while acquireLease watches a holder that stopped renewing: once the
// holder, then the countdown, rewritten in place on a terminal and a line
// every countdownEvery otherwise.
type waitPrinter struct {
	w        io.Writer
	name     string
	tty      bool
	shown    bool
	lastLine time.Duration // Remaining at the last countdown line
}

func (p *waitPrinter) wait(w lease.Waiting) {
	left := w.Remaining.Truncate(100 * time.Millisecond)
	if !p.shown {
		fmt.Fprintf(p.w, "tqw-dsl %s: the store is held by %s, which last renewed its lease at %s (its clock) and not since; taking it over if it stays unchanged for %v\n",
			p.name, w.Holder, w.Holder.Renewed.Local().Format(time.TimeOnly), w.TTL)
	}
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\rtqw-dsl %s: taking over in %v unless %s renews\x1b[K", p.name, left, w.Holder.Owner)
	case !p.shown || p.lastLine-w.Remaining >= countdownEvery:
		fmt.Fprintf(p.w, "tqw-dsl %s: taking over in %v unless %s renews\n", p.name, left, w.Holder.Owner)
		p.lastLine = w.Remaining
	}
	p.shown = true
}

// done ends the countdown line on a terminal.
func (p *waitPrinter) done() {
	if p.shown && p.tty {
		fmt.Fprintln(p.w)
	}
	p.shown = false
}

// leaseLostError is the failure of a writer whose work stopped (werr)
// because another process took its lease over, or nil. A writer fenced
// before its renewal noticed asks the lease once more.
func (e *engine) leaseLostError(werr error) error {
	err := e.lease.Err()
	if err == nil && errors.Is(werr, lease.ErrLost) {
		err = werr
	}
	if err == nil && errors.Is(werr, storage.ErrFenced) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if rerr := e.lease.Renew(ctx); errors.Is(rerr, lease.ErrLost) {
			err = rerr
		}
	}
	var lost *lease.LostError
	if !errors.As(err, &lost) {
		return nil
	}
	holder := "another process"
	if lost.Holder.Owner != "" {
		holder = lost.Holder.String()
	}
	return failf(exitFailed, "lease lost to %s; this process stopped working the store", holder)
}

// releaseLease gives the writer lease up, bounded in time: a lease object
// that cannot be released expires by itself.
func (e *engine) releaseLease() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.lease.Release(ctx); err != nil {
		e.log.Warn("releasing the writer lease failed; it expires by itself", "err", err)
	}
}

// Close makes every commit durable, then releases the writer lease, so
// the next writer finds everything durable. It is idempotent.
func (e *engine) Close() error {
	e.closeOnce.Do(func() {
		if err := e.core.Close(context.Background()); err != nil {
			e.closeErr = failf(exitFailed, "closing the store: %v", err)
		}
		shutdownTracing(e.tracing, e.log)
	})
	return e.closeErr
}

// session is a store opened for a command that changes it (submit,
// signal, cancel, run): as its writer when no live writer holds it, else
// as a client of the live writer, whose inbox applies the command.
// Exactly one of e and c is set.
type session struct {
	url   string
	store objstore.Store
	e     *engine
	c     *remote.Client
	// holder is the live writer c sends to.
	holder lease.Info
}

// openSession opens the store at url as its writer or, when a live writer
// holds it, as a client of that writer.
func openSession(ctx context.Context, url string, o engineOptions) (*session, error) {
	store, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	if o.log == nil {
		o.log = logger(os.Stderr)
	}
	e, err := openEngineOn(ctx, url, store, o)
	if err == nil {
		return &session{url: url, store: store, e: e}, nil
	}
	var busy *busyError
	if !errors.As(err, &busy) {
		return nil, err
	}
	c, err := remote.NewClient(store, remote.ClientOptions{Name: "tqw-dsl " + o.name, Logger: o.log, AnswerTimeout: answerTimeout, RingBell: true,
		Queue: storage.Options{Logger: o.log}, Lease: lease.Options{Logger: o.log}})
	if err != nil {
		return nil, failf(exitFailed, "sending commands to %s: %v", url, err)
	}
	return &session{url: url, store: store, c: c, holder: busy.holder.Holder}, nil
}

// Close closes the writer or the client. It is idempotent.
func (s *session) Close() error {
	if s.e != nil {
		return s.e.Close()
	}
	if err := s.c.Close(); err != nil {
		return failf(exitFailed, "closing the client of %s: %v", s.url, err)
	}
	return nil
}

// writerCheckEvery is how often a command waiting for the live writer's
// answer checks that the writer is still live; answerGrace is how long it
// still waits for the answer once the writer is gone: several times the
// client's longest pause between two reads of it (1 s), so a busy machine
// still reads an answer written just before the writer stopped.
const (
	writerCheckEvery = time.Second
	answerGrace      = 5 * time.Second
)

// answerTimeout bounds the wait for the live writer's answer to a
// command. A writer that stops is noticed within writerCheckEvery +
// answerGrace (watchWriter), so this bound only matters for a live writer
// slow to answer: a loaded machine (a 2-core CI host running many test
// processes) can take well over the runtime's default 30 s.
const answerTimeout = 2 * time.Minute

// watchWriter returns a context that is cancelled, with the cause
// errWriterGone, when no live writer holds the store any more, so a
// command sent to a writer that stopped fails at once instead of after
// the answer timeout. Cost: one lease.Live check per writerCheckEvery.
func (s *session) watchWriter(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(writerCheckEvery)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if _, live, err := lease.Live(wctx, s.store, lease.Options{}); err == nil && !live {
				// The writer may have answered just before it stopped:
				// let the client poll for the answer once more.
				grace := time.NewTimer(answerGrace)
				select {
				case <-wctx.Done():
				case <-grace.C:
					cancel(errWriterGone)
				}
				grace.Stop()
				return
			}
		}
	}()
	return wctx, func() {
		cancel(nil)
		<-done
	}
}

// remoteError turns an error of a command sent to the live writer into
// the command's failure: a missing answer says what to do. sctx is the
// context from watchWriter the command was sent under.
func (s *session) remoteError(sctx context.Context, what string, err error) error {
	if errors.Is(err, remote.ErrNoAnswer) && errors.Is(context.Cause(sctx), errWriterGone) {
		return failf(exitFailed, "%s: %s stopped before it answered; the command waits in the store's inbox and is applied when a writer starts ('tqw-dsl worker')", what, s.holder)
	}
	if errors.Is(err, remote.ErrNoAnswer) {
		return failf(exitFailed, "%s: %v", what, err)
	}
	return failf(exitFailed, "%s (sent to %s): %v", what, s.holder, err)
}

// view is a store opened read-only: it writes nothing (every write to
// its store fails) and does not disturb a process working the store.
type view struct {
	url   string
	store objstore.Store
	r     *storage.Reader
	insp  *runtime.Inspector
	defs  *interpreter.View
}

// openView opens the store at url read-only (openReadOnlyStore): a URL at
// which nothing is stored is an error. A store that holds no queue yet
// reads as empty.
func openView(ctx context.Context, url string) (*view, error) {
	store, err := openReadOnlyStore(ctx, url)
	if err != nil {
		return nil, err
	}
	r, err := storage.OpenReader(ctx, store, storage.Options{Logger: logger(os.Stderr)})
	if err != nil {
		return nil, failf(exitFailed, "reading the store %s: %v", url, err)
	}
	defs, err := interpreter.NewView(store, builtin.New(builtin.Options{}))
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	return &view{url: url, store: store, r: r, insp: runtime.NewArchiveInspector(r, store, runtime.SealOptions{}), defs: defs}, nil
}

func (v *view) Close() error { return v.r.Close() }

// records reads the interpreter's records of active and sealed runs.
func (v *view) records() interpreter.Reader { return interpreter.WithSealed(v.r, v.insp) }

// status returns the status of runID, or a not-found error that names the store.
func (v *view) status(ctx context.Context, url, runID string) (runstate.Status, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return runstate.Status{}, failf(exitUsage, "%v", err)
	}
	st, err := v.insp.Status(ctx, runID)
	if errors.Is(err, runtime.ErrRunNotFound) {
		// Records without the runtime's: a copy 'tqw-dsl import' wrote.
		if last, _ := latestStep(ctx, v, runID); last != nil {
			return st, failf(exitFailed, "run %q in %s is an imported copy ('tqw-dsl import'; its last step %q: %s): no worker ran it in this store, so it has no status here; read it with history, diff or fork", runID, url, last.Step, last.Outcome)
		}
		return st, failf(exitFailed, "no run %q in %s (a finished run is kept for the worker's --retention, %v by default; check --store)", runID, url, runtime.DefaultResultRetention)
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

// readInputArg is readJSONArg for a run's --input: an input over
// interpreter.MaxInputSize is a usage error before it is decoded.
func readInputArg(arg string) (any, []byte, error) {
	raw := []byte(arg)
	if strings.HasPrefix(arg, "@") {
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, nil, failf(exitUsage, "--input: %v", err)
		}
		raw = b
	}
	if arg != "" {
		if err := interpreter.CheckInputJSON(raw); err != nil {
			return nil, nil, failf(exitUsage, "--input: %v", err)
		}
	}
	return readJSONArg("--input", string(raw), map[string]any{})
}

// loadWorkflow loads a workflow file and what it calls, printing warnings;
// an invalid file is a usage error (exit 2) with every diagnostic.
func loadWorkflow(cmd *cobra.Command, path string, noShell bool) (*interpreter.Workflow, error) {
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		var le *interpreter.LoadError
		if errors.As(err, &le) && len(le.Diagnostics) > 0 {
			fmt.Fprint(cmd.ErrOrStderr(), le.Diagnostics.String())
			return nil, failf(exitUsage, "%s is not a valid workflow (%s); see 'tqw-dsl validate %s'", le.File, plural(len(le.Diagnostics.Errors()), "error"), le.File)
		}
		return nil, failf(exitUsage, "%v", err)
	}
	if len(w.Diagnostics) > 0 {
		fmt.Fprint(cmd.ErrOrStderr(), w.Diagnostics.String())
	}
	if noShell && w.UsesAction("shell") {
		return nil, failf(exitUsage, "%s uses the shell action, which --no-shell refuses", path)
	}
	if err := w.CheckSecrets(os.Getenv); err != nil {
		return nil, failf(exitUsage, "%s: %v", path, err)
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

// checkLabels refuses (exit 2) a run of w on input whose labels, the
// file's evaluated on it and labels (--label), break the label rules,
// before the store is opened. runID "" stands for a fresh ULID.
func checkLabels(w *interpreter.Workflow, input any, runID string, labels map[string]string) error {
	if runID == "" {
		runID = ulid.Make().String()
	}
	if err := w.CheckLabels(input, runID, labels); err != nil {
		return failf(exitUsage, "%v", err)
	}
	return nil
}

// submitError maps a Submit error to an exit code and message.
func submitError(runID string, err error) error {
	switch {
	case errors.Is(err, runtime.ErrInputMismatch):
		return failf(exitUsage, "run id %q is in use by an active run with a different workflow or input; pick another --run-id", runID)
	case errors.Is(err, runstate.ErrInvalidRunID), errors.Is(err, dsl.ErrInputInvalid), errors.Is(err, interpreter.ErrRunIDReused),
		errors.Is(err, dsl.ErrInvalid), errors.Is(err, runstate.ErrInvalidLabel):
		return failf(exitUsage, "%v", err)
	}
	return failf(exitFailed, "submitting the run: %v", err)
}

// plural returns "1 error", "2 errors": n and the noun, pluralized with an s.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// addHistoryVisitsFlag adds --history-visits to a command that works the
// store (run, worker, serve).
func addHistoryVisitsFlag(cmd *cobra.Command, v *int) {
	cmd.Flags().IntVar(v, "history-visits", interpreter.DefaultHistoryVisits,
		"how many visits of each step a run's history keeps, the latest (older ones are deleted as the run goes on and counted; -1 keeps every visit)")
}

// checkHistoryVisits checks --history-visits: at least 1, or -1.
func checkHistoryVisits(v int) error {
	if v < 1 && v != -1 {
		return failf(exitUsage, "--history-visits %d: want at least 1, or -1 to keep every visit", v)
	}
	return nil
}
