package interpreter

import (
	"context"
	"fmt"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

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
	return x.succeedWith(ctx, env, v)
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
	return x.endRun(&runEnd{Outcome: endSucceeded, Result: b})
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
	if err := x.blockFailure("fail", msg); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	info := dsl.ErrorInfo{Type: "fail", Message: msg}
	if err := x.finish(OutcomeFailed, "", &info); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return x.failedEnd(info, msg)
}

// failRun ends the run because the current step failed for good.
func (x *exec) failRun(e *stepErr) (runtime.StepOutcome, error) {
	e.info.Message = x.red.text(e.info.Message)
	if err := x.blockFailure(e.info.Type, e.info.Message); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	if err := x.finish(OutcomeFailed, "", &e.info); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return x.failedEnd(e.info, fmt.Sprintf("step %s: %s: %s", x.hist.Step, e.info.Type, e.info.Message))
}
