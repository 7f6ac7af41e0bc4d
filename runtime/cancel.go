package runtime

import (
	"context"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Cancel terminates an active run as Cancelled and reports whether it did
// (or, for a running step, will). It works for any run in the store, not
// only runs this process submitted:
//
//   - The request is first recorded durably (workflow/cancel/<run>), so a
//     step redelivered after a crash sees it and does not run.
//   - A pending or scheduled step is removed and the run terminates in
//     that commit, notification included, before Cancel returns.
//   - A running step's context is cancelled (cause ErrRunCancelled); its
//     outcome and staged effects are discarded, retries are suppressed, and
//     the worker settles the run as Cancelled once the runner returns.
//     Status reports Cancelling meanwhile. This holds also for a step whose
//     runner already returned: its settlement checks the job's cancel
//     request in the committing transaction and yields to it.
//
// A run submitted with RunSpec.CancelHandlers is not ended by its first
// Cancel: its step is discarded as above, and the run goes on to a step
// marked Step.Cancelled, in which the runner runs its handlers and then
// ends the run. A Cancel while those run ends the run as above.
//
// It returns false when the run is unknown or already terminated.
func (rt *Runtime) Cancel(ctx context.Context, runID string) (bool, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return false, err
	}
	rec, err := loadRun(ctx, rt.q, runID)
	if err != nil || rec == nil {
		return false, err
	}
	if rec.CancelHandlers {
		// A first cancel goes to the run's handlers (cancelhandlers.go).
		if cancelled, handled, err := rt.cancelToHandlers(ctx, runID, rec); handled || err != nil {
			return cancelled, err
		}
	}
	if err := rt.q.KVPut(ctx, cancelKey(runID), []byte(rec.Nonce)); err != nil {
		return false, fmt.Errorf("runtime: cancel run %s: record request: %w", runID, err)
	}
	lastJob := ""
	for {
		cur, err := loadRun(ctx, rt.q, runID)
		if err != nil {
			return false, err
		}
		if cur == nil || cur.Nonce != rec.Nonce {
			// Terminated meanwhile, by this request or otherwise.
			rt.compareAndDelete(ctx, cancelKey(runID), []byte(rec.Nonce))
			return rt.endedCancelled(ctx, runID, rec.Nonce)
		}
		ptr, err := loadPointer(ctx, rt.q, runID)
		if err != nil {
			return false, err
		}
		if ptr == nil {
			// The record and the pointer are read apart: a run that
			// ended between the two reads has neither now. Only a run
			// still there without its pointer is corrupt.
			again, err := loadRun(ctx, rt.q, runID)
			if err != nil {
				return false, err
			}
			if again == nil || again.Nonce != rec.Nonce {
				continue
			}
			return false, fmt.Errorf("runtime: cancel run %s: %w: active run without a step pointer", runID, ErrCorruptRecord)
		}
		if ptr.JobID == lastJob {
			// The pointer did not move although its job is finished: the
			// queue dead-lettered it. Reconcile ends the run as Failed.
			if _, err := rt.Reconcile(ctx); err != nil {
				return false, err
			}
			return rt.endedCancelled(ctx, runID, rec.Nonce)
		}
		sef, err := rt.terminalEffects(runID, cur, ptr.Step, runstate.Cancelled, nil, "cancelled")
		if err != nil {
			return false, err
		}
		if job, err := rt.q.GetJob(ctx, ptr.JobID); err == nil {
			if k := job.Headers[headerSignalDelivered]; k != "" {
				sef.KVDeletes = append(sef.KVDeletes, deliveredKey(runID, ptr.Step))
			}
			if err := rt.keepResume(sef, runID, cur, ptr.Step, runstate.Cancelled, job.Payload); err != nil {
				return false, err
			}
		}
		taken, err := rt.endTotals(ctx, sef, runID, cur.Nonce)
		if err != nil {
			return false, err
		}
		res, err := rt.q.Cancel(ctx, ptr.JobID, sef)
		if err != nil || res != queue.CancelRemoved {
			// Not ended here: the step that runs settles the totals.
			rt.putBack(runID, taken)
		}
		if err != nil {
			return false, fmt.Errorf("runtime: cancel run %s: job %s: %w", runID, ptr.JobID, err)
		}
		switch res {
		case queue.CancelRemoved, queue.CancelRequested:
			return true, nil
		}
		// The job finished under us: the run moved to its next step or
		// terminated. Look again.
		lastJob = ptr.JobID
	}
}

// endedCancelled reports whether the retained result of runID's incarnation
// nonce says Cancelled.
func (rt *Runtime) endedCancelled(ctx context.Context, runID, nonce string) (bool, error) {
	b, err := kvGet(ctx, rt.q, resultKey(runID))
	if err != nil {
		return false, err
	}
	if b == nil {
		e, _, err := rt.insp.sealedRun(ctx, runID)
		if err != nil || e == nil {
			return false, err
		}
		return e.Nonce == nonce && runstate.TerminalStatus(e.Status) == runstate.Cancelled, nil
	}
	r, err := decodeResultRecord(b)
	if err != nil {
		return false, err
	}
	return r.Nonce == nonce && r.Status == runstate.Cancelled, nil
}
