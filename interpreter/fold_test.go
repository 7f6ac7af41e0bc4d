package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/storage"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// funcAction is a custom action running fn.
type funcAction struct {
	name string
	fn   func(ctx context.Context, c *actions.Call) (any, error)
}

func (a funcAction) Name() string                                              { return a.name }
func (funcAction) WithSchema() json.RawMessage                                 { return json.RawMessage(`{"type": "object"}`) }
func (a funcAction) Execute(ctx context.Context, c *actions.Call) (any, error) { return a.fn(ctx, c) }

// place is where a history record sits: its runtime step and its place
// in it.
type place struct {
	step string
	n    int
	seq  int
}

func places(h []HistoryRecord) []place {
	out := make([]place, len(h))
	for i, r := range h {
		out[i] = place{r.Step, r.N, r.Seq}
	}
	return out
}

func wantPlaces(t *testing.T, what string, h []HistoryRecord, want []place) {
	t.Helper()
	if got := places(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: history at %v; want %v", what, got, want)
	}
}

// endEvents drains the env's events and returns the steps of the end
// events, in order.
func (e *tenv) endEvents() []string {
	var out []string
	for {
		select {
		case ev := <-e.events:
			if ev.Kind == "end" {
				out = append(out, ev.Step+":"+ev.Status)
			}
		default:
			return out
		}
	}
}

const foldedYAML = `
tqw: v1
name: folded
vars: {i: 0, which: act}
steps:
  - id: first
    set: {i: 1}
  - id: act
    action: probe
  - id: use
    set: {got: "${ output.v }", i: "${ vars.i + 1 }"}
  - id: route
    switch:
      - when: steps[vars.which].output.v == 7 && vars.got == 7
        next: done
    next: bad
  - id: bad
    fail: "the folded steps did not see the action's output"
  - id: done
    succeed: {got: "${ vars.got }", i: "${ vars.i }", v: "${ steps.act.output.v }"}
`

// The pure steps after an action run in the action's delivery and read
// its output before it is committed (through output, steps.<id> and a
// dynamic steps[...]); their records read back in order, live and from
// the sealed segment, one end event per DSL step.
func TestFoldedChainHistoryLiveAndSealed(t *testing.T) {
	probe := funcAction{name: "probe", fn: func(context.Context, *actions.Call) (any, error) { return map[string]any{"v": 7}, nil }}
	e := newTestEnv(t, withActions(probe), withRetention(time.Hour, time.Hour), withRuntimeOptions(runtime.Options{Sealing: &runtime.SealOptions{Delay: -1}}))
	o := e.run(e.write("folded.yaml", foldedYAML), map[string]any{}, "f1")
	wantSucceeded(t, o, `{"got":7,"i":2,"v":7}`)
	want := []place{{"first", 0, 0}, {"act", 1, 0}, {"use", 1, 1}, {"route", 1, 2}, {"done", 1, 3}}
	wantPlaces(t, "live", e.history("f1"), want)
	if got, want := strings.Join(e.endEvents(), " "), "first:ok act:ok use:ok route:ok done:succeeded"; got != want {
		t.Errorf("end events %q; want %q", got, want)
	}
	st, err := e.rt.Inspector().Status(e.ctx, "f1")
	if err != nil || st.Totals == nil || st.Totals.Counters[TotalSteps] != 5 || st.Totals.Counters[TotalAttempts] != 5 {
		t.Fatalf("totals %+v, %v; want 5 steps, 5 attempts", st.Totals, err)
	}
	if _, err := e.rt.Seal(e.ctx); err != nil {
		t.Fatal(err)
	}
	if left := e.kvKeys(histPrefix("f1")); len(left) != 0 {
		t.Fatalf("history keys %v still in the kv after sealing", left)
	}
	sealed, err := History(e.ctx, WithSealed(e.q, e.rt.Inspector()), e.store, "f1")
	if err != nil {
		t.Fatal(err)
	}
	wantPlaces(t, "sealed", sealed, want)
}

// An action after pure steps starts only once their settlement is
// durable: it reads their records from the store through a Reader, which
// sees only what reached it.
func TestActionAfterFoldedStepsStartsOnDurableState(t *testing.T) {
	var e *tenv
	var seen []string
	check := funcAction{name: "check", fn: func(ctx context.Context, c *actions.Call) (any, error) {
		r, err := storage.OpenReader(ctx, e.store, storage.Options{Logger: quiet()})
		if err != nil {
			return nil, err
		}
		defer r.Close()
		h, err := History(ctx, r, e.store, c.RunID)
		if err != nil {
			return nil, err
		}
		seen = append(seen, outcomes(h))
		return nil, nil
	}}
	e = newTestEnv(t, withActions(check))
	const src = `
tqw: v1
name: boundary
vars: {n: 0}
steps:
  - id: a
    set: {n: 1}
  - id: b
    switch:
      - when: vars.n == 1
        next: c1
  - id: c1
    action: check
  - id: d
    set: {n: 2}
  - id: c2
    action: check
  - id: done
    succeed: "${ vars.n }"
`
	wantSucceeded(t, e.run(e.write("boundary.yaml", src), map[string]any{}, "b1"), "2")
	want := []string{"a:ok b:ok", "a:ok b:ok c1:ok d:ok"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the check steps saw durable histories %q; want %q", seen, want)
	}
}

// A pure loop longer than the bound settles every maxFoldedSteps+1 steps
// and finishes; its records stay in order across the settlements (every
// visit kept: TestLongLoop* test the window).
func TestFoldBoundSplitsAPureLoop(t *testing.T) {
	e := newTestEnv(t, withHistoryVisits(-1))
	const src = `
tqw: v1
name: long
vars: {i: 0}
steps:
  - id: work
    set: {i: "${ vars.i + 1 }"}
  - id: check
    switch:
      - when: vars.i < 150
        next: work
    next: done
  - id: done
    succeed: "${ vars.i }"
`
	wantSucceeded(t, e.run(e.write("long.yaml", src), map[string]any{}, "l1"), "150")
	h := e.history("l1")
	const steps = 150*2 + 1
	if len(h) != steps {
		t.Fatalf("%d records; want %d", len(h), steps)
	}
	for i, r := range h {
		n, seq := i/(maxFoldedSteps+1), i%(maxFoldedSteps+1)
		step := "work"
		switch {
		case i == steps-1:
			step = "done"
		case i%2 == 1:
			step = "check"
		}
		if r.N != n || r.Seq != seq || r.Step != step {
			t.Fatalf("record %d: %s at %d.%d; want %s at %d.%d", i, r.Step, r.N, r.Seq, step, n, seq)
		}
	}
	if ends := e.endEvents(); len(ends) != steps {
		t.Fatalf("%d end events; want %d", len(ends), steps)
	}
}

// A folded step whose read fails (the GET of the large output it reads)
// ends the chain before it: what ran before settles (the action is not
// run again for a read after it), and the failed step runs again in a
// delivery of its own, so each step has exactly one record and one end
// event.
func TestFoldedChainRetriedAfterAFault(t *testing.T) {
	var fs *faults.Store
	var calls atomic.Int32
	big := funcAction{name: "big", fn: func(context.Context, *actions.Call) (any, error) {
		calls.Add(1)
		return strings.Repeat("x", InlineOutputLimit+1), nil
	}}
	e := newTestEnv(t, withActions(big), withInterpreterStore(func(s objstore.Store) objstore.Store {
		fs = faults.New(s, 1)
		fs.Set(faults.Rule{Ops: faults.OpGet, KeyPrefix: outputsPrefix, Nth: 1})
		return fs
	}))
	const src = `
tqw: v1
name: fault
steps:
  - id: make
    action: big
  - id: size
    set: {n: "${ len(output) }"}
  - id: done
    succeed: "${ vars.n }"
`
	ch := e.submit(e.write("fault.yaml", src), map[string]any{}, "x1")
	e.start()
	if err := fs.WaitInjected(e.ctx, 1); err != nil {
		t.Fatal(err)
	}
	var o *runstate.Outcome
	for o == nil {
		select {
		case o = <-ch:
		case <-time.After(5 * time.Millisecond):
			e.clock.Advance(time.Minute) // the retry's backoff
		}
	}
	wantSucceeded(t, o, fmt.Sprint(InlineOutputLimit+1))
	if n := calls.Load(); n != 1 {
		t.Errorf("the action ran %d times; want once (the chain before the failed read settles)", n)
	}
	wantPlaces(t, "history", e.history("x1"), []place{{"make", 0, 0}, {"size", 1, 0}, {"done", 1, 1}})
	if got, want := strings.Join(e.endEvents(), " "), "make:ok size:ok done:succeeded"; got != want {
		t.Errorf("end events %q; want %q", got, want)
	}
}

// A writer dies while the settlement of a folded chain is not durable
// (its WAL PUT hangs; a new writer fences it): it reported no step, and
// the new writer runs the chain again to one record per step.
func TestFoldedChainRerunAfterACrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fs := faults.New(mem.New(), 1)
	clk := clock.NewMock(t0)
	type proc struct {
		q      *queue.Queue
		it     *Interpreter
		w      *runtime.Worker
		mu     sync.Mutex
		events []Event
	}
	// requestTimeout bounds the dead writer's hung PUT, so closing it
	// does not wait the default 20 s; the new writer fences it long before.
	open := func(requestTimeout time.Duration) *proc {
		p := &proc{}
		q, err := queue.Open(ctx, fs, queue.Options{Clock: clk, Logger: quiet(), SweepInterval: -1, KV: kv.Options{RequestTimeout: requestTimeout},
			DefaultConfig: queue.QueueConfig{LeaseDuration: time.Minute, MaxAttempts: 3}})
		if err != nil {
			t.Fatal(err)
		}
		it, err := New(q, fs, Options{Actions: builtin.New(builtin.Options{}), Logger: quiet(),
			Events: func(ev Event) {
				p.mu.Lock()
				p.events = append(p.events, ev)
				p.mu.Unlock()
			}, Runtime: runtime.Options{Logger: quiet(), ShutdownTimeout: -1}})
		if err != nil {
			t.Fatal(err)
		}
		p.q, p.it = q, it
		return p
	}
	const src = `
tqw: v1
name: crash
vars: {i: 0}
steps:
  - id: a
    set: {i: 1}
  - id: b
    set: {i: "${ vars.i + 1 }"}
  - id: c
    switch:
      - when: vars.i == 2
        next: done
    next: a
  - id: done
    succeed: "${ vars.i }"
`
	path := t.TempDir() + "/crash.yaml"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := open(2 * time.Second)
	if _, err := a.it.Submit(ctx, w, map[string]any{}, "c1"); err != nil {
		t.Fatal(err)
	}
	// The next WAL PUT, the one carrying the chain's settlement, hangs.
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: a.q.Prefix() + "/wal/", Nth: 1, Hang: true})
	actx, acancel := context.WithCancel(ctx)
	a.w = a.it.Runtime().Spawn(actx)
	if err := fs.WaitInjected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b := open(0) // fences a: what a has not made durable is lost
	acancel()
	// The dead writer's in-flight settlement never returns: do not wait.
	sctx, scancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_ = a.w.Shutdown(sctx)
	scancel()
	_ = a.q.Close()
	defer b.q.Close()
	a.mu.Lock()
	for _, ev := range a.events {
		if ev.Kind == "end" {
			t.Errorf("the dead writer reported %s %s before its settlement was durable", ev.Step, ev.Status)
		}
	}
	a.mu.Unlock()
	done, unwatch := b.it.Watch("c1")
	defer unwatch()
	b.w = b.it.Runtime().Spawn(ctx)
	defer func() { _ = b.w.Shutdown(context.Background()) }()
	var o *runstate.Outcome
	for o == nil {
		select {
		case o = <-done:
		case <-time.After(5 * time.Millisecond):
			// The dead writer's claim expires. Once the new writer has
			// claimed the step the clock stays, or its own lease (a
			// minute) would expire under it.
			if !claimedAgain(ctx, b.it.Runtime(), b.q, "c1") {
				clk.Advance(time.Minute)
			}
		case <-ctx.Done():
			t.Fatal("the run did not end on the new writer")
		}
	}
	wantSucceeded(t, o, "2")
	h, err := History(ctx, b.q, fs, "c1")
	if err != nil {
		t.Fatal(err)
	}
	wantPlaces(t, "history", h, []place{{"a", 0, 0}, {"b", 0, 1}, {"c", 0, 2}, {"done", 0, 3}})
	b.mu.Lock()
	var ends []string
	for _, ev := range b.events {
		if ev.Kind == "end" {
			ends = append(ends, ev.Step)
		}
	}
	b.mu.Unlock()
	if got := strings.Join(ends, " "); got != "a b c done" {
		t.Errorf("end events of the new writer %q; want a b c done", got)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// A folded step whose expression fails fails the run as an unfolded one
// does: its failed record follows the chain's, in the same settlement.
func TestFoldedStepExpressionFailsTheRun(t *testing.T) {
	e := newTestEnv(t)
	const src = `
tqw: v1
name: broken
vars: {i: 0}
steps:
  - id: a
    set: {i: 1}
  - id: b
    set: {j: "${ vars.i.nope.deeper }"}
  - id: done
    succeed: "${ vars.j }"
`
	o := e.run(e.write("broken.yaml", src), map[string]any{}, "e1")
	wantFailedWith(t, o, "step b: expression")
	h := e.history("e1")
	wantPlaces(t, "history", h, []place{{"a", 0, 0}, {"b", 0, 1}})
	if h[1].Outcome != OutcomeFailed || h[1].Error == nil || h[1].Error.Type != TypeExpression {
		t.Fatalf("record of b: %+v; want failed with an expression error", h[1])
	}
	if got := strings.Join(e.endEvents(), " "); got != "a:ok b:failed" {
		t.Errorf("end events %q; want a:ok b:failed", got)
	}
}

// The chain's stop rules: it folds the next step only while that step is
// pure, the delivery's context is live and the bound is not reached.
func TestFoldStopsOnCancelAndBoundAndEffects(t *testing.T) {
	e := newTestEnv(t)
	w := e.load(e.write("rules.yaml", `
tqw: v1
name: rules
steps:
  - id: a
    set: {x: 1}
  - id: b
    action: sleep
    with: {duration: 1s}
  - id: c
    succeed: "${ vars.x }"
`))
	wf := w.Main
	x := func(next int) *exec { return &exec{wf: wf, next: &state{Step: next}} }
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		steps int
		next  int
		want  bool
	}{
		{"pure next", live, 1, 2, true},
		{"effectful next", live, 1, 1, false},
		{"cancelled delivery", cancelled, 1, 2, false},
		{"last foldable", live, maxFoldedSteps, 2, true},
		{"bound reached", live, maxFoldedSteps + 1, 2, false},
	} {
		c := &chain{steps: tc.steps}
		if got := c.folds(tc.ctx, x(tc.next)); got != tc.want {
			t.Errorf("%s: folds = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// eventOrder drains the env's events and returns them as "start:step"
// and "end:step", in the order they were sent.
func (e *tenv) eventOrder() []string {
	var out []string
	for {
		select {
		case ev := <-e.events:
			out = append(out, ev.Kind+":"+ev.Step)
		default:
			return out
		}
	}
}

// A folded chain's events go out in order: each step's end before the
// next step's start, though the chain's steps all commit in one
// settlement (the start of a folded step was sent as it ran, ahead of
// the end of the step before it, which waits for durability).
func TestFoldedChainEventsInOrder(t *testing.T) {
	probe := funcAction{name: "probe", fn: func(context.Context, *actions.Call) (any, error) { return map[string]any{"v": 7}, nil }}
	e := newTestEnv(t, withActions(probe))
	o := e.run(e.write("folded.yaml", foldedYAML), map[string]any{}, "order1")
	wantSucceeded(t, o, `{"got":7,"i":2,"v":7}`)
	got := strings.Join(e.eventOrder(), " ")
	want := "start:first end:first start:act end:act start:use end:use start:route end:route start:done end:done"
	if got != want {
		t.Fatalf("events %s; want %s", got, want)
	}
}

// claimedAgain reports whether the live step of runID has been claimed
// more than once (a dead writer's claim, then a new writer's).
func claimedAgain(ctx context.Context, rt *runtime.Runtime, q *queue.Queue, runID string) bool {
	st, err := rt.Status(ctx, runID)
	if err != nil || st.JobID == "" {
		return false
	}
	j, err := q.GetJob(ctx, st.JobID)
	return err == nil && j.Attempts > 1
}
