package interpreter

import (
	"context"
	"errors"
	"fmt"

	rtmemo "github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// evalWith renders a with template, with secrets readable.
func (x *exec) evalWith(env *dsl.Env, t *dsl.Template) (map[string]any, *stepErr) {
	if t == nil {
		return map[string]any{}, nil
	}
	secrets := map[string]string{}
	for _, name := range x.d.secretRefs[x.s] {
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
	m      *rtmemo.Memo
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
	actx := x.actionContext(ctx)
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
		Secret: x.secret, Derived: x.red.derive, Memo: x.memo(""), Charge: x.charge,
		Answers: x.answers(), ReuseAnswers: x.reusesAnswers(),
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
