package interpreter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/runstate"

	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// tenv is an interpreter on a runtime on a mem store driven by a MockClock.
type tenv struct {
	t      *testing.T
	ctx    context.Context
	store  objstore.Store
	clock  *clock.Mock
	q      *queue.Queue
	rt     *runtime.Runtime
	it     *Interpreter
	w      *runtime.Worker
	events chan Event
	dir    string
	env    map[string]string
	llmURL string
	lease  time.Duration
	// retention is the interpreter's and the runtime's result retention
	// (0: the defaults); wrapStore wraps the interpreter's store.
	retention, resultRetention time.Duration
	historyVisits              int
	wrapStore                  func(objstore.Store) objstore.Store
	// ropts are the runtime's options; the env fills the hook, logger,
	// shutdown timeout and result retention they leave zero.
	ropts runtime.Options
	// client sends the http and llm actions' requests (nil: Go's default).
	client *http.Client
	// tp traces the interpreter (nil: no tracing).
	tp trace.TracerProvider
	// extra are actions registered beside the built-in ones.
	extra []actions.Action
	// logger is the interpreter's logger (nil: quiet).
	logger *slog.Logger
}

// withLogger gives the interpreter logger l.
func withLogger(l *slog.Logger) envOption { return func(e *tenv) { e.logger = l } }

// withActions registers acts beside the built-in actions.
func withActions(acts ...actions.Action) envOption {
	return func(e *tenv) { e.extra = append(e.extra, acts...) }
}

// withTracerProvider traces the interpreter with tp.
func withTracerProvider(tp trace.TracerProvider) envOption { return func(e *tenv) { e.tp = tp } }

// withHTTPClient makes the http and llm actions send through c.
func withHTTPClient(c *http.Client) envOption { return func(e *tenv) { e.client = c } }

type envOption func(*tenv)

// withLease sets the step queue's lease duration.
func withLease(d time.Duration) envOption { return func(e *tenv) { e.lease = d } }

// withRuntimeOptions sets the runtime's options.
func withRuntimeOptions(o runtime.Options) envOption {
	return func(e *tenv) { e.ropts = o }
}

func withEnv(k, v string) envOption { return func(e *tenv) { e.env[k] = v } }
func withLLM(url string) envOption  { return func(e *tenv) { e.llmURL = url } }

// withRetention sets the interpreter's retention and the runtime's result
// retention.
// withHistoryVisits sets Options.HistoryVisits.
func withHistoryVisits(n int) envOption {
	return func(e *tenv) { e.historyVisits = n }
}

func withRetention(records, results time.Duration) envOption {
	return func(e *tenv) { e.retention, e.resultRetention = records, results }
}

// withInterpreterStore wraps the store the interpreter and its runtime (not
// the queue) use.
func withInterpreterStore(wrap func(objstore.Store) objstore.Store) envOption {
	return func(e *tenv) { e.wrapStore = wrap }
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestEnv(t *testing.T, opts ...envOption) *tenv {
	t.Helper()
	// A backstop only: the test binary's own deadline, less time to
	// report, never a bound on how fast a busy machine runs the test.
	deadline, ok := t.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-30*time.Second))
	t.Cleanup(cancel)
	e := &tenv{t: t, ctx: ctx, store: mem.New(), clock: clock.NewMock(t0), events: make(chan Event, 10000),
		dir: t.TempDir(), env: map[string]string{}}
	for _, o := range opts {
		o(e)
	}
	lease := 1000 * time.Hour
	if e.lease > 0 {
		lease = e.lease
	}
	q, err := queue.Open(ctx, e.store, queue.Options{Clock: e.clock, Logger: quiet(), SweepInterval: -1,
		DefaultConfig: queue.QueueConfig{LeaseDuration: lease, MaxAttempts: 3}})
	if err != nil {
		t.Fatalf("queue.Open: %v", err)
	}
	e.q = q
	acts := builtin.New(builtin.Options{EnableShell: true, HTTPClient: e.client, LLM: llm.Options{BaseURL: e.llmURL, Getenv: e.getenv}})
	for _, a := range e.extra {
		if err := acts.Register(a); err != nil {
			t.Fatal(err)
		}
	}
	istore := e.store
	if e.wrapStore != nil {
		istore = e.wrapStore(e.store)
	}
	ropts := e.ropts
	if ropts.Logger == nil {
		ropts.Logger = quiet()
	}
	if ropts.ShutdownTimeout == 0 {
		ropts.ShutdownTimeout = -1
	}
	if ropts.ResultRetention == 0 && e.resultRetention > 0 {
		ropts.ResultRetention = e.resultRetention
	}
	ilog := e.logger
	if ilog == nil {
		ilog = quiet()
	}
	it, err := New(q, istore, Options{Actions: acts, Getenv: e.getenv, Rand: rand.New(rand.NewPCG(1, 2)), Logger: ilog, Retention: e.retention, TracerProvider: e.tp,
		HistoryVisits: e.historyVisits,
		Events: func(ev Event) {
			select {
			case e.events <- ev:
			default:
				t.Error("event buffer full")
			}
		}, Runtime: ropts})
	if err != nil {
		t.Fatal(err)
	}
	rt := it.Runtime()
	e.rt, e.it = rt, it
	t.Cleanup(e.close)
	return e
}

func (e *tenv) getenv(k string) string { return e.env[k] }

func (e *tenv) start() {
	if e.w == nil {
		e.w = e.rt.Spawn(e.ctx)
	}
}

func (e *tenv) close() {
	if e.w != nil {
		if err := e.w.Shutdown(e.ctx); err != nil {
			e.t.Errorf("worker shutdown: %v", err)
		}
		e.w = nil
	}
	if e.q != nil {
		_ = e.q.Close()
		e.q = nil
	}
}

// write stores a workflow file in the test's folder and returns its path.
func (e *tenv) write(name, src string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(src, "\n")), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *tenv) load(path string) *Workflow {
	e.t.Helper()
	w, err := Load(path, LoadOptions(e.it.acts, dsl.Options{}))
	if err != nil {
		e.t.Fatalf("Load %s: %v", path, err)
	}
	return w
}

// submit submits a run of the file at path and returns a channel that
// receives its outcome.
func (e *tenv) submit(path string, input any, runID string) <-chan *runstate.Outcome {
	e.t.Helper()
	ch, _ := e.it.Watch(runID)
	if _, err := e.it.Submit(e.ctx, e.load(path), input, runID); err != nil {
		e.t.Fatalf("Submit: %v", err)
	}
	return ch
}

// submitUntil submits a run, works it until step ends with status (see
// waitEvent) and returns the channel that receives the run's outcome.
func (e *tenv) submitUntil(path string, input any, runID, step, status string) <-chan *runstate.Outcome {
	e.t.Helper()
	ch := e.submit(path, input, runID)
	e.start()
	e.waitEvent(step, status)
	return ch
}

// run submits and works a run to its end.
func (e *tenv) run(path string, input any, runID string) *runstate.Outcome {
	e.t.Helper()
	ch := e.submit(path, input, runID)
	e.start()
	return e.await(ch)
}

func (e *tenv) await(ch <-chan *runstate.Outcome) *runstate.Outcome {
	e.t.Helper()
	select {
	case o := <-ch:
		return o
	case <-e.ctx.Done():
		e.t.Fatal("timed out waiting for the run to end")
	}
	return nil
}

// waitEvent returns the next end event of step with the given status,
// once the runtime settled it (so the next step is enqueued or scheduled).
func (e *tenv) waitEvent(step, status string) Event {
	e.t.Helper()
	for {
		select {
		case ev := <-e.events:
			if ev.Kind != "end" || ev.Step != step || ev.Status != status {
				continue
			}
			if _, err := e.q.WaitForCompletion(e.ctx, ev.Job); err != nil && !errors.Is(err, queue.ErrNotFound) {
				e.t.Fatalf("waiting for job %s: %v", ev.Job, err)
			}
			return ev
		case <-e.ctx.Done():
			e.t.Fatalf("timed out waiting for step %s to end with %s", step, status)
		}
	}
}

func (e *tenv) history(runID string) []HistoryRecord {
	e.t.Helper()
	h, err := History(e.ctx, e.q, e.store, runID)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// wantHistory returns the history of runID after checking its
// "step:outcome" list (see outcomes).
func (e *tenv) wantHistory(runID, want string) []HistoryRecord {
	e.t.Helper()
	h := e.history(runID)
	if got := outcomes(h); got != want {
		e.t.Fatalf("run %s: history %q; want %q", runID, got, want)
	}
	return h
}

// outcomes lists "step:outcome" for each history record.
func outcomes(h []HistoryRecord) string {
	var out []string
	for _, r := range h {
		out = append(out, r.Step+":"+r.Outcome)
	}
	return strings.Join(out, " ")
}

func wantSucceeded(t *testing.T, o *runstate.Outcome, result string) {
	t.Helper()
	if o.Status != runstate.Succeeded {
		t.Fatalf("run %s: status %s (%s); want succeeded", o.RunID, o.Status, o.Error)
	}
	if string(o.Result) != result {
		t.Fatalf("run %s: result %s; want %s", o.RunID, o.Result, result)
	}
}

// wantFailed checks that the run failed with the error message want.
func wantFailed(t *testing.T, o *runstate.Outcome, want string) {
	t.Helper()
	if o.Status != runstate.Failed || o.Error != want {
		t.Fatalf("run %s: outcome %s %q; want failed with %q", o.RunID, o.Status, o.Error, want)
	}
}

// wantFailedWith checks that the run failed with an error message that
// contains part.
func wantFailedWith(t *testing.T, o *runstate.Outcome, part string) {
	t.Helper()
	if o.Status != runstate.Failed || !strings.Contains(o.Error, part) {
		t.Fatalf("run %s: outcome %s %q; want failed with %q in the error", o.RunID, o.Status, o.Error, part)
	}
}

// allObjects returns every object in the store, by key.
func allObjects(t *testing.T, ctx context.Context, s objstore.Store) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	after := ""
	for {
		page, err := s.List(ctx, "", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			b, _, err := s.Get(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			out[o.Key] = b
		}
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].Key
	}
}
