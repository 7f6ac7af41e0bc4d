package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Cancel handlers. A run submitted with RunSpec.CancelHandlers is not
// ended by its first Cancel: the step it is at is discarded as for any
// cancel, and in the same commit the run moves on to a new step (the next
// number, the discarded step's payload) whose deliveries say
// Step.Cancelled, so the runner runs its handlers; the run ends when the
// runner ends it. The cancel record (workflow/cancel/<run>) says where the
// run is, by its value:
//
//   - the run's nonce: cancelled, end the run (any run; a second Cancel
//     of a run whose handlers run);
//   - handlersPending + nonce: a first Cancel, to hand to the handlers; a
//     delivery that finds it (a crash came between the request and the
//     hand-over) hands over itself;
//   - handlersRunning + nonce: handed over; every later delivery of the
//     run carries Step.Cancelled.
//
// The hand-over is one commit (the discarded job's removal or its
// settlement, the new job, the moved step pointer and the record), so a
// crash on either side of it leaves the run in exactly one of the two
// states. The run's end deletes the record with the others.
const (
	handlersPending = "handlers-pending:"
	handlersRunning = "handlers-running:"
)

// cancelToHandlers hands a first Cancel of rec's run to its handlers.
// handled is false when the handlers already run: the caller ends the run
// then.
func (rt *Runtime) cancelToHandlers(ctx context.Context, runID string, rec *runRecord) (cancelled, handled bool, err error) {
	cur, err := kvGet(ctx, rt.q, cancelKey(runID))
	if err != nil {
		return false, true, err
	}
	switch string(cur) {
	case handlersRunning + rec.Nonce, rec.Nonce:
		return false, false, nil
	}
	pending := []byte(handlersPending + rec.Nonce)
	if err := rt.q.KVPut(ctx, cancelKey(runID), pending); err != nil {
		return false, true, fmt.Errorf("runtime: cancel run %s: record request: %w", runID, err)
	}
	lastJob := ""
	for {
		now, err := loadRun(ctx, rt.q, runID)
		if err != nil {
			return false, true, err
		}
		if now == nil || now.Nonce != rec.Nonce {
			// Terminated meanwhile (by its steps, or a cancel that ended it).
			rt.compareAndDelete(ctx, cancelKey(runID), pending)
			ok, err := rt.endedCancelled(ctx, runID, rec.Nonce)
			return ok, true, err
		}
		v, err := kvGet(ctx, rt.q, cancelKey(runID))
		if err != nil {
			return false, true, err
		}
		switch string(v) {
		case handlersRunning + rec.Nonce:
			return true, true, nil // a delivery handed it over
		case rec.Nonce:
			return false, false, nil // a concurrent Cancel ends the run
		}
		ptr, err := loadPointer(ctx, rt.q, runID)
		if err != nil {
			return false, true, err
		}
		if ptr == nil || ptr.JobID == lastJob {
			// Read apart from the record, or dead-lettered: the plain path
			// sorts both out.
			return false, false, nil
		}
		job, err := rt.q.GetJob(ctx, ptr.JobID)
		if errors.Is(err, queue.ErrNotFound) {
			lastJob = ptr.JobID // settled under us: look again
			continue
		}
		if err != nil {
			return false, true, fmt.Errorf("runtime: cancel run %s: job %s: %w", runID, ptr.JobID, err)
		}
		sef, err := rt.handOver(runID, rec, ptr.Step, &job)
		if err != nil {
			return false, true, err
		}
		res, err := rt.q.Cancel(ctx, ptr.JobID, sef)
		if err != nil {
			return false, true, fmt.Errorf("runtime: cancel run %s: job %s: %w", runID, ptr.JobID, err)
		}
		switch res {
		case queue.CancelRemoved, queue.CancelRequested:
			// Removed: handed over in that commit. Requested: the step's
			// worker hands over when it settles, or the queue does with
			// these effects when the step's attempt is nacked.
			return true, true, nil
		}
		lastJob = ptr.JobID
	}
}

// handOver returns the effects that move rec's run from step n (job, being
// discarded) to step n+1 with job's payload, with its handlers to run.
func (rt *Runtime) handOver(runID string, rec *runRecord, n int, job *queue.Job) (*queue.SettlementEffects, error) {
	sef, _, err := rt.replaceStep(runID, rec, n, job, job.Payload)
	if err != nil {
		return nil, err
	}
	sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: cancelKey(runID), Value: []byte(handlersRunning + rec.Nonce)})
	return sef, nil
}

// replaceStep returns the effects that move rec's run from step n (job,
// being discarded) to step n+1 with payload: the moved step pointer, the
// new step job (its id returned) and the drop of a signal job consumed.
func (rt *Runtime) replaceStep(runID string, rec *runRecord, n int, job *queue.Job, payload []byte) (*queue.SettlementEffects, string, error) {
	next, jobID := n+1, rt.newID()
	ptr, err := encodeRecord(&stepPointer{Nonce: rec.Nonce, Step: next, JobID: jobID})
	if err != nil {
		return nil, "", err
	}
	sef := &queue.SettlementEffects{KVPuts: []queue.KVWrite{{Key: stepKey(runID), Value: ptr}}}
	if job.Headers[headerSignalDelivered] != "" {
		sef.KVDeletes = append(sef.KVDeletes, deliveredKey(runID, n))
	}
	sef.Enqueue = append(sef.Enqueue, queue.NewJob{Queue: rt.cfg.queueName, Payload: payload, Options: queue.EnqueueOptions{
		ID: jobID, DedupKey: dedupKey(runID, next), MaxAttempts: rt.cfg.maxAttempts,
		Headers: stepHeaders(rec.Headers, runID, rec.Nonce, next),
	}})
	return sef, jobID, nil
}

// cancelMark classifies the cancel record value v of the delivery's run:
// whether the run is to end (stop), to be handed to its handlers
// (handOver), or runs them (running).
func (d *delivery) cancelMark(v []byte) (stop, handOver, running bool) {
	switch string(v) {
	case d.rec.Nonce:
		return true, false, false
	case handlersPending + d.rec.Nonce:
		return false, d.rec.CancelHandlers, false
	case handlersRunning + d.rec.Nonce:
		return false, false, d.rec.CancelHandlers
	}
	return false, false, false
}

// handOverCancel settles the delivery's step as discarded, handing its run
// to its handlers (a first Cancel of a run with CancelHandlers); ok is
// false when the run's cancel record asks it to end instead.
func (d *delivery) handOverCancel(ctx context.Context) (ok bool, err error) {
	if !d.rec.CancelHandlers {
		return false, nil
	}
	v, err := kvGet(ctx, d.rt.q, cancelKey(d.runID))
	if err != nil {
		return true, err
	}
	if _, hand, _ := d.cancelMark(v); !hand {
		return false, nil
	}
	sef, err := d.rt.handOver(d.runID, d.rec, d.n, &d.c.Job)
	if err != nil {
		return true, err
	}
	sef.KVDeletes = append(sef.KVDeletes, d.sigDeletes...)
	d.rt.log.Debug("cancel handed to the run's handlers", "run", d.runID, "step", d.n)
	err = d.rt.q.Ack(ctx, d.c, sef)
	// The delivery's requests, and the hand-over's share of its WAL PUT,
	// count with the run's next settlement.
	d.unsettled(nil)
	if err == nil {
		d.rt.pending.add(d.runID, &totalsRecord{Puts: sef.WALShare()})
	}
	return true, err
}
