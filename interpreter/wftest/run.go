package wftest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/runtime/storage"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// Options configure Run.
type Options struct {
	// DSL are the load options of the workflow (declared actions).
	DSL dsl.Options
	// Real, when set, runs the actions a case does not mock (tqw-dsl
	// test --allow-real); nil fails the case instead.
	Real *actions.Registry
	// Match, when set, runs only the cases whose name it matches.
	Match *regexp.Regexp
	// CaseTimeout bounds one case in real time (default DefaultCaseTimeout).
	CaseTimeout time.Duration
}

// DefaultCaseTimeout bounds one case in real time: a case is steps that
// take no virtual time, so only a step that hangs (a real action) or a
// harness bug takes this long.
const DefaultCaseTimeout = time.Minute

// Horizon bounds a case in virtual time: a run still active this long
// after its start waits for something the case never gives.
const Horizon = 100 * 365 * 24 * time.Hour

// FileResult is what running one test file gave.
type FileResult struct {
	File  *testfile.File
	Cases []*CaseResult
	// Coverage is what the cases run reached of the workflow.
	Coverage *Coverage
}

// Failed counts the failed cases.
func (r *FileResult) Failed() int {
	n := 0
	for _, c := range r.Cases {
		if len(c.Failures) > 0 {
			n++
		}
	}
	return n
}

// CaseResult is one case's run and what it found.
type CaseResult struct {
	Name    string
	Pos     dsl.Pos
	Elapsed time.Duration // real time
	Virtual time.Duration // virtual time from the start to the run's end
	// Status, Result and Error are how the run ended; Path the steps it
	// visited.
	Status   string
	Result   json.RawMessage
	Error    string
	Path     []string
	Failures []Failure
}

// Failure is one expectation the run did not meet, or a problem that
// kept the case from running as written.
type Failure struct {
	// Pos is where the test file states what failed.
	Pos dsl.Pos
	// Expect names the expectation (status, result, path, ...) or the part
	// of the case (mock, signal, run).
	Expect string
	// Step is the step the failure concerns, "" when none.
	Step string
	// Message says what went wrong; Want and Got are the two sides, as
	// indented JSON, when there are two.
	Message   string
	Want, Got string
}

// Run runs the cases of f (those Options.Match selects) against w, one
// after the other, each on a store of its own.
func Run(ctx context.Context, f *testfile.File, w *interpreter.Workflow, opts Options) *FileResult {
	res := &FileResult{File: f, Coverage: newCoverage(w.Main)}
	for _, c := range f.Cases {
		if opts.Match != nil && !opts.Match.MatchString(c.Name) {
			continue
		}
		res.Cases = append(res.Cases, runCase(ctx, c, w, opts, res.Coverage))
	}
	return res
}

// caseRun is one case in flight.
type caseRun struct {
	c     *testfile.Case
	w     *interpreter.Workflow
	opts  Options
	clk   *clock.Mock
	q     *storage.Queue
	snap  *storage.Reader // the store as of the last Sync, for work
	it    *interpreter.Interpreter
	rt    *runtime.Runtime
	queue []string // the runtime's queues

	mu       sync.Mutex
	failures []Failure
	vars     map[string]any // the case's run's, after its last step
	sent     []bool         // by signal index
}

func runCase(ctx context.Context, c *testfile.Case, w *interpreter.Workflow, opts Options, cov *Coverage) *CaseResult {
	began := time.Now()
	res := &CaseResult{Name: c.Name, Pos: c.Pos}
	timeout := opts.CaseTimeout
	if timeout <= 0 {
		timeout = DefaultCaseTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := &caseRun{c: c, w: w, opts: opts, clk: clock.NewMock(c.Start), sent: make([]bool, len(c.Signals))}
	err := r.run(ctx, res, cov)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the case did not end within %s of real time (a step that hangs?)", timeout)
		}
		r.fail(Failure{Pos: c.Pos, Expect: "run", Message: err.Error()})
	}
	res.Failures = r.failures
	res.Elapsed = time.Since(began)
	return res
}

func (r *caseRun) fail(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, f)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (r *caseRun) run(ctx context.Context, res *CaseResult, cov *Coverage) error {
	store := mem.New()
	q, err := storage.Open(ctx, store, storage.Options{Clock: r.clk, Logger: quiet(), SweepInterval: -1,
		DefaultConfig: storage.QueueConfig{MaxAttempts: 3}})
	if err != nil {
		return fmt.Errorf("open the in-memory store: %w", err)
	}
	r.q = q
	defer func() { _ = q.Close() }()
	if r.snap, err = storage.OpenReader(ctx, store, storage.Options{Clock: r.clk, Logger: quiet()}); err != nil {
		return fmt.Errorf("open a reader of the in-memory store: %w", err)
	}
	defer func() { _ = r.snap.Close() }()
	acts, err := r.registry()
	if err != nil {
		return err
	}
	it, err := interpreter.New(q, store, interpreter.Options{Actions: acts, Getenv: r.getenv, Clock: r.clk,
		Rand: rand.New(rand.NewPCG(1, 2)), Logger: quiet(), Events: r.event, DSL: r.opts.DSL,
		Runtime: runtime.Options{Logger: quiet(), ShutdownTimeout: -1, ResultRetention: Horizon}})
	if err != nil {
		return err
	}
	r.it, r.rt = it, it.Runtime()
	r.queue = []string{r.rt.QueueName(), r.rt.NotifyQueueName()}
	if _, err := it.Submit(ctx, r.w, r.c.Input, r.c.RunID); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	worker := r.rt.Spawn(ctx)
	st, err := r.drive(ctx)
	if serr := worker.Shutdown(context.WithoutCancel(ctx)); serr != nil && err == nil && !errors.Is(serr, context.Canceled) {
		err = fmt.Errorf("stop the worker: %w", serr)
	}
	if err != nil {
		return err
	}
	hist, err := interpreter.History(ctx, q, store, r.c.RunID)
	if err != nil {
		return fmt.Errorf("read the run's history: %w", err)
	}
	if err := r.cover(ctx, store, cov); err != nil {
		return err
	}
	for i, s := range r.c.Signals {
		if !r.sent[i] {
			what := "no run waited on key " + s.Key
			if s.Step != "" {
				what = "no run waited in step " + s.Step
			}
			if s.HasAt {
				what = "the run ended before " + s.At.String()
			}
			r.fail(Failure{Pos: s.Pos, Expect: "signal", Step: s.Step, Message: "the signal was never sent: " + what})
		}
	}
	r.check(st, hist, res)
	return nil
}

func (r *caseRun) getenv(name string) string {
	if v, ok := r.c.Secrets[name]; ok {
		return v
	}
	if r.opts.Real != nil {
		return os.Getenv(name)
	}
	return ""
}

// event keeps the variables after each step of the case's run.
func (r *caseRun) event(e interpreter.Event) {
	if e.Kind != "end" || e.RunID != r.c.RunID {
		return
	}
	r.mu.Lock()
	r.vars = e.Vars
	r.mu.Unlock()
}

// drive works the store until the case's run has ended and nothing is in
// flight, moving the virtual clock and sending the case's signals
// whenever the store is idle. It returns the run's final status.
func (r *caseRun) drive(ctx context.Context) (runstate.Status, error) {
	for {
		busy, next, err := r.work(ctx)
		if err != nil {
			return runstate.Status{}, err
		}
		if busy != "" {
			if _, err := r.q.WaitForCompletion(ctx, busy); err != nil && !errors.Is(err, storage.ErrNotFound) {
				return runstate.Status{}, err
			}
			continue
		}
		// Idle: nothing runs, nothing is due.
		st, err := r.rt.Status(ctx, r.c.RunID)
		if err != nil {
			return st, err
		}
		if st.State.Terminal() {
			return st, nil
		}
		sent, err := r.signalWaiting(ctx)
		if err != nil {
			return st, err
		}
		if sent {
			continue
		}
		at, ok := r.nextSignalTime()
		if next.IsZero() && !ok {
			return st, r.stuck(ctx, st)
		}
		if next.IsZero() || ok && at.Before(next) {
			next = at
		}
		if next.Sub(r.c.Start) > Horizon {
			return st, fmt.Errorf("the run is still %s after %s of virtual time; next wake-up at %s", st.State, Horizon, next.Format(time.RFC3339))
		}
		if next.After(r.clk.Now()) {
			r.clk.Set(next)
		}
		if err := r.signalTimed(ctx); err != nil {
			return st, err
		}
	}
}

// work returns a job of the runtime's queues that is pending, claimed or
// due ("" when none), and the earliest run-at of the scheduled jobs after
// now (zero when none). It reads one consistent snapshot of the store:
// every commit made so far, made durable (Sync) and read by a Reader.
// Reading the writer's indexes one after another could miss a job that
// moves from one to the next in between (claimed just after the pending
// index was read); a snapshot cannot. A snapshot with no such job shows
// the store idle, and it stays idle: only a worker with a claimed or
// pending job commits, and only this loop sends signals and moves the
// clock.
func (r *caseRun) work(ctx context.Context) (busy string, next time.Time, err error) {
	if err := r.q.Sync(ctx); err != nil {
		return "", time.Time{}, err
	}
	if err := r.snap.Refresh(ctx); err != nil {
		return "", time.Time{}, err
	}
	now := r.clk.Now()
	for _, name := range r.queue {
		for _, state := range []storage.JobState{storage.StateClaimed, storage.StatePending} {
			jobs, err := r.snap.ListJobs(ctx, name, state, "", 1)
			if err != nil {
				return "", time.Time{}, err
			}
			if len(jobs) > 0 {
				return jobs[0].ID, time.Time{}, nil
			}
		}
		jobs, err := r.snap.ListJobs(ctx, name, storage.StateScheduled, "", 1)
		if err != nil {
			return "", time.Time{}, err
		}
		if len(jobs) == 0 {
			continue
		}
		if !jobs[0].RunAt.After(now) {
			return jobs[0].ID, time.Time{}, nil
		}
		if next.IsZero() || jobs[0].RunAt.Before(next) {
			next = jobs[0].RunAt
		}
	}
	return "", next, nil
}

// waiting lists the runs waiting for a signal, with the step each waits in.
func (r *caseRun) waiting(ctx context.Context) ([]waiter, error) {
	var out []waiter
	opts := runstate.ListOptions{States: []runstate.State{runstate.StateWaiting}, Limit: 1000}
	for {
		page, err := r.rt.ListRuns(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, st := range page {
			pos, err := r.it.Position(ctx, r.q, st.JobID)
			if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
				return nil, err
			}
			out = append(out, waiter{run: st.RunID, key: st.SignalKey, step: pos.Step})
		}
		if len(page) < opts.Limit {
			return out, nil
		}
		opts.After = page[len(page)-1].RunID
	}
}

type waiter struct{ run, key, step string }

// signalWaiting sends the first unsent untimed signal (per key, in file
// order) that a waiting run waits for. It reports whether it sent one.
func (r *caseRun) signalWaiting(ctx context.Context) (bool, error) {
	var ws []waiter
	listed := false
	blocked := map[string]bool{} // keys (or steps) with an earlier unsent signal
	for i, s := range r.c.Signals {
		if r.sent[i] || s.HasAt {
			continue
		}
		id := "k:" + s.Key
		if s.Step != "" {
			id = "s:" + s.Step
		}
		if blocked[id] {
			continue
		}
		blocked[id] = true
		if !listed {
			var err error
			if ws, err = r.waiting(ctx); err != nil {
				return false, err
			}
			listed = true
		}
		for _, w := range ws {
			if s.Key != "" && w.key == s.Key || s.Step != "" && w.step == s.Step {
				return true, r.send(ctx, i, w.key)
			}
		}
	}
	return false, nil
}

// nextSignalTime is when the next unsent timed signal is due.
func (r *caseRun) nextSignalTime() (time.Time, bool) {
	var best time.Time
	found := false
	for i, s := range r.c.Signals {
		if r.sent[i] || !s.HasAt {
			continue
		}
		if t := r.c.Start.Add(s.At); !found || t.Before(best) {
			best, found = t, true
		}
	}
	return best, found
}

// signalTimed sends the timed signals that are due, earliest first.
func (r *caseRun) signalTimed(ctx context.Context) error {
	idx := []int{}
	for i, s := range r.c.Signals {
		if !r.sent[i] && s.HasAt && !r.c.Start.Add(s.At).After(r.clk.Now()) {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return r.c.Signals[idx[a]].At < r.c.Signals[idx[b]].At })
	for _, i := range idx {
		s := r.c.Signals[i]
		key := s.Key
		if s.Step != "" {
			ws, err := r.waiting(ctx)
			if err != nil {
				return err
			}
			key = ""
			for _, w := range ws {
				if w.step == s.Step {
					key = w.key
					break
				}
			}
			if key == "" {
				r.sent[i] = true
				r.fail(Failure{Pos: s.Pos, Expect: "signal", Step: s.Step,
					Message: fmt.Sprintf("at %s no run waits in step %s, so the signal has no key to go to", s.At, s.Step)})
				continue
			}
		}
		if err := r.send(ctx, i, key); err != nil {
			return err
		}
	}
	return nil
}

func (r *caseRun) send(ctx context.Context, i int, key string) error {
	s := r.c.Signals[i]
	r.sent[i] = true
	b, err := json.Marshal(s.Payload)
	if err != nil {
		return fmt.Errorf("signal %s: %w", key, err)
	}
	if _, err := r.rt.Signal(ctx, key, b); err != nil {
		if errors.Is(err, signal.ErrRejected) {
			r.fail(Failure{Pos: s.Pos, Expect: "signal", Step: s.Step, Message: fmt.Sprintf("the signal to %s was refused: %v", key, err)})
			return nil
		}
		return fmt.Errorf("signal %s: %w", key, err)
	}
	return nil
}

// stuck explains a run that waits for nothing the case will give.
func (r *caseRun) stuck(ctx context.Context, st runstate.Status) error {
	ws, err := r.waiting(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if w.run == r.c.RunID {
			return fmt.Errorf("the run waits in step %s on key %q and the case sends no signal to it", w.step, w.key)
		}
	}
	return fmt.Errorf("the run is %s and nothing is scheduled to move it", st.State)
}

// registry is the case's actions: one mock per action name the workflow
// may call, answering from the case's mocks and else from Options.Real.
func (r *caseRun) registry() (*actions.Registry, error) {
	names := []string{"http", "llm", "shell"}
	for n := range r.opts.DSL.ExtraActions {
		names = append(names, n)
	}
	if r.opts.Real != nil {
		names = append(names, r.opts.Real.Names()...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var list []actions.Action
	for _, n := range names {
		m := &mockAction{name: n, r: r}
		if r.opts.Real != nil {
			m.real, _ = r.opts.Real.Lookup(n)
		}
		list = append(list, m)
	}
	return actions.NewRegistry(list...)
}

// mockAction answers one action's attempts from the case's mocks.
type mockAction struct {
	name string
	r    *caseRun
	real actions.Action
}

func (m *mockAction) Name() string { return m.name }

func (m *mockAction) Execute(ctx context.Context, call *actions.Call) (any, error) {
	// A foreach's items call as "<step>[<index>]": the step's mock answers
	// each of them.
	step := call.StepID
	if i := strings.IndexByte(step, '['); i > 0 && strings.HasSuffix(step, "]") {
		step = step[:i]
	}
	var found *testfile.Mock
	for _, mk := range m.r.c.Mocks {
		if mk.Step == step {
			found = mk
			break
		}
	}
	if found == nil {
		for _, mk := range m.r.c.Mocks {
			if mk.Action == m.name {
				found = mk
				break
			}
		}
	}
	if found == nil {
		if m.real != nil {
			return m.real.Execute(ctx, call)
		}
		msg := fmt.Sprintf("action %s has no mock: add a mock with step: %s or action: %s, or run with --allow-real", m.name, step, m.name)
		if m.r.opts.Real != nil {
			msg = fmt.Sprintf("action %s has no mock and tqw-dsl cannot run it: add a mock with step: %s or action: %s", m.name, step, m.name)
		}
		m.r.fail(Failure{Pos: m.r.c.Pos, Expect: "mock", Step: step, Message: msg})
		return nil, actions.NewError(actions.TypeValidation, false, "no mock for step %s (action %s)", step, m.name)
	}
	rep := found.Replies[min(max(call.Attempt, 1), len(found.Replies))-1]
	if e := rep.Error; e != nil {
		retryable := dsl.RetryableByDefault(e.Type, e.Status)
		if e.Retryable != nil {
			retryable = *e.Retryable
		}
		return nil, &actions.Error{Type: e.Type, Message: e.Message, Status: e.Status, Retryable: retryable}
	}
	return clone(rep.Output), nil
}

// clone deep-copies a mock's output, so no run changes the case's value.
func clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = clone(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = clone(e)
		}
		return l
	}
	return v
}

// check compares the run with the case's expectations.
// inHandler reports whether step id is in wf's on_error or finally.
func inHandler(wf *dsl.Workflow, id string) bool {
	s := wf.Step(id)
	return s != nil && s.Block != nil && (s.Block == wf.OnError || s.Block == wf.Finally)
}

func (r *caseRun) check(st runstate.Status, hist []interpreter.HistoryRecord, res *CaseResult) {
	ex := r.c.Expect
	res.Status = stateName(st.State)
	res.Result = json.RawMessage(st.Result)
	res.Error = st.Error
	res.Path = visits(hist)
	if !st.FinishedAt.IsZero() {
		res.Virtual = st.FinishedAt.Sub(r.c.Start)
	}
	r.mu.Lock()
	missing := len(r.failures) > 0
	vars := maps.Clone(r.vars)
	r.mu.Unlock()
	if missing {
		return // a missing mock or a refused signal explains the rest
	}
	last := ""
	var lastErr *dsl.ErrorInfo
	if len(hist) > 0 {
		last = hist[len(hist)-1].Step
		for i := len(hist) - 1; i >= 0; i-- {
			// A handler's failure does not replace the run's error.
			if hist[i].Outcome == interpreter.OutcomeFailed && !inHandler(r.w.Main, hist[i].Step) {
				lastErr, last = hist[i].Error, hist[i].Step
				break
			}
		}
	}
	if ex.Status != "" && ex.Status != res.Status {
		msg := fmt.Sprintf("the run %s, want %s", res.Status, ex.Status)
		if st.Error != "" {
			msg += ": " + st.Error
		}
		r.fail(Failure{Pos: ex.Pos["status"], Expect: "status", Step: last, Message: msg, Want: ex.Status, Got: res.Status})
	}
	var result any
	if len(st.Result) > 0 {
		_ = json.Unmarshal(st.Result, &result)
	}
	if ex.HasResult {
		if want, got := canonical(ex.Result), canonical(result); want != got || len(st.Result) == 0 {
			r.fail(Failure{Pos: ex.Pos["result"], Expect: "result", Step: last, Message: "the result differs", Want: want, Got: gotOr(st, got)})
		}
	}
	if ex.ResultSchema != nil {
		if len(st.Result) == 0 {
			r.fail(Failure{Pos: ex.Pos["result_schema"], Expect: "result_schema", Step: last, Message: "the run has no result to match"})
		} else if inst, err := jsonValue(result); err != nil || ex.ResultSchema.Validate(inst) != nil {
			if err == nil {
				err = ex.ResultSchema.Validate(inst)
			}
			r.fail(Failure{Pos: ex.Pos["result_schema"], Expect: "result_schema", Step: last,
				Message: "the result does not match result_schema: " + oneLine(err), Got: canonical(result)})
		}
	}
	if ex.HasPath && !slices.Equal(ex.Path, res.Path) {
		i := 0
		for i < len(ex.Path) && i < len(res.Path) && ex.Path[i] == res.Path[i] {
			i++
		}
		step, msg := "", ""
		switch {
		case i < len(ex.Path) && i < len(res.Path):
			step, msg = res.Path[i], fmt.Sprintf("step %d is %s, want %s", i+1, res.Path[i], ex.Path[i])
		case i < len(res.Path):
			step, msg = res.Path[i], fmt.Sprintf("the run went on to %s after the expected path", res.Path[i])
		default:
			step, msg = last, fmt.Sprintf("the run stopped after %s; want %s next", lastOf(res.Path), ex.Path[i])
		}
		r.fail(Failure{Pos: ex.Pos["path"], Expect: "path", Step: step, Message: "the path differs: " + msg,
			Want: strings.Join(ex.Path, "\n"), Got: strings.Join(res.Path, "\n")})
	}
	for _, name := range sortedKeys(ex.Vars) {
		v, ok := vars[name]
		want := canonical(ex.Vars[name])
		if !ok {
			r.fail(Failure{Pos: ex.Pos["vars"], Expect: "vars", Message: fmt.Sprintf("variable %s is not set", name), Want: want, Got: "(unset)"})
			continue
		}
		if got := canonical(v); got != want {
			r.fail(Failure{Pos: ex.Pos["vars"], Expect: "vars", Message: fmt.Sprintf("variable %s differs", name), Want: want, Got: got})
		}
	}
	attempts := countAttempts(hist)
	for _, id := range sortedKeys(ex.Attempts) {
		if want, got := ex.Attempts[id], attempts[id]; want != got {
			r.fail(Failure{Pos: ex.Pos["attempts"], Expect: "attempts", Step: id,
				Message: fmt.Sprintf("step %s ran %d attempts, want %d", id, got, want), Want: fmt.Sprint(want), Got: fmt.Sprint(got)})
		}
	}
	if e := ex.Error; e != nil {
		gotType := ""
		if lastErr != nil {
			gotType = lastErr.Type
		}
		if e.Type != "" && e.Type != gotType {
			msg := fmt.Sprintf("the run's error type is %q, want %q", gotType, e.Type)
			if res.Status != "failed" {
				msg = fmt.Sprintf("the run %s (no error), want an error of type %q", res.Status, e.Type)
			}
			r.fail(Failure{Pos: ex.Pos["error"], Expect: "error.type", Step: last, Message: msg, Want: e.Type, Got: gotType})
		}
		if e.Message != "" && !strings.Contains(st.Error, e.Message) {
			r.fail(Failure{Pos: ex.Pos["error"], Expect: "error.message", Step: last,
				Message: fmt.Sprintf("the run's error message does not contain %q", e.Message), Want: e.Message, Got: st.Error})
		}
	}
}

func gotOr(st runstate.Status, got string) string {
	if len(st.Result) == 0 {
		return "(no result: the run " + stateName(st.State) + ")"
	}
	return got
}

func lastOf(l []string) string {
	if len(l) == 0 {
		return "(no step)"
	}
	return l[len(l)-1]
}

func stateName(s runstate.State) string {
	switch s {
	case runstate.StateSucceeded:
		return "succeeded"
	case runstate.StateFailed:
		return "failed"
	case runstate.StateCancelled:
		return "cancelled"
	}
	return s.String()
}

// open outcomes leave a step's visit going on (another attempt, the end
// of a wait).
func open(outcome string) bool {
	return outcome == interpreter.OutcomeRetry || outcome == interpreter.OutcomeWaiting || outcome == interpreter.OutcomeSignalRejected
}

// visits lists the steps a run visited, in order: one entry per visit,
// however many attempts and waits it took.
func visits(hist []interpreter.HistoryRecord) []string {
	out := []string{}
	cont := ""
	for _, h := range hist {
		if h.Step != cont {
			out = append(out, h.Step)
		}
		cont = ""
		if open(h.Outcome) {
			cont = h.Step
		}
	}
	return out
}

// countAttempts counts each step's attempts over the run.
func countAttempts(hist []interpreter.HistoryRecord) map[string]int {
	out := map[string]int{}
	for _, h := range hist {
		if h.Outcome != interpreter.OutcomeWaiting && h.Outcome != interpreter.OutcomeSignalRejected {
			out[h.Step]++
		}
	}
	return out
}

// canonical is v as indented JSON with sorted keys, numbers as JSON has
// them (1 and 1.0 are equal).
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var x any
	_ = json.Unmarshal(b, &x)
	b, _ = json.MarshalIndent(x, "", "  ")
	return string(b)
}

// jsonValue is v as the schema validator reads JSON.
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	return strings.Join(strings.Fields(s), " ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := slices.Collect(maps.Keys(m))
	slices.Sort(out)
	return out
}
