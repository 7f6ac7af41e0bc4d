package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

func timeFromMs(ms int64) time.Time { return time.UnixMilli(ms) }

// terminalEffects returns the writes that terminate a run: the run record,
// step pointer and cancel request go, the result record and retention
// markers come, and the notification job is enqueued when the hook observes
// the outcome. They commit with whatever settlement ends the run.
func (rt *Runtime) terminalEffects(runID string, rec *runRecord, n int, status runstate.TerminalStatus, result []byte, errMsg string) (*queue.SettlementEffects, error) {
	now := rt.clock.Now()
	out := &runstate.Outcome{RunID: runID, Status: status, Result: result, Error: errMsg, Step: n,
		Headers: rec.Headers, Labels: rec.Labels, SubmittedAt: timeFromMs(rec.SubmittedMs), FinishedAt: now}
	if len(result) > MaxRetainedResult {
		out.Result, out.ResultOmitted = nil, true
	}
	sef := &queue.SettlementEffects{KVDeletes: []string{runKey(runID), stepKey(runID), cancelKey(runID)}}
	if len(rt.endObservers) > 0 {
		sef.OnDurable = func() { rt.reportEnd(out) }
	}
	if rt.cfg.resultRetention > 0 {
		b, err := encodeRecord(&resultRecord{Nonce: rec.Nonce, Status: status, Result: out.Result, ResultOmitted: out.ResultOmitted,
			Error: errMsg, Step: n, SubmittedMs: rec.SubmittedMs, FinishedMs: now.UnixMilli(), Headers: rec.Headers, Labels: rec.Labels})
		if err != nil {
			return nil, err
		}
		sef.KVPuts = append(sef.KVPuts,
			queue.KVWrite{Key: resultKey(runID), Value: b},
			queue.KVWrite{Key: timedKey(kvExpiry, now, runID), Value: []byte(rec.Nonce)})
	} else {
		// No result is kept, so nothing lists the run any more.
		sef.KVCompareDeletes = append(sef.KVCompareDeletes, labelCompareDeletes(rec.Labels, runID, rec.Nonce)...)
	}
	if rt.cfg.memoRetention > 0 {
		sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: timedKey(kvTerminals, now, runID), Value: []byte(rec.Nonce)})
	}
	observed := rt.observes(out)
	if !observed && rt.sealing() {
		// Nothing else handles this end: the sealer may take the run.
		sef.KVPuts = append(sef.KVPuts, rt.sealMarker(runID, now))
		sef.OnDurable = chainDurable(sef.OnDurable, rt.sealNudge)
	}
	if observed {
		b, err := encodeRecord(out)
		if err != nil {
			return nil, err
		}
		sef.Enqueue = append(sef.Enqueue, queue.NewJob{Queue: rt.cfg.notifyQueue, Payload: b, Options: queue.EnqueueOptions{
			DedupKey: "notify:" + runID + ":" + rec.Nonce,
			Headers:  map[string]string{headerRunID: runID},
		}})
	}
	return sef, nil
}

// handleNotification runs the terminal hook for one notification job and
// settles it with the hook's effects.
func (rt *Runtime) handleNotification(ctx context.Context, c *queue.Claim, _ func(), _ func() bool) *queue.Claim {
	sctx := context.WithoutCancel(ctx)
	var err error
	out, derr := decodeRunOutcome(c.Job.Payload)
	if derr != nil {
		out = &runstate.Outcome{RunID: c.Job.Headers[headerRunID]}
		err = rt.q.DeadLetter(sctx, c, derr.Error(), nil)
	} else {
		// The notification was claimable only once the terminating commit
		// that enqueued it was durable: the hook sees durable ends only.
		eff := newTerminalEffects()
		herr := rt.callHook(ctx, out, eff)
		switch {
		case herr == nil:
			sef := eff.settlement()
			taken := rt.pending.take(out.RunID)
			if w, ok := rt.finalTotals(sctx, out.RunID, taken); ok {
				if sef == nil {
					sef = &queue.SettlementEffects{}
				}
				sef.KVPuts = append(sef.KVPuts, w)
			}
			if rt.sealing() {
				// The end is handled: the sealer may take the run.
				if sef == nil {
					sef = &queue.SettlementEffects{}
				}
				sef.KVPuts = append(sef.KVPuts, rt.sealMarker(out.RunID, out.FinishedAt))
				sef.OnDurable = chainDurable(sef.OnDurable, rt.sealNudge)
			}
			if err = rt.q.Ack(sctx, c, sef); err != nil && taken != nil {
				rt.pending.add(out.RunID, taken)
			}
		case IsPermanent(herr):
			var sef *queue.SettlementEffects
			if rt.sealing() {
				// The hook gave up for good: the end is handled as well.
				sef = &queue.SettlementEffects{KVPuts: []queue.KVWrite{rt.sealMarker(out.RunID, out.FinishedAt)}, OnDurable: rt.sealNudge}
			}
			err = rt.q.DeadLetter(sctx, c, herr.Error(), sef)
		default:
			_, err = rt.q.Nack(sctx, c, herr.Error(), nil)
		}
	}
	if err != nil && !errors.Is(err, queue.ErrClaimLost) {
		rt.log.Error("settling a terminal notification failed; it is redelivered", "job", c.Job.ID, "run", out.RunID, "err", err)
	}
	return nil
}

// observes asks the hook whether it wants out; a panicking Observes counts
// as yes, so a termination is never silently dropped.
func (rt *Runtime) observes(out *runstate.Outcome) (yes bool) {
	defer func() {
		if r := recover(); r != nil {
			rt.log.Error("TerminalHook.Observes panicked; notifying anyway", "run", out.RunID, "panic", r)
			yes = true
		}
	}()
	return rt.cfg.hook.Observes(out)
}

func (rt *Runtime) callHook(ctx context.Context, out *runstate.Outcome, eff *TerminalEffects) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Transient(fmt.Errorf("terminal hook panicked: %v", r))
		}
	}()
	return rt.cfg.hook.OnTermination(ctx, out, eff)
}

// Reconcile terminates, as Failed with the job's last error, every run whose
// current step job the queue dead-lettered outside the runtime's own
// settlements (an expired lease past the attempt limit, crash recovery at
// open). The worker calls it at startup and whenever the step queue's dead
// count changes; it returns how many runs it terminated.
//
// Each run ends in one durable commit, like a settlement: the result
// record, the retention markers and the notification land with the
// removal of the run record and step pointer, guarded on both still being
// the ones read, so a crash or a concurrent Reconcile never notifies twice.
func (rt *Runtime) Reconcile(ctx context.Context) (int, error) {
	st, err := rt.q.Stats(ctx, rt.cfg.queueName)
	if err != nil {
		return 0, fmt.Errorf("runtime: reconcile: %w", err)
	}
	rt.deadMu.Lock()
	defer rt.deadMu.Unlock()
	n, after := 0, ""
	for {
		page, err := rt.q.DeadJobs(ctx, rt.cfg.queueName, after, 256)
		if err != nil {
			return n, fmt.Errorf("runtime: reconcile: list dead jobs: %w", err)
		}
		for i := range page {
			done, err := rt.reconcileJob(ctx, &page[i])
			if err != nil {
				return n, err
			}
			if done {
				n++
			}
		}
		if len(page) < 256 {
			break
		}
		after = page[len(page)-1].ID
	}
	rt.lastDead = st.Dead
	return n, nil
}

// reconcileJob terminates the run of a dead step job that is still the
// run's current step, in one commit.
func (rt *Runtime) reconcileJob(ctx context.Context, job *queue.Job) (bool, error) {
	runID := job.Headers[headerRunID]
	if runID == "" {
		return false, nil
	}
	recBytes, err := kvGet(ctx, rt.q, runKey(runID))
	if err != nil || recBytes == nil {
		return false, err
	}
	rec, err := decodeRunRecord(recBytes)
	if err != nil {
		return false, fmt.Errorf("run %s: %w", runID, err)
	}
	ptrBytes, err := kvGet(ctx, rt.q, stepKey(runID))
	if err != nil || ptrBytes == nil {
		return false, err
	}
	ptr, err := decodeStepPointer(ptrBytes)
	if err != nil {
		return false, fmt.Errorf("run %s: %w", runID, err)
	}
	if rec.Nonce != job.Headers[headerRunNonce] || ptr.JobID != job.ID {
		return false, nil
	}
	msg := job.LastError
	if msg == "" {
		msg = "step job dead-lettered by the queue"
	}
	sef, err := rt.terminalEffects(runID, rec, ptr.Step, runstate.Failed, nil, msg)
	if err != nil {
		return false, err
	}
	if err := rt.keepResume(sef, runID, rec, ptr.Step, runstate.Failed, job.Payload); err != nil {
		return false, err
	}
	if h := rt.beforeReconcileCommit; h != nil {
		h(runID)
	}
	taken, err := rt.endTotals(ctx, sef, runID, rec.Nonce)
	if err != nil {
		return false, err
	}
	// The guard is what the commit removes: a repeat applies nothing.
	ok, err := rt.q.ApplyEffects(ctx, sef, []queue.KVWrite{{Key: runKey(runID), Value: recBytes}, {Key: stepKey(runID), Value: ptrBytes}})
	if err != nil || !ok {
		rt.putBack(runID, taken)
	}
	if err != nil {
		return false, fmt.Errorf("runtime: reconcile run %s: %w", runID, err)
	}
	if !ok {
		return false, nil // ended or moved on since the reads above
	}
	rt.log.Warn("run failed: its step was dead-lettered by the queue", "run", runID, "step", ptr.Step, "job", job.ID, "err", msg)
	return true, nil
}

// reconcileLoop runs Reconcile at startup and whenever the dead count of
// the step queue changes.
func (rt *Runtime) reconcileLoop(ctx context.Context) {
	for {
		st, err := rt.q.Stats(ctx, rt.cfg.queueName)
		if err == nil {
			rt.deadMu.Lock()
			changed := st.Dead != rt.lastDead
			rt.deadMu.Unlock()
			if changed {
				if _, err := rt.Reconcile(ctx); err != nil && ctx.Err() == nil {
					rt.log.Error("reconcile failed", "err", err)
				}
			}
		} else if ctx.Err() == nil {
			rt.log.Warn("reading queue stats failed", "err", err)
		}
		if !rt.pause(ctx, rt.cfg.reconcileEvery) {
			return
		}
	}
}

// reportEnd tells the RunEndObservers of a run end that is durable; a
// panicking observer is logged, never allowed to break the settlement.
func (rt *Runtime) reportEnd(out *runstate.Outcome) {
	for _, o := range rt.endObservers {
		func() {
			defer func() {
				if r := recover(); r != nil {
					rt.log.Error("RunEndObserver.RunEnded panicked", "run", out.RunID, "panic", r)
				}
			}()
			o.RunEnded(out)
		}()
	}
}

// endObservers returns the RunEndObservers among runner and hook, each
// once.
func endObservers(runner StepRunner, hook TerminalHook) []RunEndObserver {
	var out []RunEndObserver
	if o, ok := hook.(RunEndObserver); ok {
		out = append(out, o)
	}
	if o, ok := runner.(RunEndObserver); ok && (len(out) == 0 || !sameValue(out[0], o)) {
		out = append(out, o)
	}
	return out
}

// sameValue reports whether a and b are the same comparable value; two
// values of a type that cannot be compared are different.
func sameValue(a, b any) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// chainDurable returns a callback running a then b, skipping nil ones.
func chainDurable(a, b func()) func() {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func() { a(); b() }
}
