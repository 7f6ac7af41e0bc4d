package interpreter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// noTimeout bounds a call step without a timeout: the parent waits for
// the child's termination signal, not for this.
const noTimeout = 100 * 365 * 24 * time.Hour

// exec is one DSL step run in a delivery.
type exec struct {
	it    *Interpreter
	rs    *runtime.Step
	st    *state
	d     *definition
	wf    *dsl.Workflow
	s     *dsl.Step
	red   *redactor
	ch    *chain
	start time.Time
	hist  HistoryRecord
	// seq is the step's place in its delivery (0: the first).
	seq int
	// next is the state the step moved the run to, to run at once; the
	// step's own outcome is then left to the delivery, which runs that
	// state too or settles with it (continueNow).
	next *state
	// llm gathers the model calls of this attempt, for its end event
	// (charge; foreach items add to it concurrently under llmMu).
	llmMu sync.Mutex
	llm   []LLMUsage
	// foldedStart is the start event of a folded step (seq > 0), held
	// until its end is reported.
	foldedStart *Event
	// skipped: a redrive skips the step (redrive.go); it ends
	// OutcomeSkipped instead of OutcomeOK.
	skipped bool
	// inputRef is the input record this step wrote for its children.
	inputRef string
}

// RunStep executes the current DSL step of a run and the pure steps that
// follow it (fold.go): one durable step.
func (it *Interpreter) RunStep(ctx context.Context, rs *runtime.Step) (runtime.StepOutcome, error) {
	if it.tracer != nil {
		ctx = it.runSpan(ctx, rs)
	}
	began := it.now()
	st, d, out, err := it.openStep(ctx, rs)
	if st == nil {
		it.traceUnstarted(ctx, rs, err)
		return out, err
	}
	it.noteStart(rs)
	c := &chain{red: newRedactor(it.secretValues(d.wf)), ctx: ctx}
	var prev *exec
	for {
		x := &exec{it: it, rs: rs, st: st, d: d, wf: d.wf, red: c.red, ch: c, seq: c.steps, start: it.now()}
		x.fixDeadline()
		sctx, cancel := x.bound(ctx)
		out, err = it.traceStep(sctx, x)
		cancel()
		c.steps++
		if it.stepDurations != nil {
			now := it.now()
			it.stepDurations(now.Sub(began))
			began = now
		}
		if err != nil && prev != nil {
			// A folded step that errs (a failed read) staged nothing: the
			// chain before it settles, and it runs again in a delivery of
			// its own, so the delivery's first step (an action perhaps)
			// is not done twice for it.
			return prev.continueNow()
		}
		if err != nil || x.next == nil {
			return out, err
		}
		if !c.folds(ctx, x) {
			return x.continueNow()
		}
		prev, st = x, x.next
	}
}

// openStep decodes rs's state and reads its definition; st is nil when
// the delivery ends before any DSL step, with out and err its end.
func (it *Interpreter) openStep(ctx context.Context, rs *runtime.Step) (st *state, d *definition, out runtime.StepOutcome, err error) {
	st, err = decodeState(rs.Payload)
	if err != nil {
		return nil, nil, runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("run %s, step %d: %w", rs.RunID, rs.Number, err))
	}
	if st.InputRef != "" {
		if st.Input, err = it.readInput(ctx, st.InputRef); err != nil {
			if errors.Is(err, ErrCorruptState) {
				return nil, nil, runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("run %s: %w", rs.RunID, err))
			}
			return nil, nil, runtime.StepOutcome{}, runtime.Transient(err)
		}
	}
	d, err = it.definition(ctx, st.Def)
	if err != nil {
		if errors.Is(err, ErrDefinitionMissing) || errors.Is(err, ErrCorruptState) {
			return nil, nil, runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("run %s: %w", rs.RunID, err))
		}
		return nil, nil, runtime.StepOutcome{}, runtime.Transient(err)
	}
	if rs.Number == 0 && !st.Init {
		// A run submitted under the id of a finished run whose records are
		// still stored (through a path that skipped Submit's check) ends
		// here, before it writes anything that would mix with them.
		found, err := hasRecords(ctx, it.q, rs.RunID)
		if err != nil {
			return nil, nil, runtime.StepOutcome{}, runtime.Transient(err)
		}
		if found {
			return nil, nil, runtime.Fail(fmt.Sprintf("%v: the history of an earlier run %s is still stored; submit under a fresh run id", ErrRunIDReused, rs.RunID)), nil
		}
	}
	return st, d, runtime.StepOutcome{}, nil
}

// runOne runs x's step, with the error it returns to the runtime redacted.
func (x *exec) runOne(ctx context.Context) (runtime.StepOutcome, error) {
	out, err := x.run(ctx)
	if err != nil && x.s != nil && pastDeadline(ctx) {
		// The deadline cut the step short: not a retry, the run's end.
		return x.deadlinePassed(ctx)
	}
	if err != nil {
		// The runtime records and logs the error: no secret goes with it.
		err = x.red.err(err)
		if ctx.Err() != nil {
			// Cancelled (the runtime discards the step) or shut down (the
			// next delivery runs it): neither is a failure.
			x.it.log.Debug("step interrupted", "run", x.rs.RunID, "step", x.stepID(), "err", err.Error())
			return out, err
		}
		x.it.log.Warn("step failed; the runtime retries it", "run", x.rs.RunID, "step", x.stepID(), "err", err.Error())
	}
	return out, err
}

func (x *exec) stepID() string {
	if x.s != nil {
		return x.s.ID
	}
	return ""
}

// secretValues returns the values of the workflow's declared secrets,
// but for those under MinSecretLength, which run refuses.
func (it *Interpreter) secretValues(wf *dsl.Workflow) []string {
	var out []string
	for _, name := range wf.Secrets {
		if v := it.getenv(name); len(v) >= MinSecretLength {
			out = append(out, v)
		}
	}
	return out
}

func (x *exec) secret(name string) (string, bool) {
	for _, n := range x.wf.Secrets {
		if n == name {
			v := x.it.getenv(name)
			return v, v != ""
		}
	}
	return "", false
}

func (x *exec) run(ctx context.Context) (runtime.StepOutcome, error) {
	st := x.st
	first := !st.Init
	if first {
		if err := x.initVars(); err != nil {
			x.s = x.wf.Block(st.Block).Steps[0]
			x.hist = HistoryRecord{N: x.rs.Number, Seq: x.seq, Step: "vars", Kind: "vars", Attempt: 1, Start: x.start.UnixMilli()}
			return x.failRun(err)
		}
	}
	s, err := st.current(x.wf)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("run %s: %w", x.rs.RunID, err))
	}
	x.s = s
	x.hist = HistoryRecord{N: x.rs.Number, Seq: x.seq, Step: s.ID, Kind: kindName(s), Attempt: max(st.Attempt, 1), Start: x.start.UnixMilli()}
	x.recordStart(first)
	if errs := shortSecrets(x.wf, x.it.getenv); len(errs) > 0 {
		// Submit refuses these; a worker whose own environment holds one
		// fails the run rather than redact the value out of unrelated data.
		return x.failRun(newStepErr(TypeValidation, "%v", errors.Join(errs...)))
	}
	if st.Phase == phaseRun {
		ev := Event{Time: x.start, RunID: x.rs.RunID, Step: s.ID, Kind: "start", Attempt: x.hist.Attempt, Job: x.rs.JobID,
			Workflow: x.wf.Name, Action: stepAction(s), Number: x.rs.Number, Seq: x.seq}
		if x.seq == 0 {
			x.it.emit(ev)
		} else {
			// A folded step's start goes out with its end, once the chain
			// is durable (finish), so it follows the end of the step
			// before it.
			x.foldedStart = &ev
		}
	} else if st.Started > 0 {
		x.hist.Start = st.Started
	}
	if x.rs.Cancelled {
		if out, handled, err := x.cancelled(ctx); handled {
			return out, err
		}
	}
	if x.expired() {
		return x.deadlinePassed(ctx)
	}
	env, err := x.env(ctx)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	x.handlerEnv(env)
	if sk := st.Skip; sk != nil {
		st.Skip = nil
		return x.skip(ctx, env, sk.Output)
	}
	switch s.Kind {
	case dsl.KindSucceed:
		return x.succeedStep(ctx, env)
	case dsl.KindFail:
		return x.failStep(ctx, env)
	case dsl.KindSwitch, dsl.KindSet:
		out, err := x.loadOutput(ctx, st.Prev)
		if err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		return x.after(ctx, env, out, st.Prev)
	case dsl.KindAction:
		switch s.Action {
		case "sleep":
			return x.sleep(ctx, env)
		case "wait_signal":
			return x.waitSignal(ctx, env)
		}
		return x.action(ctx, env)
	case dsl.KindForeach:
		return x.foreach(ctx, env)
	case dsl.KindCall:
		return x.call(ctx, env)
	case dsl.KindParallel:
		return x.parallel(ctx, env)
	case dsl.KindMap:
		return x.mapStep(ctx, env)
	}
	return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("%w: step %q has unknown kind %q", ErrCorruptState, s.ID, s.Kind))
}

// stepAction is the action a step calls ("" for other kinds), for
// observers.
func stepAction(s *dsl.Step) string {
	switch {
	case s.Kind == dsl.KindAction:
		return s.Action
	case s.Kind == dsl.KindForeach && s.Foreach != nil:
		return s.Foreach.Action
	}
	return ""
}

func kindName(s *dsl.Step) string {
	switch s.Kind {
	case dsl.KindAction:
		return s.Action
	case dsl.KindForeach:
		return "foreach " + s.Foreach.Action
	}
	return string(s.Kind)
}

// initVars evaluates the initial variables at the run's first step.
func (x *exec) initVars() *stepErr {
	st := x.st
	st.Init, st.Step, st.Attempt, st.Visit = true, 0, 1, x.rs.Number
	st.Vars = map[string]any{}
	if x.wf.Vars == nil {
		return nil
	}
	env := &dsl.Env{Input: st.Input, Run: dsl.RunInfo{ID: x.rs.RunID, Workflow: x.wf.Name, Step: x.wf.Steps[0].ID, Attempt: 1},
		Now: x.it.now, UUID: x.it.uuid}
	v, err := x.wf.Vars.Eval(env)
	if err != nil {
		return exprErr(fmt.Errorf("initial vars: %w", err))
	}
	p, err := plain(v)
	if err != nil {
		return exprErr(fmt.Errorf("initial vars: %w", err))
	}
	m, ok := p.(map[string]any)
	if !ok {
		return newStepErr(TypeExpression, "initial vars: want a map, got %T", p)
	}
	st.Vars = m
	return nil
}
