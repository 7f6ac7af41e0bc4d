package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// WaitSkipper is a Redriver that also skips the step an active run waits
// at (a timer, a signal; Redrive of an active run with an arg SkipsWait
// accepts): PrepareSkip turns the waiting step's payload into the input
// of the step that replaces it, with arg Redrive's, staging in eff what
// goes with it, or refuses with an error. Redrive of an active run with
// any other arg is refused as a redrive: the run has not ended.
type WaitSkipper interface {
	SkipsWait(arg []byte) bool
	PrepareSkip(ctx context.Context, runID string, payload, arg []byte, eff *Effects) ([]byte, error)
}

// skipWaiting is Redrive of an active run: its step must be scheduled
// (waiting), not running or due. One durable commit removes that job,
// enqueues step n+1 with PrepareSkip's payload, moves the step pointer,
// drops the job's signals/wait entry (only while it still names the job)
// and writes the runner's effects and record; it applies only while the
// run record, step pointer and cancel record are as read. The signal
// buffer is left alone: a later signal to the old key is buffered.
func (rt *Runtime) skipWaiting(ctx context.Context, runID string, ws WaitSkipper, arg []byte, record *queue.KVWrite) (SubmitOutcome, error) {
	recB, err := kvGet(ctx, rt.q, runKey(runID))
	if err != nil {
		return SubmitOutcome{}, err
	}
	ptrB, err := kvGet(ctx, rt.q, stepKey(runID))
	if err != nil {
		return SubmitOutcome{}, err
	}
	if recB == nil || ptrB == nil {
		return SubmitOutcome{}, fmt.Errorf("%w: run %s changed while it was being skipped; look at its status and try again", ErrNotRedrivable, runID)
	}
	rec, err := decodeRunRecord(recB)
	if err != nil {
		return SubmitOutcome{}, fmt.Errorf("run %s: %w", runID, err)
	}
	ptr, err := decodeStepPointer(ptrB)
	if err != nil {
		return SubmitOutcome{}, fmt.Errorf("run %s: %w", runID, err)
	}
	job, err := rt.q.GetJob(ctx, ptr.JobID)
	if errors.Is(err, queue.ErrNotFound) {
		return SubmitOutcome{}, fmt.Errorf("%w: run %s changed while it was being skipped; look at its status and try again", ErrNotRedrivable, runID)
	}
	if err != nil {
		return SubmitOutcome{}, fmt.Errorf("runtime: skip in run %s: job %s: %w", runID, ptr.JobID, err)
	}
	if job.State != queue.StateScheduled {
		return SubmitOutcome{}, notWaiting(runID, job.State)
	}
	cancel, err := kvGet(ctx, rt.q, cancelKey(runID))
	if err != nil {
		return SubmitOutcome{}, err
	}
	eff := newEffects()
	payload, err := ws.PrepareSkip(ctx, runID, job.Payload, arg, eff)
	if err != nil {
		return SubmitOutcome{}, err
	}
	sef, jobID, err := rt.replaceStep(runID, rec, ptr.Step, &job, payload)
	if err != nil {
		return SubmitOutcome{}, err
	}
	if key := job.Headers[headerSignalWait]; key != "" {
		sef.KVCompareDeletes = append(sef.KVCompareDeletes, queue.KVWrite{Key: sigWaitKey(key), Value: []byte(job.ID)})
	}
	puts, dels := eff.Staged()
	sef.KVPuts = append(sef.KVPuts, puts...)
	sef.KVDeletes = append(sef.KVDeletes, dels...)
	expect := []queue.KVWrite{{Key: runKey(runID), Value: recB}, {Key: stepKey(runID), Value: ptrB}, {Key: cancelKey(runID), Value: cancel}}
	if record != nil {
		sef.KVPuts = append(sef.KVPuts, *record)
		expect = append(expect, queue.KVWrite{Key: record.Key})
	}
	st, ok, err := rt.q.RemoveWaiting(ctx, ptr.JobID, sef, expect)
	if err != nil {
		return SubmitOutcome{}, fmt.Errorf("skip in run %s: %w", runID, err)
	}
	if !ok {
		if st != queue.StateScheduled && st != "" {
			return SubmitOutcome{}, notWaiting(runID, st)
		}
		if record != nil {
			if b, err := kvGet(ctx, rt.q, record.Key); err == nil && b != nil {
				return SubmitOutcome{}, fmt.Errorf("skip in run %s: %w: %s", runID, ErrRecordExists, record.Key)
			}
		}
		return SubmitOutcome{}, fmt.Errorf("%w: run %s changed while it was being skipped; look at its status and try again", ErrNotRedrivable, runID)
	}
	rt.pending.add(runID, &totalsRecord{Puts: sef.WALShare()})
	return SubmitOutcome{RunID: runID, JobID: jobID, NewlySubmitted: true}, nil
}

// notWaiting refuses a skip in an active run whose step is in state st.
func notWaiting(runID string, st queue.State) error {
	what := "is due to run"
	if st == queue.StateClaimed {
		what = "is running"
	}
	return fmt.Errorf("%w: run %s is active and its step %s; only a step the run waits at (sleep, wait_signal) can be skipped while it runs: try again when it waits, or when it has ended", ErrNotRedrivable, runID, what)
}
