package interpreter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime"
)

var _ runtime.WaitSkipper = (*Interpreter)(nil)

// SkipsWait implements runtime.WaitSkipper: arg asks to skip a step
// (Skip set, no new definition), not to continue an ended run.
func (it *Interpreter) SkipsWait(argBytes []byte) bool {
	var a redriveArg
	return len(argBytes) > 0 && decodeMsgpack(argBytes, &a) == nil && a.Skip != "" && a.Def == ""
}

// PrepareSkip implements runtime.WaitSkipper: a redrive with Skip of a
// run that waits at a sleep or wait_signal step. The step must be the
// one named; it is replaced by the same step with its wait cleared and
// Skip set, so it records the given output (history: "skipped") and
// routes on, and the wait record of a wait_signal goes in the same
// commit. A redrive without Skip, a new definition, or a run at another
// step or not waiting is refused, nothing written.
func (it *Interpreter) PrepareSkip(ctx context.Context, runID string, payload, argBytes []byte, eff *runtime.Effects) ([]byte, error) {
	var a redriveArg
	if len(argBytes) > 0 {
		if err := decodeMsgpack(argBytes, &a); err != nil {
			return nil, fmt.Errorf("%w: run %s: the redrive's options: %w", runtime.ErrNotRedrivable, runID, err)
		}
	}
	if a.Skip == "" || a.Def != "" {
		return nil, fmt.Errorf("%w: run %s is active; only a failed or cancelled run can be redriven, and an active run's waiting step only skipped (without a new definition)",
			runtime.ErrNotRedrivable, runID)
	}
	st, err := decodeState(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: run %s: its state: %w", runtime.ErrNotRedrivable, runID, err)
	}
	d, err := it.definition(ctx, st.Def)
	if errors.Is(err, ErrDefinitionMissing) || errors.Is(err, ErrCorruptState) {
		return nil, fmt.Errorf("%w: run %s: %w", runtime.ErrNotRedrivable, runID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("skip in run %s: %w", runID, err)
	}
	at, err := st.current(d.wf)
	if err != nil {
		return nil, fmt.Errorf("%w: run %s: %w", runtime.ErrNotRedrivable, runID, err)
	}
	if st.Phase != phaseSlept && st.Phase != phaseSignal {
		return nil, fmt.Errorf("%w: run %s is active at step %q, which is not waiting (sleep, wait_signal): only a step a run waits at can be skipped while it runs",
			runtime.ErrNotRedrivable, runID, at.ID)
	}
	if a.Skip != at.ID {
		return nil, fmt.Errorf("%w: run %s waits at step %q, not %q: only the step a run waits at can be skipped",
			runtime.ErrNotRedrivable, runID, at.ID, a.Skip)
	}
	if st.Phase == phaseSignal {
		if err := eff.Delete(waitKey(st.WaitKey)); err != nil {
			return nil, err
		}
	}
	st.resetWait()
	st.Attempt = 1
	st.Skip = &skipRecord{Output: a.Output}
	return st.encode()
}
