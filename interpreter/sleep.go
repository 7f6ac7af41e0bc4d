package interpreter

import (
	"context"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/duration"
	"github.com/tqw-dsl/tqw/runtime"
)

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
	d = x.capWait(&next, d)
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
