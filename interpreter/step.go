package interpreter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/duration"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Error types the interpreter raises itself, besides the actions' own.
const (
	TypeExpression    = "expression"
	TypeValidation    = "validation"
	TypeTimeout       = "timeout"
	TypeSignalTimeout = "signal.timeout"
	TypeCallFailed    = "call.failed"
	TypeCancelled     = "cancelled"
	// TypeUnexpected is an action failure that carries no type.
	TypeUnexpected = "custom.unexpected"
)

// noTimeout bounds a call step without a timeout: the parent waits for
// the child's termination signal, not for this.
const noTimeout = 100 * 365 * 24 * time.Hour

// stepErr is a failed attempt of a step, as retry and catch see it.
type stepErr struct {
	info   dsl.ErrorInfo
	output any // partial output, nil when none
}

func newStepErr(typ, format string, args ...any) *stepErr {
	return &stepErr{info: dsl.ErrorInfo{Type: typ, Message: fmt.Sprintf(format, args...), Retryable: dsl.RetryableByDefault(typ, 0)}}
}

func exprErr(err error) *stepErr {
	return &stepErr{info: dsl.ErrorInfo{Type: TypeExpression, Message: err.Error(), Retryable: dsl.RetryableByDefault(TypeExpression, 0)}}
}

// classify turns an action's error into a stepErr.
func classify(err error) *stepErr {
	if ae, ok := actions.AsError(err); ok {
		out, _ := plain(ae.Output)
		return &stepErr{info: dsl.ErrorInfo{Type: ae.Type, Message: ae.Message, Status: ae.Status, Retryable: ae.Retryable}, output: out}
	}
	if errors.Is(err, dsl.ErrEval) {
		return exprErr(err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return newStepErr(TypeTimeout, "%v", err)
	}
	return newStepErr(TypeUnexpected, "%v", err)
}

// exec is one delivery of one DSL step.
type exec struct {
	it    *Interpreter
	rs    *runtime.Step
	st    *state
	d     *definition
	wf    *dsl.Workflow
	s     *dsl.Step
	red   *redactor
	start time.Time
	hist  HistoryRecord
}

// RunStep executes the current DSL step of a run: one durable step.
func (it *Interpreter) RunStep(ctx context.Context, rs *runtime.Step) (runtime.StepOutcome, error) {
	if it.rt == nil {
		return runtime.StepOutcome{}, runtime.Permanent(ErrNotBound)
	}
	st, err := decodeState(rs.Payload)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("run %s, step %d: %w", rs.RunID, rs.Number, err))
	}
	d, err := it.definition(ctx, st.Def)
	if err != nil {
		if errors.Is(err, ErrDefinitionMissing) || errors.Is(err, ErrCorruptState) {
			return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("run %s: %w", rs.RunID, err))
		}
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	if rs.Number == 0 && !st.Init {
		// A run submitted under the id of a finished run whose records are
		// still stored (through a path that skipped Submit's check) ends
		// here, before it writes anything that would mix with them.
		found, err := hasRecords(ctx, it.q, rs.RunID)
		if err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		if found {
			return runtime.Fail(fmt.Sprintf("%v: the history of an earlier run %s is still stored; submit under a fresh run id", ErrRunIDReused, rs.RunID)), nil
		}
	}
	x := &exec{it: it, rs: rs, st: st, d: d, wf: d.wf, start: it.now()}
	x.red = newRedactor(x.secretValues())
	out, err := x.run(ctx)
	if err != nil {
		// The runtime records and logs the error: no secret goes with it.
		err = x.red.err(err)
		x.it.log.Warn("step failed; the runtime retries it", "run", rs.RunID, "step", x.stepID(), "err", err.Error())
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
func (x *exec) secretValues() []string {
	var out []string
	for _, name := range x.wf.Secrets {
		if v := x.it.getenv(name); len(v) >= MinSecretLength {
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
	if !st.Init {
		if err := x.initVars(); err != nil {
			x.s = x.wf.Steps[0]
			x.hist = HistoryRecord{N: x.rs.Number, Step: "vars", Kind: "vars", Attempt: 1, Start: x.start.UnixMilli()}
			return x.failRun(err)
		}
	}
	if st.Step >= len(x.wf.Steps) {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("%w: run %s is at step %d of a %d-step workflow", ErrCorruptState, x.rs.RunID, st.Step, len(x.wf.Steps)))
	}
	s := x.wf.Steps[st.Step]
	x.s = s
	x.hist = HistoryRecord{N: x.rs.Number, Step: s.ID, Kind: kindName(s), Attempt: max(st.Attempt, 1), Start: x.start.UnixMilli()}
	if errs := shortSecrets(x.wf, x.it.getenv); len(errs) > 0 {
		// Submit refuses these; a worker whose own environment holds one
		// fails the run rather than redact the value out of unrelated data.
		return x.failRun(newStepErr(TypeValidation, "%v", errors.Join(errs...)))
	}
	if st.Phase == phaseRun {
		x.it.emit(Event{Time: x.start, RunID: x.rs.RunID, Step: s.ID, Kind: "start", Attempt: x.hist.Attempt, Job: x.rs.JobID})
	} else if st.Started > 0 {
		x.hist.Start = st.Started
	}
	env, err := x.env(ctx)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
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
	}
	return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("%w: step %q has unknown kind %q", ErrCorruptState, s.ID, s.Kind))
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

// env builds the expression environment of the current step.
func (x *exec) env(ctx context.Context) (*dsl.Env, error) {
	steps := map[string]dsl.StepState{}
	idx := x.s.Index
	if x.d.all[idx] {
		after := ""
		prefix := kvOut + x.rs.RunID + "/"
		for {
			page, err := x.it.q.KVScan(ctx, prefix, after, 256)
			if err != nil {
				return nil, fmt.Errorf("interpreter: read outputs of run %s: %w", x.rs.RunID, err)
			}
			for _, e := range page {
				v, err := x.decodeOutput(ctx, e.Value)
				if err != nil {
					return nil, err
				}
				steps[e.Key[len(prefix):]] = dsl.StepState{Output: v}
			}
			if len(page) < 256 {
				break
			}
			after = page[len(page)-1].Key
		}
	} else {
		for _, id := range x.d.refs[idx] {
			b, found, err := x.rs.KV.Get(ctx, outKey(x.rs.RunID, id))
			if err != nil {
				return nil, fmt.Errorf("interpreter: read output of step %s: %w", id, err)
			}
			if !found {
				continue
			}
			v, err := x.decodeOutput(ctx, b)
			if err != nil {
				return nil, err
			}
			steps[id] = dsl.StepState{Output: v}
		}
	}
	return &dsl.Env{
		Input: x.st.Input, Vars: x.st.Vars, Steps: steps,
		Run: dsl.RunInfo{ID: x.rs.RunID, Workflow: x.wf.Name, Step: x.s.ID, Attempt: max(x.st.Attempt, 1)},
		Now: x.it.now, UUID: x.it.uuid,
	}, nil
}

func (x *exec) decodeOutput(ctx context.Context, b []byte) (any, error) {
	var rec outputRecord
	if err := decodeMsgpack(b, &rec); err != nil {
		return nil, err
	}
	if rec.Ref != "" {
		return readOutputObject(ctx, x.it.store, rec.Ref)
	}
	return rec.Output, nil
}

// loadOutput returns the recorded output of step id ("" and unknown: nil).
func (x *exec) loadOutput(ctx context.Context, id string) (any, error) {
	if id == "" {
		return nil, nil
	}
	b, found, err := x.rs.KV.Get(ctx, outKey(x.rs.RunID, id))
	if err != nil {
		return nil, fmt.Errorf("interpreter: read output of step %s: %w", id, err)
	}
	if !found {
		return nil, nil
	}
	return x.decodeOutput(ctx, b)
}

// putOutput stages the step's output (already plain and redacted) as a KV
// effect, offloading a large one to its own object first.
func (x *exec) putOutput(ctx context.Context, v any) error {
	rec := outputRecord{N: x.rs.Number, Output: v}
	b, err := encodeMsgpack(&rec)
	if err != nil {
		return err
	}
	if len(b) > InlineOutputLimit {
		obj, err := encodeMsgpack(v)
		if err != nil {
			return err
		}
		key := outputObject(x.rs.RunID, x.rs.Number)
		if _, err := x.it.store.Put(ctx, key, obj, objstore.PutOptions{}); err != nil {
			return fmt.Errorf("interpreter: store output of step %s: %w", x.s.ID, err)
		}
		rec = outputRecord{N: x.rs.Number, Ref: key}
		if b, err = encodeMsgpack(&rec); err != nil {
			return err
		}
		x.hist.OutputRef = key
	} else {
		x.hist.Output = v
	}
	return x.rs.Effects.Put(outKey(x.rs.RunID, x.s.ID), b)
}

// finish stages the history record and reports the end of the step.
func (x *exec) finish(outcome, next string, e *dsl.ErrorInfo) error {
	end := x.it.now()
	x.hist.End, x.hist.Outcome, x.hist.Next, x.hist.Error = end.UnixMilli(), outcome, next, e
	b, err := encodeMsgpack(&x.hist)
	if err != nil {
		return err
	}
	if len(b) > queue.MaxKVValueSize/2 {
		x.hist.Output = nil
		if b, err = encodeMsgpack(&x.hist); err != nil {
			return err
		}
	}
	if err := x.rs.Effects.Put(histKey(x.rs.RunID, x.rs.Number), b); err != nil {
		return err
	}
	began := x.start
	if x.st.Phase != phaseRun && x.st.Started > 0 {
		began = time.UnixMilli(x.st.Started)
	}
	ev := Event{Time: end, RunID: x.rs.RunID, Step: x.s.ID, Kind: "end", Attempt: x.hist.Attempt,
		Status: outcome, Elapsed: end.Sub(began), Error: e, Next: next, Job: x.rs.JobID}
	// Reported once the history record and the transition are durable,
	// never before: a step shown complete never runs again.
	x.rs.OnDurable(func() { x.it.emit(ev) })
	return nil
}

// next returns the payload of the state that runs step idx next.
func (x *exec) moveTo(idx int, prev string) ([]byte, error) {
	st := *x.st
	st.Step, st.Attempt, st.Visit, st.Prev = idx, 1, x.rs.Number+1, prev
	st.Phase, st.WaitKey, st.Child, st.Started, st.Deadline = phaseRun, "", "", 0, 0
	return st.encode()
}

// succeedStep ends the run with the succeed value.
func (x *exec) succeedStep(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	out, err := x.loadOutput(ctx, x.st.Prev)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	env.Output = out
	v, err := x.s.Succeed.Eval(env)
	if err != nil {
		return x.failRun(exprErr(err))
	}
	return x.succeedRun(v)
}

func (x *exec) succeedRun(v any) (runtime.StepOutcome, error) {
	p, err := plain(v)
	if err != nil {
		return x.failRun(newStepErr(TypeExpression, "result: %v", err))
	}
	p = x.red.value(p)
	b, err := toJSON(p)
	if err != nil {
		return x.failRun(newStepErr(TypeExpression, "result: %v", err))
	}
	if x.hist.Output == nil && x.hist.OutputRef == "" && len(b) <= InlineOutputLimit {
		x.hist.Output = p
	}
	if err := x.finish(OutcomeSucceeded, "", nil); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.Succeed(b), nil
}

// failStep ends the run as failed with the fail message.
func (x *exec) failStep(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	out, err := x.loadOutput(ctx, x.st.Prev)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	env.Output = out
	v, err := x.s.Fail.Eval(env)
	if err != nil {
		return x.failRun(exprErr(err))
	}
	msg, err := dsl.Stringify(v)
	if err != nil {
		return x.failRun(exprErr(err))
	}
	msg = x.red.text(msg)
	if err := x.finish(OutcomeFailed, "", &dsl.ErrorInfo{Type: "fail", Message: msg}); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.Fail(msg), nil
}

// failRun ends the run because the current step failed for good.
func (x *exec) failRun(e *stepErr) (runtime.StepOutcome, error) {
	e.info.Message = x.red.text(e.info.Message)
	if err := x.finish(OutcomeFailed, "", &e.info); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.Fail(fmt.Sprintf("step %s: %s: %s", x.hist.Step, e.info.Type, e.info.Message)), nil
}

// after runs set and routing once the step produced output.
func (x *exec) after(ctx context.Context, env *dsl.Env, output any, outputStep string) (runtime.StepOutcome, error) {
	s := x.s
	env.Output = output
	vars := maps.Clone(x.st.Vars)
	if vars == nil {
		vars = map[string]any{}
	}
	env.Vars = vars
	if e := x.assign(env, vars, s.Set); e != nil {
		return x.routeError(ctx, env, e)
	}
	target, e := x.route(env)
	if e != nil {
		return x.routeError(ctx, env, e)
	}
	x.st.Vars = vars
	if target == "" {
		// After the last step the run succeeds with the last output.
		return x.succeedRun(output)
	}
	return x.goTo(target, outputStep, OutcomeOK, nil)
}

// routeError handles an error raised after the step's work: through
// retry and catch for steps that have them, else it fails the run.
func (x *exec) routeError(ctx context.Context, env *dsl.Env, e *stepErr) (runtime.StepOutcome, error) {
	switch x.s.Kind {
	case dsl.KindAction, dsl.KindForeach, dsl.KindCall:
		return x.handleError(ctx, env, e)
	}
	return x.failRun(e)
}

// assign evaluates every value of set against env, then assigns the
// results into vars together: each value reads the variables as they were
// before the set, whatever the order of its keys (YAML mappings have
// none), as Step Functions' Assign does. env.Vars may be vars itself.
func (x *exec) assign(env *dsl.Env, vars map[string]any, set []dsl.Assignment) *stepErr {
	vals := make([]any, len(set))
	for i, a := range set {
		v, err := a.Value.Eval(env)
		if err != nil {
			return exprErr(err)
		}
		p, err := plain(v)
		if err != nil {
			return newStepErr(TypeExpression, "set %s: %v", a.Name, err)
		}
		vals[i] = x.red.value(p)
	}
	for i, a := range set {
		vars[a.Name] = vals[i]
	}
	return nil
}

// route returns the id of the next step, "" after the last one.
func (x *exec) route(env *dsl.Env) (string, *stepErr) {
	s := x.s
	for _, c := range s.Switch {
		ok, err := c.When.EvalBool(env)
		if err != nil {
			return "", exprErr(err)
		}
		if ok {
			return x.target(env, c.Next)
		}
	}
	if s.Next != nil {
		return x.target(env, s.Next)
	}
	if f := x.wf.Following(s); f != nil {
		return f.ID, nil
	}
	return "", nil
}

func (x *exec) target(env *dsl.Env, t *dsl.Template) (string, *stepErr) {
	if t == nil {
		if f := x.wf.Following(x.s); f != nil {
			return f.ID, nil
		}
		return "", nil
	}
	v, err := t.Eval(env)
	if err != nil {
		return "", exprErr(err)
	}
	id, ok := v.(string)
	if !ok || x.wf.Step(id) == nil {
		return "", newStepErr(TypeExpression, "%s: next evaluates to %v, which names no step", t.Pos, v)
	}
	return id, nil
}

func (x *exec) goTo(target, outputStep, outcome string, e *dsl.ErrorInfo) (runtime.StepOutcome, error) {
	idx, _ := x.wf.Index(target)
	payload, err := x.moveTo(idx, outputStep)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	if err := x.finish(outcome, target, e); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueNow(payload), nil
}

// handleError applies retry, on_timeout and catch to a failed attempt.
func (x *exec) handleError(ctx context.Context, env *dsl.Env, e *stepErr) (runtime.StepOutcome, error) {
	s, st := x.s, x.st
	e.info.Message = x.red.text(e.info.Message)
	e.output = x.red.value(e.output)
	info := e.info
	env.Error, env.Output = &info, e.output
	x.hist.Output = e.output // the partial output, for history
	if p := s.Retry; p != nil && st.Attempt < p.MaxAttempts && p.Retries(&info) {
		retry := true
		if p.When != nil {
			ok, err := p.When.EvalBool(env)
			if err != nil {
				x.it.log.Warn("retry.when failed; not retrying", "run", x.rs.RunID, "step", s.ID, "err", x.red.text(err.Error()))
			}
			retry = ok && err == nil
		}
		if retry {
			delay := p.Delay(st.Attempt + 1)
			if p.Jitter > 0 {
				delay = time.Duration(float64(delay) * (1 + p.Jitter*(2*x.it.float()-1)))
			}
			next := *st
			next.Attempt++
			next.Phase, next.WaitKey, next.Child, next.Started = phaseRun, "", "", 0
			payload, err := next.encode()
			if err != nil {
				return runtime.StepOutcome{}, runtime.Permanent(err)
			}
			if err := x.finish(OutcomeRetry, s.ID, &info); err != nil {
				return runtime.StepOutcome{}, runtime.Permanent(err)
			}
			return runtime.ContinueAfter(payload, max(delay, 0)), nil
		}
	}
	outputStep := ""
	if e.output != nil {
		if err := x.putOutput(ctx, e.output); err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		outputStep = s.ID
	}
	if s.OnTimeout != "" && (info.Type == TypeTimeout || info.Type == TypeSignalTimeout) {
		return x.goTo(s.OnTimeout, outputStep, OutcomeCaught, &info)
	}
	for i := range s.Catch {
		r := &s.Catch[i]
		if !r.MatchesType(info.Type) {
			continue
		}
		if r.When != nil {
			ok, err := r.When.EvalBool(env)
			if err != nil {
				return x.failRun(exprErr(fmt.Errorf("catch rule at %s: %w (while handling %s: %s)", r.Pos, err, info.Type, info.Message)))
			}
			if !ok {
				continue
			}
		}
		vars := maps.Clone(st.Vars)
		if vars == nil {
			vars = map[string]any{}
		}
		env.Vars = vars
		if ae := x.assign(env, vars, r.Set); ae != nil {
			return x.failRun(ae)
		}
		target, te := x.target(env, r.Next)
		if te != nil {
			return x.failRun(te)
		}
		st.Vars = vars
		if target == "" {
			return x.succeedRun(e.output)
		}
		return x.goTo(target, outputStep, OutcomeCaught, &info)
	}
	return x.failRun(e)
}

// evalWith renders a with template, with secrets readable.
func (x *exec) evalWith(env *dsl.Env, t *dsl.Template) (map[string]any, *stepErr) {
	if t == nil {
		return map[string]any{}, nil
	}
	secrets := map[string]string{}
	for _, name := range x.d.secretRefs[x.s.Index] {
		v, ok := x.secret(name)
		if !ok {
			return nil, newStepErr(TypeValidation, "secret %s is not set: export %s in the environment of the worker", name, name)
		}
		secrets[name] = v
	}
	e := *env
	e.Secrets = secrets
	v, err := t.Eval(&e)
	if err != nil {
		return nil, exprErr(err)
	}
	// Actions take JSON-compatible values: durations and times from
	// expressions become their text forms.
	if v, err = plain(v); err != nil {
		return nil, newStepErr(TypeValidation, "with: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, newStepErr(TypeValidation, "with evaluates to %T, want a map", v)
	}
	return m, nil
}

// memo adapts the run memo to actions.Memo under a key prefix, with
// secrets redacted from what it stores.
type memo struct {
	m      *runtime.Memo
	prefix string
	red    *redactor
}

func (m memo) Get(ctx context.Context, key string) ([]byte, bool, error) {
	return m.m.Get(ctx, m.prefix+key)
}

func (m memo) Put(ctx context.Context, key string, value []byte) error {
	return m.m.Put(ctx, m.prefix+key, m.red.bytes(value))
}

func (x *exec) memo(suffix string) actions.Memo {
	if x.rs.RunMemo == nil {
		return nil
	}
	return memo{m: x.rs.RunMemo, prefix: fmt.Sprintf("v%d.%s", x.st.Visit, suffix), red: x.red}
}

// invoke runs one attempt of an action under the step's timeout, keeping
// the delivery's lease alive meanwhile.
func (x *exec) invoke(ctx context.Context, a actions.Action, call *actions.Call) (any, error) {
	timeout := x.s.Timeout
	if x.rs.Lease != nil {
		if timeout > 0 {
			if err := x.rs.Lease.EnsureAtLeast(ctx, timeout+x.it.margin); err != nil {
				return nil, runtime.Transient(err)
			}
		}
		stop := x.keepLease(ctx)
		defer stop()
	}
	actx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return a.Execute(actx, call)
}

// keepLease extends the lease every third of the margin until stopped.
func (x *exec) keepLease(ctx context.Context) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		period := x.it.margin / 3
		for {
			t := x.it.clock.NewTimer(period)
			select {
			case <-done:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
			if err := x.rs.Lease.EnsureAtLeast(ctx, 2*x.it.margin); err != nil {
				x.it.log.Warn("extending a step's lease failed", "run", x.rs.RunID, "step", x.s.ID, "err", err)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (x *exec) lookup(name string) (actions.Action, *stepErr) {
	a, ok := x.it.acts.Lookup(name)
	if !ok {
		hint := ""
		if name == "shell" {
			hint = " (this worker runs with the shell action disabled, e.g. --no-shell)"
		}
		return nil, newStepErr(TypeValidation, "action %q is not available in this worker%s", name, hint)
	}
	return a, nil
}

// action runs an action step.
func (x *exec) action(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	a, e := x.lookup(x.s.Action)
	if e != nil {
		return x.handleError(ctx, env, e)
	}
	args, e := x.evalWith(env, x.s.With)
	if e != nil {
		return x.handleError(ctx, env, e)
	}
	call := &actions.Call{RunID: x.rs.RunID, StepID: x.s.ID, Attempt: x.st.Attempt, Args: args,
		Secret: x.secret, Derived: x.red.derive, Memo: x.memo(""),
		Logger: x.red.logger(x.it.log).With("run", x.rs.RunID, "step", x.s.ID, "action", x.s.Action)}
	out, err := x.invoke(ctx, a, call)
	if err != nil {
		var se *runtime.StepError
		if errors.As(err, &se) {
			return runtime.StepOutcome{}, err
		}
		if ctx.Err() != nil {
			// Shutdown or cancel: the runtime retries or discards the step.
			return runtime.StepOutcome{}, runtime.Transient(fmt.Errorf("step %s interrupted: %w", x.s.ID, context.Cause(ctx)))
		}
		return x.handleError(ctx, env, classify(err))
	}
	return x.finishAction(ctx, env, out)
}

// finishAction records an action's output and continues with set and routing.
func (x *exec) finishAction(ctx context.Context, env *dsl.Env, out any) (runtime.StepOutcome, error) {
	p, err := plain(out)
	if err != nil {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "output of action %s: %v", x.s.Action, err))
	}
	p = x.red.value(p)
	if err := x.putOutput(ctx, p); err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	return x.after(ctx, env, p, x.s.ID)
}

// durationArg reads a duration argument: a DSL duration string or a
// duration value.
func durationArg(args map[string]any, name string) (time.Duration, bool, *stepErr) {
	v, ok := args[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	switch d := v.(type) {
	case time.Duration:
		if d < 0 {
			return 0, true, newStepErr(TypeValidation, "argument %q: negative duration %v", name, d)
		}
		return d, true, nil
	case string:
		p, err := duration.Parse(d)
		if err != nil {
			return 0, true, newStepErr(TypeValidation, "argument %q: %v", name, err)
		}
		return p, true, nil
	}
	return 0, true, newStepErr(TypeValidation, "argument %q: want a duration such as \"30s\", got %T", name, v)
}

// sleep parks the run for a duration or until a time.
func (x *exec) sleep(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	if x.st.Phase == phaseSlept {
		return x.finishAction(ctx, env, nil)
	}
	args, e := x.evalWith(env, x.s.With)
	if e != nil {
		return x.handleError(ctx, env, e)
	}
	d, ok, e := durationArg(args, "duration")
	if e != nil {
		return x.handleError(ctx, env, e)
	}
	if !ok {
		var until time.Time
		switch u := args["until"].(type) {
		case time.Time:
			until = u
		case string:
			t, err := time.Parse(time.RFC3339, u)
			if err != nil {
				return x.handleError(ctx, env, newStepErr(TypeValidation, "argument \"until\": %q is not an RFC 3339 time", u))
			}
			until = t
		default:
			return x.handleError(ctx, env, newStepErr(TypeValidation, "sleep needs duration or until"))
		}
		d = max(until.Sub(x.it.now()), 0)
	}
	next := *x.st
	next.Phase, next.Started = phaseSlept, x.start.UnixMilli()
	payload, err := next.encode()
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	x.hist.Until = x.it.now().Add(d).UnixMilli()
	if err := x.finish(OutcomeWaiting, "", nil); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueAfter(payload, d), nil
}

// waitSignal parks the run until a signal arrives or the wait times out.
func (x *exec) waitSignal(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	args, e := x.evalWith(env, x.s.With)
	if e != nil {
		if x.st.Phase == phaseSignal {
			_ = x.rs.Effects.Delete(waitKey(x.st.WaitKey))
		}
		return x.handleError(ctx, env, e)
	}
	if x.st.Phase == phaseSignal {
		// A payload the step cannot use is set aside before anything
		// ends the wait, so the wait record stays for the next signal.
		var (
			v      any
			reason string
			err    error
		)
		if x.rs.Signal != nil {
			v, reason, err = checkPayload(args["schema"], x.rs.Signal)
			if err == nil && reason != "" {
				return x.setAsideSignal(args, reason)
			}
		}
		if err := x.rs.Effects.Delete(waitKey(x.st.WaitKey)); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		switch {
		case err != nil:
			return x.handleError(ctx, env, newStepErr(TypeValidation, "%v", err))
		case x.rs.Signal == nil:
			return x.handleError(ctx, env, newStepErr(TypeSignalTimeout, "no signal on key %q in time", x.st.WaitKey))
		}
		return x.finishAction(ctx, env, v)
	}
	timeout, ok, e := durationArg(args, "timeout")
	if e == nil && !ok {
		e = newStepErr(TypeValidation, "wait_signal needs with.timeout")
	}
	if e != nil {
		return x.handleError(ctx, env, e)
	}
	key := x.rs.RunID + ":" + x.s.ID
	if k, ok := args["key"]; ok && k != nil {
		s, isStr := k.(string)
		if !isStr || s == "" {
			return x.handleError(ctx, env, newStepErr(TypeValidation, "argument \"key\": want a non-empty string, got %v", k))
		}
		key = s
	}
	var schema any
	if sch := args["schema"]; sch != nil {
		p, err := plain(sch)
		if err != nil {
			return x.handleError(ctx, env, newStepErr(TypeValidation, "argument \"schema\": %v", err))
		}
		schema = p
	}
	wrec, err := encodeMsgpack(&waitRecord{RunID: x.rs.RunID, Def: x.st.Def, Step: x.s.Index, Schema: schema})
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	if err := x.rs.Effects.Put(waitKey(key), wrec); err != nil {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "signal key %q: %v", key, err))
	}
	next := *x.st
	next.Phase, next.WaitKey, next.Started = phaseSignal, key, x.start.UnixMilli()
	next.Deadline = x.it.now().Add(timeout).UnixMilli()
	payload, err := next.encode()
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	x.hist.WaitKey, x.hist.Until = key, next.Deadline
	if err := x.finish(OutcomeWaiting, "", nil); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueOnSignal(payload, key, timeout), nil
}
