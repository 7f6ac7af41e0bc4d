package interpreter

import (
	"context"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// waitSignal parks the run until a signal arrives or the wait times out.
func (x *exec) waitSignal(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	args, e := x.evalWith(env, x.s.With)
	if e != nil {
		if x.st.Phase == phaseSignal {
			if err := x.rs.Effects.Delete(waitKey(x.st.WaitKey)); err != nil {
				return runtime.StepOutcome{}, runtime.Permanent(err)
			}
		}
		return x.handleError(ctx, env, e)
	}
	if x.st.Phase == phaseSignal {
		// A payload the step cannot use is set aside before anything
		// ends the wait, so the wait record stays for the next signal.
		var (
			v       any
			problem *payloadProblem
			err     error
		)
		if x.rs.Signal != nil {
			v, problem, err = checkPayload(args["schema"], x.rs.Signal)
			if err == nil && problem != nil {
				return x.setAsideSignal(args, problem.Error())
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
	// One waiter per key: a key another run waits on fails this step,
	// which retry, catch and history see like any failure.
	if holder, err := x.it.rt.SignalKeyHolder(ctx, key); err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	} else if holder != "" && holder != x.rs.RunID {
		return x.handleError(ctx, env, newStepErr(TypeSignalKeyTaken,
			"signal key %q is taken: run %s waits on it, and a key has one waiter at a time; put the run id in the key (key: \"deploy:${ run.id }\") or catch %s", key, holder, TypeSignalKeyTaken))
	}
	var schema any
	if sch := args["schema"]; sch != nil {
		p, err := plain(sch)
		if err != nil {
			return x.handleError(ctx, env, newStepErr(TypeValidation, "argument \"schema\": %v", err))
		}
		schema = p
	}
	wrec, err := encodeMsgpack(&waitRecord{RunID: x.rs.RunID, Def: x.st.Def, Step: x.s.Index, Block: x.st.Block, Schema: schema})
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	if err := x.rs.Effects.Put(waitKey(key), wrec); err != nil {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "signal key %q: %v", key, err))
	}
	next := *x.st
	next.Phase, next.WaitKey, next.Started = phaseSignal, key, x.start.UnixMilli()
	timeout = x.capWait(&next, timeout)
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
