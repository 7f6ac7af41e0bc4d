package interpreter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// Handlers. When the run's steps end, the run does not end at once if
// the workflow has on_error (for a failure, a run.timeout or a cancel)
// or finally (after every end): the run goes on, in the same run, with
// the handler block's steps, carrying how it was to end (state.End), and
// ends that way once the last handler block ended. Handler steps are
// ordinary steps: each commits like any other, a crash resumes them where
// they were, and what they do is in the history. A handler block that
// fails (a step's error no catch handles, a fail step, its own time
// running out) is recorded and ends the block; on_error's failure does
// not keep finally from running; neither changes how the run ends: the
// original outcome and error stay, the handler failures are appended to
// the end's text. A handler's succeed ends its block; its value is
// recorded, not the run's result.
//
// A cancel reaches a run with handlers through the runtime's hand-over
// (runtime.RunSpec.CancelHandlers): its deliveries then say
// Step.Cancelled, the first one records the step it discarded as
// cancelled and enters on_error; a cancel while the handlers run (the
// runtime's second cancel, or a first one while the handlers of a failure
// or a success run) ends the run at once, cancelled, without entering a
// handler again.

// HandlerTimeout bounds each handler block (on_error, finally), from its
// first step: the run's own deadline does not apply to its handlers, which
// run after it. Past it the block ends as failed with run.timeout.
const HandlerTimeout = 15 * time.Minute

// How a run ends, as run.outcome reads it in on_error and finally.
const (
	endFailed    = "failed"
	endTimedOut  = "timed_out"
	endCancelled = "cancelled"
	endSucceeded = "succeeded"
)

// runEnd is how the run ends once its handlers have run.
type runEnd struct {
	Outcome string         `msgpack:"o"`
	Error   *dsl.ErrorInfo `msgpack:"e,omitempty"`
	// Reason is the end's text for the runtime (Fail's, CancelRun's).
	Reason string `msgpack:"r,omitempty"`
	// Result is a succeeded run's result (JSON).
	Result []byte `msgpack:"rs,omitempty"`
	// Failed lists the handler blocks that failed and why.
	Failed []string `msgpack:"f,omitempty"`
	// Resume is the state at the step the run failed or was cancelled
	// at, which a redrive resumes from (runtime.Runtime.Redrive): after
	// handlers, or in a delivery that ran several steps, it is not the
	// ending delivery's input. Nil keeps that input: a run whose initial
	// variables failed evaluates them again.
	Resume []byte `msgpack:"rz,omitempty"`
}

// hasHandlers reports whether wf has on_error or finally steps: its runs
// are submitted with runtime.RunSpec.CancelHandlers.
func hasHandlers(wf *dsl.Workflow) bool {
	return wf.OnError != nil && len(wf.OnError.Steps) > 0 || wf.Finally != nil && len(wf.Finally.Steps) > 0
}

// endRun ends the block the current step is in as end says: the run's
// steps (then the handlers start, or the run ends) or a handler block
// (then the next handler starts, or the run ends as it was to end).
func (x *exec) endRun(end *runEnd) (runtime.StepOutcome, error) {
	st := x.st
	switch {
	case st.End != nil:
		orig := *st.End
		if end.Outcome != endSucceeded {
			orig.Failed = append(slices.Clone(orig.Failed), st.Block+": "+end.Reason)
		}
		end = &orig
	case st.Block != "":
		// A block of a parallel or map step, run as a child run: its end
		// is its parent's to handle.
		return endOutcome(end)
	}
	if blk := x.nextHandler(end); blk != nil {
		return x.enterHandler(blk, end)
	}
	return endOutcome(end)
}

// nextHandler is the handler block to run after the current block for
// end, or nil.
func (x *exec) nextHandler(end *runEnd) *dsl.Block {
	after := ""
	if x.st.End != nil {
		after = x.st.Block
	}
	if after == "" && end.Outcome != endSucceeded && x.wf.OnError != nil && len(x.wf.OnError.Steps) > 0 {
		return x.wf.OnError
	}
	if after != "finally" && x.wf.Finally != nil && len(x.wf.Finally.Steps) > 0 {
		return x.wf.Finally
	}
	return nil
}

// enterHandler moves the run to the first step of handler block blk, to
// end as end says afterwards.
func (x *exec) enterHandler(blk *dsl.Block, end *runEnd) (runtime.StepOutcome, error) {
	next := *x.moveTo(0, "")
	next.Block = blk.Path
	next.End = end
	next.HandlerDeadline = x.it.now().Add(HandlerTimeout).UnixMilli()
	x.next = &next
	return runtime.StepOutcome{}, nil
}

// endOutcome is the runtime's end of a run that ends as end says.
func endOutcome(end *runEnd) (runtime.StepOutcome, error) {
	reason := end.Reason
	if len(end.Failed) > 0 {
		reason += " (handler failed: " + strings.Join(end.Failed, "; ") + ")"
	}
	var out runtime.StepOutcome
	switch end.Outcome {
	case endSucceeded:
		return runtime.Succeed(end.Result), nil
	case endCancelled:
		out = runtime.CancelRun(reason)
	default:
		out = runtime.Fail(reason)
	}
	out.Payload = end.Resume
	return out, nil
}

// failedEnd ends the block the current step is in (endRun): the step
// failed with info.
func (x *exec) failedEnd(info dsl.ErrorInfo, reason string) (runtime.StepOutcome, error) {
	info.Step = x.hist.Step
	outcome := endFailed
	if info.Type == TypeRunTimeout && x.st.End == nil {
		outcome = endTimedOut
	}
	end := &runEnd{Outcome: outcome, Error: &info, Reason: reason}
	if x.hist.Kind != "vars" {
		if err := x.keepResume(end); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
	}
	return x.endRun(end)
}

// keepResume records in end the state the current step runs in.
func (x *exec) keepResume(end *runEnd) error {
	b, err := x.st.encode()
	if err != nil {
		return err
	}
	end.Resume = b
	return nil
}

// handlerEnv lets a handler step read the run's error and outcome.
func (x *exec) handlerEnv(env *dsl.Env) {
	if end := x.st.End; end != nil {
		env.Run.Outcome = end.Outcome
		if end.Error != nil {
			e := *end.Error
			env.Error = &e
		}
	}
}

// cancelled handles a delivery of a cancelled run (Step.Cancelled):
// handled is false when its handlers for this cancel already run, so the
// step runs.
func (x *exec) cancelled(ctx context.Context) (out runtime.StepOutcome, handled bool, err error) {
	st := x.st
	if st.End != nil && st.End.Outcome == endCancelled {
		return runtime.StepOutcome{}, false, nil
	}
	if err := x.abandonWait(ctx); err != nil {
		return runtime.StepOutcome{}, true, err
	}
	info := dsl.ErrorInfo{Type: TypeCancelled, Message: "the run was cancelled"}
	if err := x.finish(OutcomeCancelled, "", &info); err != nil {
		return runtime.StepOutcome{}, true, runtime.Permanent(err)
	}
	if st.End != nil {
		// Its handlers for another end run: they are not entered again.
		return runtime.CancelRun(fmt.Sprintf("cancelled while its %s handler ran (the run had %s: %s)", st.Block, st.End.Outcome, st.End.Reason)), true, nil
	}
	info.Step = x.s.ID
	end := &runEnd{Outcome: endCancelled, Error: &info, Reason: "cancelled"}
	if err := x.keepResume(end); err != nil {
		return runtime.StepOutcome{}, true, runtime.Permanent(err)
	}
	out, err = x.endRun(end)
	return out, true, err
}

// abandonWait gives up the wait the current step is in, if any: its wait
// record goes with the settlement, its child run is cancelled.
func (x *exec) abandonWait(ctx context.Context) error {
	switch x.st.Phase {
	case phaseSignal:
		if x.st.WaitKey != "" {
			if err := x.rs.Effects.Delete(waitKey(x.st.WaitKey)); err != nil {
				return runtime.Permanent(err)
			}
		}
	case phaseCall:
		if x.st.Child != "" {
			if _, err := x.it.rt.Cancel(context.WithoutCancel(ctx), x.st.Child); err != nil {
				return runtime.Transient(err)
			}
		}
	}
	return nil
}
