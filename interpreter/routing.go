package interpreter

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

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
	x.hist.Set = assigned(vars, s.Set)
	if target == "" {
		// After the last step the run succeeds with the last output (or
		// its declared outputs).
		return x.succeedWith(ctx, env, output)
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

// goTo ends the step, moving the run on to target at once: it sets x.next
// and leaves the outcome to the delivery (RunStep), which runs target too
// when it folds, else settles with continueNow.
func (x *exec) goTo(target, outputStep, outcome string, e *dsl.ErrorInfo) (runtime.StepOutcome, error) {
	idx, _ := x.wf.Index(target)
	next := x.moveTo(idx, outputStep)
	x.hist.Prev = outputStep
	if err := x.finish(outcome, target, e); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	x.next = next
	return runtime.StepOutcome{}, nil
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
			next.resetWait()
			delay = x.capWait(&next, max(delay, 0))
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
		x.hist.Set = assigned(vars, r.Set)
		if target == "" {
			return x.succeedWith(ctx, env, e.output)
		}
		return x.goTo(target, outputStep, OutcomeCaught, &info)
	}
	return x.failRun(e)
}
