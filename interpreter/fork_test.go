package interpreter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

const forkLoopYAML = `
tqw: v1
name: fork-loop
vars: {i: 0}
steps:
  - id: work
    action: probe
    with: {i: "${ vars.i }"}
    set: {i: "${ vars.i + 1 }", last: "${ output.v }"}
  - id: check
    switch:
      - when: vars.i < 3
        next: work
    next: big
  - id: big
    action: big
  - id: end
    succeed: {i: "${ vars.i }", last: "${ vars.last }", v: "${ steps.work.output.v }", tag: "${ steps.big.output.tag }"}
`

// forkEnv runs fork-loop: probe answers v = 10*i, big a large output.
func forkEnv(t *testing.T, calls *[]int64) *tenv {
	probe := funcAction{name: "probe", fn: func(_ context.Context, c *actions.Call) (any, error) {
		i, _ := c.Args["i"].(int64)
		*calls = append(*calls, i)
		return map[string]any{"v": 10 * i}, nil
	}}
	big := funcAction{name: "big", fn: func(context.Context, *actions.Call) (any, error) {
		return map[string]any{"tag": "large", "pad": strings.Repeat("x", InlineOutputLimit+1)}, nil
	}}
	return newTestEnv(t, withActions(probe, big), withRetention(time.Hour, time.Hour),
		withRuntimeOptions(runtime.Options{Sealing: &runtime.SealOptions{Delay: -1}}))
}

func (e *tenv) fork(r Reader, origin, at, id string, opts ForkOptions) *runstate.Outcome {
	e.t.Helper()
	recs, err := History(e.ctx, r, e.store, origin)
	if err != nil {
		e.t.Fatal(err)
	}
	fp, err := FindForkPoint(e.ctx, e.store, origin, recs, at)
	if err != nil {
		e.t.Fatalf("fork point of %s at %s: %v", origin, at, err)
	}
	opts.RunID = id
	spec, err := e.it.PrepareFork(e.ctx, origin, fp, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ch, _ := e.it.Watch(id)
	if _, err := e.rt.Submit(e.ctx, spec); err != nil {
		e.t.Fatal(err)
	}
	e.start()
	return e.await(ch)
}

// A fork starts at its step with the variables and outputs as they were
// before the origin first got there (a loop's first visit, not its last),
// large outputs included, from a sealed origin too, and a fork of a fork
// sees what the fork inherited.
func TestForkRebuildsTheStateBeforeTheStep(t *testing.T) {
	var calls []int64
	e := forkEnv(t, &calls)
	path := e.write("loop.yaml", forkLoopYAML)
	want := `{"i":3,"last":20,"tag":"large","v":20}`
	wantSucceeded(t, e.run(path, map[string]any{}, "o1"), want)
	if len(calls) != 3 {
		t.Fatalf("probe ran %d times; want 3", len(calls))
	}

	// At check, first reached after one work: i is 1, work's output 0.
	fp := func(r Reader, run, at string) *ForkPoint {
		recs, err := History(e.ctx, r, e.store, run)
		if err != nil {
			t.Fatal(err)
		}
		p, err := FindForkPoint(e.ctx, e.store, run, recs, at)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := fp(e.q, "o1", "check")
	if p.Vars["i"] != int64(1) || p.Vars["last"] != int64(0) || len(p.Outputs) != 1 {
		t.Fatalf("fork point at check: vars %v, outputs %v", p.Vars, p.Outputs)
	}
	p = fp(e.q, "o1", "end")
	if p.Vars["i"] != int64(3) || p.Outputs["big"].(map[string]any)["tag"] != "large" {
		t.Fatalf("fork point at end: vars %v", p.Vars)
	}

	calls = nil
	wantSucceeded(t, e.fork(e.q, "o1", "check", "f1", ForkOptions{}), want)
	if len(calls) != 2 || calls[0] != 1 || calls[1] != 2 {
		t.Fatalf("the fork at check ran probe with %v; want [1 2]", calls)
	}
	st, err := e.rt.Inspector().Status(e.ctx, "f1")
	if err != nil || st.Headers[HeaderForkFrom] != "o1" || st.Headers[HeaderForkAt] != "check" {
		t.Fatalf("fork headers %v, %v", st.Headers, err)
	}

	if _, err := e.rt.Seal(e.ctx); err != nil {
		t.Fatal(err)
	}
	if left := e.kvKeys(histPrefix("o1")); len(left) != 0 {
		t.Fatalf("o1 is not sealed: %v", left)
	}
	sealed := WithSealed(e.q, e.rt.Inspector())
	calls = nil
	// The large output of big is inherited from the sealed origin.
	wantSucceeded(t, e.fork(sealed, "o1", "end", "f2", ForkOptions{}), want)
	// A fork of the fork at check: it inherited work's first output and i=1.
	wantSucceeded(t, e.fork(sealed, "f1", "big", "f3", ForkOptions{}), want)
	if len(calls) != 0 {
		t.Fatalf("forks past the loop ran probe %v", calls)
	}
	if _, err := FindForkPoint(e.ctx, e.store, "f1", e.historyOf(sealed, "f1"), "work"); err != nil {
		t.Fatalf("f1 reached work after its start: %v", err)
	}
}

func (e *tenv) historyOf(r Reader, run string) []HistoryRecord {
	e.t.Helper()
	h, err := History(e.ctx, r, e.store, run)
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// What cannot be forked is refused, naming why.
func TestForkRefusals(t *testing.T) {
	var calls []int64
	e := forkEnv(t, &calls)
	wantSucceeded(t, e.run(e.write("loop.yaml", forkLoopYAML), map[string]any{}, "o1"), `{"i":3,"last":20,"tag":"large","v":20}`)
	recs := e.history("o1")
	if _, err := FindForkPoint(e.ctx, e.store, "o1", recs, "nosuch"); !errors.Is(err, ErrNotForkable) || !strings.Contains(err.Error(), "never reached") {
		t.Fatalf("unknown step: %v", err)
	}
	// Records written before forks existed carry no marks.
	old := append([]HistoryRecord(nil), recs...)
	for i := range old {
		old[i].Forkable, old[i].RunStart, old[i].Set = false, nil, nil
	}
	if _, err := FindForkPoint(e.ctx, e.store, "o1", old, "check"); !errors.Is(err, ErrNotForkable) || !strings.Contains(err.Error(), "before forks") {
		t.Fatalf("old records: %v", err)
	}
	fp, err := FindForkPoint(e.ctx, e.store, "o1", recs, "check")
	if err != nil {
		t.Fatal(err)
	}
	other := e.load(e.write("other.yaml", "tqw: v1\nname: other\nsteps:\n  - id: only\n    succeed: 1\n"))
	if _, err := e.it.PrepareFork(e.ctx, "o1", fp, ForkOptions{Workflow: other}); !errors.Is(err, ErrNotForkable) {
		t.Fatalf("a revision without the step: %v", err)
	}
	if _, err := e.it.PrepareFork(e.ctx, "o1", fp, ForkOptions{RunID: "o1"}); !errors.Is(err, runstate.ErrInvalidRunID) {
		t.Fatalf("the origin's id: %v", err)
	}
}

// Two runs that part at a step: the first difference is there.
func TestDiffHistories(t *testing.T) {
	rec := func(step, outcome string, out any) HistoryRecord {
		return HistoryRecord{Step: step, Outcome: outcome, Output: out}
	}
	a := []HistoryRecord{rec("a", OutcomeOK, int64(1)), rec("b", OutcomeRetry, nil), rec("b", OutcomeOK, "x"), rec("c", OutcomeOK, 2.0), rec("d", OutcomeSucceeded, nil)}
	b := []HistoryRecord{rec("a", OutcomeOK, 1.0), rec("b", OutcomeOK, "y"), rec("e", OutcomeOK, nil), rec("c", OutcomeOK, int64(2)), rec("d", OutcomeFailed, nil)}
	var got []string
	for _, d := range DiffHistories(a, b) {
		got = append(got, d.Kind+":"+d.Step)
	}
	if strings.Join(got, " ") != "output:b only_b:e outcome:d" {
		t.Fatalf("differences %v", got)
	}
	if ds := DiffHistories(a, a); len(ds) != 0 {
		t.Fatalf("a run differs from itself: %v", ds)
	}
}
