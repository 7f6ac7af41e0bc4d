package interpreter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// childResult is the signal a child run's termination sends its parent.
type childResult struct {
	Status  string `msgpack:"s"`
	Result  []byte `msgpack:"r,omitempty"` // JSON
	Omitted bool   `msgpack:"ro,omitempty"`
	Error   string `msgpack:"e,omitempty"`
	// Type and Message are a failed branch's or map item's error, as its
	// failing step recorded it (blockFailure).
	Type    string `msgpack:"t,omitempty"`
	Message string `msgpack:"m,omitempty"`
}

// callPrefix starts the key a call step waits on for its child's end.
const callPrefix = "tqw.call:"

func callKey(childID string) string { return callPrefix + childID }

// call runs another workflow as a child run and resumes with its result.
func (x *exec) call(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	if x.st.Phase == phaseCall {
		return x.callEnded(ctx, env)
	}
	var child *pin
	if x.st.Pin != nil {
		child = x.st.Pin.Calls[x.s.ID]
	}
	if child == nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("%w: run %s has no pinned definition for call step %q", ErrCorruptState, x.rs.RunID, x.s.ID))
	}
	cd, err := x.it.definition(ctx, child.Hash)
	if err != nil {
		if errors.Is(err, ErrDefinitionMissing) || errors.Is(err, ErrCorruptState) {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	v, err := x.s.Call.Input.Eval(env)
	if err != nil {
		return x.handleError(ctx, env, exprErr(err))
	}
	input, err := plain(v)
	if err != nil {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "call input: %v", err))
	}
	if err := validateInput(cd.wf, input); err != nil {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "child workflow %s: %v", cd.wf.Name, err))
	}
	childID := childRunID(x.rs.RunID, x.s.ID, x.rs.Number)
	key := callKey(childID)
	// A redelivery of this step must not start a child that already ran:
	// the child's end is then already signalled (buffered) to key.
	if _, err := x.it.rt.Status(ctx, childID); errors.Is(err, runtime.ErrRunNotFound) {
		cst := &state{V: stateVersion, Def: child.Hash, Input: input}
		if len(child.Calls) > 0 {
			cst.Pin = child
		}
		payload, err := cst.encode()
		if err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		// The child index lands with the child's submission, so a parent
		// ending at any point after it finds the child to cancel.
		spec := runtime.RunSpec{RunID: childID, Input: payload,
			Headers:        map[string]string{headerParent: key, HeaderWorkflow: cd.wf.Name, HeaderDefinition: child.Hash},
			Labels:         map[string]string{LabelWorkflow: cd.wf.Name},
			KVWrites:       map[string][]byte{childIndexKey(x.rs.RunID, childID): {}},
			CancelHandlers: hasHandlers(cd.wf)}
		if err := addPredictedWaits(&spec, cd.wf); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		// A child carries its own workflow's labels, never its parent's:
		// a listing by a label finds the runs submitted with it.
		if err := addDeclaredLabels(&spec, cd.wf, input); err != nil {
			return x.handleError(ctx, env, newStepErr(TypeValidation, "child workflow %s: %v", cd.wf.Name, err))
		}
		// The child's run spans are children of this step's.
		stampTrace(ctx, &spec)
		x.it.noteDirty(x.rs.RunID)
		if _, err := x.it.rt.Submit(ctx, spec); err != nil {
			return runtime.StepOutcome{}, runtime.Transient(fmt.Errorf("start child run %s: %w", childID, err))
		}
	} else if err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	timeout := x.s.Timeout
	if timeout <= 0 {
		timeout = noTimeout
	}
	next := *x.st
	next.Phase, next.WaitKey, next.Child, next.Started = phaseCall, key, childID, x.start.UnixMilli()
	timeout = x.capWait(&next, timeout)
	payload, err := next.encode()
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	x.hist.WaitKey = key
	if x.s.Timeout > 0 || next.Capped {
		x.hist.Until = x.it.now().Add(timeout).UnixMilli()
	}
	if err := x.finish(OutcomeWaiting, "", nil); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueOnSignal(payload, key, timeout), nil
}

// callEnded resumes a call step once its child ended or timed out.
func (x *exec) callEnded(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	if x.rs.Signal == nil {
		if _, err := x.it.rt.Cancel(ctx, x.st.Child); err != nil {
			x.it.log.Warn("cancelling a timed-out child run failed", "run", x.rs.RunID, "child", x.st.Child, "err", err)
		}
		return x.handleError(ctx, env, newStepErr(TypeTimeout, "child run %s did not finish within %s", x.st.Child, x.s.Timeout))
	}
	var res childResult
	if err := decodeMsgpack(x.rs.Signal, &res); err != nil {
		return x.handleError(ctx, env, newStepErr(TypeCallFailed, "child run %s reported an unreadable result: %v", x.st.Child, err))
	}
	switch res.Status {
	case runstate.Succeeded.String():
		if res.Omitted {
			return x.handleError(ctx, env, newStepErr(TypeCallFailed, "child run %s succeeded but its result is over %d bytes; return less", x.st.Child, runtime.MaxRetainedResult))
		}
		var out any
		if len(res.Result) > 0 {
			v, err := DecodeJSON(res.Result)
			if err != nil {
				return x.handleError(ctx, env, newStepErr(TypeCallFailed, "child run %s: result is not JSON: %v", x.st.Child, err))
			}
			out = v
		}
		return x.finishAction(ctx, env, out)
	case runstate.Cancelled.String():
		return x.handleError(ctx, env, newStepErr(TypeCallFailed, "child run %s was cancelled: %s", x.st.Child, res.Error))
	}
	return x.handleError(ctx, env, newStepErr(TypeCallFailed, "child run %s failed: %s", x.st.Child, res.Error))
}

// Observes reports the terminations the interpreter acts on: child runs
// (their parent waits), runs that did not succeed (they may leave a child
// running), runs with predicted waits (their wait records go), and every
// run when Options.Retention is set (the notification writes its
// retention marker) unless the run is known to need none (knownClean). A
// succeeded run with none of these costs no notification: a Watch learns
// of its end through RunEnded.
func (it *Interpreter) Observes(o *runstate.Outcome) bool {
	return o.Headers[headerParent] != "" || o.Headers[headerSignalKeys] != "" || o.Status != runstate.Succeeded ||
		(it.retention > 0 && !it.knownClean(o))
}

// RunEnded wakes the watchers of a run whose end the runtime committed in
// this process (runtime.RunEndObserver). Ends it misses (a cancellation
// applied with the Cancel call's stored effects) did not succeed, so
// Observes sends them to OnTermination, which wakes the watchers too.
func (it *Interpreter) RunEnded(o *runstate.Outcome) {
	it.forgetClean(o.RunID)
	it.wake(o)
}

// wake sends o to the run's watchers, once: they are dropped as they
// are woken.
func (it *Interpreter) wake(o *runstate.Outcome) {
	it.endRunSpan(o)
	it.watchMu.Lock()
	ws := it.watchers[o.RunID]
	delete(it.watchers, o.RunID)
	it.watchMu.Unlock()
	for _, ch := range ws {
		ch <- o
	}
}

// OnTermination reacts to a run's end: it cancels the run's children that
// are still running, signals a child's parent, drops the run's stale wait
// entries and stages its retention marker (both commit with the
// notification's acknowledgement), then wakes watchers. Every part is
// idempotent, as a notification is delivered at least once.
func (it *Interpreter) OnTermination(ctx context.Context, o *runstate.Outcome, eff *runtime.TerminalEffects) error {
	it.forgetClean(o.RunID)
	err := it.onTermination(ctx, o, eff)
	if err != nil {
		it.log.Warn("handling a run's end failed; the runtime retries it", "run", o.RunID, "err", err)
	}
	return err
}

func (it *Interpreter) onTermination(ctx context.Context, o *runstate.Outcome, eff *runtime.TerminalEffects) error {
	if err := it.cancelChildren(ctx, o.RunID); err != nil {
		return err
	}
	if key := o.Headers[headerParent]; key != "" {
		res := childResult{Status: o.Status.String(), Result: o.Result, Omitted: o.ResultOmitted, Error: o.Error}
		if o.Headers[headerJoin] != "" && o.Status == runstate.Failed {
			if err := it.readBlockFailure(ctx, o.RunID, &res); err != nil {
				return err
			}
		}
		b, err := encodeMsgpack(&res)
		if err != nil {
			return runtime.Permanent(err)
		}
		if jk := o.Headers[headerJoin]; jk != "" {
			// A parallel branch or map item: its end is durable under the
			// parent's key before the doorbell rings (join.go).
			if err := it.q.KVPut(ctx, jk, b); err != nil {
				return fmt.Errorf("interpreter: record end of child run %s: %w", o.RunID, err)
			}
			if b, err = encodeMsgpack(&childResult{Status: o.Status.String()}); err != nil {
				return runtime.Permanent(err)
			}
		}
		if _, err := it.rt.Signal(ctx, key, b); err != nil {
			return fmt.Errorf("interpreter: report end of child run %s: %w", o.RunID, err)
		}
	}
	if eff != nil {
		waits, err := it.staleWaits(ctx, o.RunID, predictedKeys(o.Headers)...)
		if err != nil {
			return err
		}
		for _, k := range waits {
			if err := eff.Delete(k); err != nil {
				return runtime.Permanent(err)
			}
		}
		marker, err := it.needsExpiryMarker(ctx, o)
		if err != nil {
			return err
		}
		if marker {
			// The marker carries the run key, so the sweep also removes
			// the rerun claim of a run whose command never reported it.
			if err := eff.Put(expireKey(o.FinishedAt, o.RunID), []byte(o.Headers[headerRunKey])); err != nil {
				return runtime.Permanent(err)
			}
		}
	}
	if it.ended != nil && o.Status != runstate.Succeeded {
		it.ended(o)
	}
	it.wake(o)
	return nil
}

// Watch returns a channel that receives runID's outcome when it
// terminates while this process works the store, and a function that stops
// watching. Register before submitting, so the termination cannot be missed.
func (it *Interpreter) Watch(runID string) (<-chan *runstate.Outcome, func()) {
	ch := make(chan *runstate.Outcome, 1)
	it.watchMu.Lock()
	it.watchers[runID] = append(it.watchers[runID], ch)
	it.watchMu.Unlock()
	return ch, func() {
		it.watchMu.Lock()
		defer it.watchMu.Unlock()
		ws := it.watchers[runID]
		for i, w := range ws {
			if w == ch {
				it.watchers[runID] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(it.watchers[runID]) == 0 {
			delete(it.watchers, runID)
		}
	}
}

// validateInput checks a plain input against wf's input schema.
func validateInput(wf *dsl.Workflow, input any) error {
	v, err := jsonRoundTrip(input)
	if err != nil {
		return err
	}
	return wf.ValidateInput(v)
}

// Submit validates input against w's input schema, pins w (and every
// workflow it calls) in the store and submits a run. An invalid input
// (errors.Is(err, dsl.ErrInputInvalid)) writes nothing. Submitting the same
// run id with the same definition and input again while the run is active
// is a no-op; the id of a finished run is refused with ErrRunIDReused until
// retention removed its result and records, so two runs never share a
// history.
func (it *Interpreter) Submit(ctx context.Context, w *Workflow, input any, runID string, opts ...SubmitOption) (runtime.SubmitOutcome, error) {
	ctx, span := it.startSubmitSpan(ctx, w)
	out, err := it.submit(ctx, w, input, runID, opts...)
	endSubmitSpan(span, out, err)
	return out, err
}

func (it *Interpreter) submit(ctx context.Context, w *Workflow, input any, runID string, opts ...SubmitOption) (runtime.SubmitOutcome, error) {
	spec, err := prepareRun(ctx, it.store, &it.pins, it.rt, it.q, w, input, runID, opts...)
	if err != nil {
		return runtime.SubmitOutcome{}, err
	}
	for _, wf := range w.all {
		it.cache(wf)
	}
	return it.rt.Submit(ctx, spec)
}
