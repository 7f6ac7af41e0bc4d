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
	return x.failedAt(runtime.Fail(msg))
}

// failRun ends the run because the current step failed for good.
func (x *exec) failRun(e *stepErr) (runtime.StepOutcome, error) {
	e.info.Message = x.red.text(e.info.Message)
	if err := x.finish(OutcomeFailed, "", &e.info); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return x.failedAt(runtime.Fail(fmt.Sprintf("step %s: %s: %s", x.hist.Step, e.info.Type, e.info.Message)))
}

// failedAt gives a failing outcome the state at the failing step, which a
// redrive resumes from (runtime.Runtime.Redrive): in a delivery that ran
// several steps it is not the delivery's input. A run whose initial
// variables failed keeps that input (the variables are evaluated again).
func (x *exec) failedAt(out runtime.StepOutcome) (runtime.StepOutcome, error) {
	if x.hist.Kind == "vars" {
		return out, nil
	}
	b, err := x.st.encode()
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	out.Payload = b
	return out, nil
}
