package runtime

import (
	"context"
	"errors"
	"fmt"
	stdruntime "runtime"
	"strconv"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/invariants"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// delivery is one claimed step job being processed.
type delivery struct {
	rt    *Runtime
	c     *queue.Claim
	runID string
	n     int
	rec   *runRecord
	// sigDeletes are signal records consumed by this step, deleted with
	// its settlement (kept on a retry, so a redelivery sees the same signal).
	sigDeletes []string
	// step is the runner's view of this delivery (nil when replayed).
	step *Step
	// reserve takes a worker slot for the run's next step; next is that
	// step when the settlement claimed it.
	reserve func() bool
	next    *queue.Claim
	// counter counts the requests made for this delivery; kept is set
	// once they went to the run's pending totals instead of a settlement.
	counter counting.Counter
	kept    bool
	// handlersRun: the run's cancel was handed to its handlers
	// (Step.Cancelled).
	handlersRun bool
	// resume is the state a Redrive resumes from, when the runner gave
	// one with Fail or CancelRun (else the step's own input).
	resume []byte
}

// onDurable returns the callback that reports the runner's outcome once
// its settlement is durable (nil when there is nothing to report).
func (d *delivery) onDurable() func() {
	if d.step == nil {
		return nil
	}
	return d.step.runDurable
}

// settleMode says how a terminating settlement ends the step job.
type settleMode uint8

const (
	// settleAck acks with the runner's outcome, unless a Cancel marked the
	// job meanwhile: then the run ends Cancelled instead.
	settleAck settleMode = iota
	// settleCancelled acks as the run's cancellation.
	settleCancelled
	// settleDeadLetter dead-letters, yielding to a Cancel like settleAck.
	settleDeadLetter
	// settleNack nacks; the queue turns the nack of a job whose cancel was
	// requested into its removal with the Cancel call's effects.
	settleNack
)

// handleStep processes one claimed step job and settles it. It releases
// its worker slot once the runner returned, before the settlement commits.
func (rt *Runtime) handleStep(ctx context.Context, c *queue.Claim, release func(), reserve func() bool) *queue.Claim {
	next, err := rt.processStep(ctx, c, release, reserve)
	if err != nil {
		if errors.Is(err, queue.ErrClaimLost) {
			rt.log.Debug("step claim lost before settlement; another delivery owns it", "job", c.Job.ID, "err", err)
			return nil
		}
		var gate *gateError
		if errors.As(err, &gate) {
			// Not started; the claim expires or the next writer requeues it.
			rt.log.Warn("step not started: the writer lease is not valid", "job", c.Job.ID, "err", err)
			return nil
		}
		rt.log.Error("step processing failed; the job is retried", "job", c.Job.ID, "err", err)
		if _, nerr := rt.q.Nack(context.WithoutCancel(ctx), c, err.Error(), nil); nerr != nil && !errors.Is(nerr, queue.ErrClaimLost) {
			rt.log.Error("nack failed; the lease will expire", "job", c.Job.ID, "err", nerr)
		}
	}
	return next
}

// processStep runs and settles one step. It returns only errors that left
// the claim unsettled, and the run's next step when its settlement claimed
// it (in a slot reserve gave).
func (rt *Runtime) processStep(ctx context.Context, c *queue.Claim, release func(), reserve func() bool) (*queue.Claim, error) {
	sctx := context.WithoutCancel(ctx) // settlements finish even during shutdown
	job := &c.Job
	runID := job.Headers[headerRunID]
	n, err := strconv.Atoi(job.Headers[headerStep])
	if runID == "" || err != nil || n < 0 {
		return nil, rt.q.DeadLetter(sctx, c, fmt.Sprintf("job %s on queue %s is not a workflow step: headers %s/%s missing or bad",
			job.ID, job.Queue, headerRunID, headerStep), nil)
	}
	rec, err := loadRun(sctx, rt.q, runID)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.Nonce != job.Headers[headerRunNonce] {
		// The run already terminated, or the job belongs to an earlier run
		// under the same id: nothing to do.
		rt.log.Debug("dropping step job of an inactive run", "run", runID, "step", n, "job", job.ID)
		return nil, rt.q.Ack(sctx, c, nil)
	}
	if ptr, err := loadPointer(sctx, rt.q, runID); err != nil {
		return nil, err
	} else if ptr != nil && ptr.JobID != job.ID {
		rt.log.Warn("dropping step job the run does not point at", "run", runID, "step", n, "job", job.ID, "current", ptr.JobID)
		return nil, rt.q.Ack(sctx, c, nil)
	}
	d := &delivery{rt: rt, c: c, runID: runID, n: n, rec: rec, reserve: reserve}
	err = d.process(counting.WithCounter(ctx, &d.counter), counting.WithCounter(sctx, &d.counter), release)
	if err != nil && !d.kept {
		d.unsettled(nil)
	}
	return d.next, err
}

func (d *delivery) process(ctx, sctx context.Context, release func()) error {
	rt := d.rt
	if cancelled, err := d.cancelRequested(sctx); err != nil {
		return err
	} else if cancelled {
		return d.cancelled(sctx)
	}
	sig, sigDeletes, err := rt.resolveSignal(sctx, &d.c.Job, d.runID, d.n)
	if err != nil {
		return d.stepFailed(sctx, Transient(err))
	}
	d.sigDeletes = sigDeletes

	var (
		out StepOutcome
		eff *Effects
	)
	replayed := false
	if rt.cfg.replay {
		rec, err := rt.loadReplay(sctx, d.runID, d.n, d.c.Job.Payload)
		if err != nil {
			return d.stepFailed(sctx, Transient(err))
		}
		if rec != nil {
			out = rec.outcome(rt.clock.Now().Sub(timeFromMs(rec.StoredMs)))
			eff = newEffects()
			for _, p := range rec.Puts {
				eff.puts[p.Key] = p.Value
			}
			for _, k := range rec.Deletes {
				eff.deletes[k] = struct{}{}
			}
			replayed = true
		}
	}
	if !replayed {
		// The runner starts only while the writer lease stays valid for
		// the margin, and only if the claim survived the wait.
		if err := rt.AwaitLease(ctx); err != nil {
			return err
		}
		if _, held := rt.q.LeaseExpiry(d.c); !held {
			return fmt.Errorf("runtime: step %d of run %s: %w", d.n, d.runID, queue.ErrClaimLost)
		}
		rt.checkLeaseValid(d)
		eff = newEffects()
		out, err = d.invoke(ctx, sig, eff)
		// An external cancel overrides whatever the runner returned. Cancel
		// always reaches a running step through its claim (it cancels the
		// job the run's pointer names, which is this one while it runs), so
		// the channel suffices here; the durable record was checked above
		// for requests that predate this delivery.
		select {
		case <-d.c.Cancelled:
			release()
			return d.cancelled(sctx)
		default:
		}
		if err != nil {
			return d.stepFailed(sctx, err)
		}
		if err := out.validate(); err != nil {
			return d.stepFailed(sctx, Permanent(err))
		}
		if rt.cfg.replay {
			b, err := encodeRecord(newReplayRecord(out, eff, rt.clock.Now()))
			if err != nil {
				return d.stepFailed(sctx, Permanent(err))
			}
			key := rt.memo.ReplayKey(d.runID, d.n, d.c.Job.Payload)
			if _, err := rt.store.Put(sctx, key, b, objstore.PutOptions{}); err != nil {
				return d.stepFailed(sctx, Transient(fmt.Errorf("record step output for replay: %w", err)))
			}
		}
	}
	release()
	return d.apply(sctx, out, eff)
}

// cancelled ends the run as Cancelled by an external Cancel, discarding
// whatever the step would have done.
func (d *delivery) cancelled(ctx context.Context) error {
	if ok, err := d.handOverCancel(ctx); ok {
		return err
	}
	return d.terminate(ctx, runstate.Cancelled, nil, "cancelled", nil, settleCancelled)
}

// yieldToCancel reports whether err says the settlement was refused because
// a Cancel marked the job after the runner returned (the claim's channel
// was checked before, the job record is checked in the settling commit).
// The run then ends Cancelled: Cancel reported it would.
func (d *delivery) yieldToCancel(ctx context.Context, err error) (bool, error) {
	if !errors.Is(err, queue.ErrCancelRequested) {
		return false, err
	}
	d.rt.log.Debug("cancel requested while the step settled; its outcome is discarded", "run", d.runID, "step", d.n, "job", d.c.Job.ID)
	return true, d.cancelled(ctx)
}

// cancelRequested reports whether Cancel was requested for the run, through
// the claim or through the durable cancel record.
func (d *delivery) cancelRequested(ctx context.Context) (bool, error) {
	select {
	case <-d.c.Cancelled:
		return true, nil
	default:
	}
	v, err := kvGet(ctx, d.rt.q, cancelKey(d.runID))
	if err != nil {
		return false, err
	}
	stop, handOver, running := d.cancelMark(v)
	d.handlersRun = running
	return stop || handOver, nil
}

// invoke runs the runner with a context cancelled on Cancel and shutdown.
// A panicking runner counts as a transient error.
func (d *delivery) invoke(ctx context.Context, sig []byte, eff *Effects) (out StepOutcome, err error) {
	// ctx carries the worker's kv committer: the runner's own durable
	// commits and read barriers count as its having joined the batch
	// they wait for, since it commits nothing else until they return (a
	// batch waiting for it would wait for its own waiter).
	stepCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-d.c.Cancelled:
			cancel(ErrRunCancelled)
		case <-stop:
		}
	}()
	job := &d.c.Job
	rt := d.rt
	step := &Step{
		RunID: d.runID, Number: d.n, Payload: job.Payload, Headers: userHeaders(job.Headers),
		JobID: job.ID, Attempt: job.Attempts,
		Memo:    rt.memo.Step(d.runID, d.n),
		RunMemo: rt.memo.Run(d.runID),
		Effects: eff, KV: queueKV{rt.q}, Signal: sig,
		Lease:     &Lease{q: rt.q, c: d.c},
		Submitted: timeFromMs(d.rec.SubmittedMs),
		Cancelled: d.handlersRun,
	}
	d.step = step
	defer func() {
		if r := recover(); r != nil {
			buf := make([]byte, 4096)
			buf = buf[:stdruntime.Stack(buf, false)]
			rt.log.Error("step runner panicked", "run", d.runID, "step", d.n, "panic", r, "stack", string(buf))
			err = Transient(fmt.Errorf("step runner panicked: %v", r))
		}
	}()
	return rt.runner.RunStep(stepCtx, step)
}

// stepFailed settles a step error: a permanent one dead-letters the step
// and fails the run; a transient one nacks it, and the nack that exhausts
// the attempts fails the run.
func (d *delivery) stepFailed(ctx context.Context, err error) error {
	msg := err.Error()
	if IsPermanent(err) {
		return d.terminate(ctx, runstate.Failed, nil, msg, nil, settleDeadLetter)
	}
	return d.terminate(ctx, runstate.Failed, nil, msg, nil, settleNack)
}

// apply settles the runner's outcome with the effects it staged.
func (d *delivery) apply(ctx context.Context, out StepOutcome, eff *Effects) error {
	switch out.kind {
	case outcomeSucceed:
		return d.terminate(ctx, runstate.Succeeded, out.Result, "", eff, settleAck)
	case outcomeFail:
		d.resume = out.Payload
		return d.terminate(ctx, runstate.Failed, nil, out.Reason, eff, settleAck)
	case outcomeCancel:
		d.resume = out.Payload
		return d.terminate(ctx, runstate.Cancelled, nil, out.Reason, eff, settleAck)
	}
	return d.advance(ctx, out, eff)
}

// advance acks the step and enqueues the next one in the same commit.
func (d *delivery) advance(ctx context.Context, out StepOutcome, eff *Effects) error {
	rt := d.rt
	next := d.n + 1
	jobID := rt.newID()
	opts := queue.EnqueueOptions{
		ID: jobID, DedupKey: dedupKey(d.runID, next), MaxAttempts: rt.cfg.maxAttempts,
		Headers: stepHeaders(d.rec.Headers, d.runID, d.rec.Nonce, next),
	}
	sef := &queue.SettlementEffects{OnDurable: d.onDurable()}
	addEffects(sef, eff)
	sef.KVDeletes = append(sef.KVDeletes, d.sigDeletes...)
	waitKey := ""
	switch out.trigger.Kind {
	case triggerAfter:
		if out.trigger.Delay > 0 {
			opts.RunAt = rt.clock.Now().Add(out.trigger.Delay)
		}
	case triggerOnSignal:
		key := out.trigger.SignalKey
		busy, err := rt.liveWaiter(ctx, key)
		if err != nil {
			return d.stepFailed(ctx, Transient(err))
		}
		if busy != "" {
			// The interpreter checks first (SignalKeyHolder); this is the
			// race of two registrations in flight at once.
			holder := "job " + busy
			if job, err := rt.q.GetJob(ctx, busy); err == nil && job.Headers[headerRunID] != "" {
				holder = "run " + job.Headers[headerRunID]
			}
			return d.stepFailed(ctx, Permanent(fmt.Errorf("signal key %q is taken: %s waits on it; one waiter per key: include the run id in the key", key, holder)))
		}
		buf, err := kvGet(ctx, rt.q, sigBufKey(key))
		if err != nil {
			return d.stepFailed(ctx, Transient(err))
		}
		if buf != nil {
			// Consume the buffered signal at registration.
			opts.Headers[headerSignalDelivered] = "1"
			// Only this signal leaves the buffer: one that a Signal call
			// buffers between this read and the commit stays for the next
			// waiter instead of being deleted unseen.
			sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: deliveredKey(d.runID, next), Value: buf})
			sef.KVCompareDeletes = append(sef.KVCompareDeletes, queue.KVWrite{Key: sigBufKey(key), Value: buf})
		} else {
			opts.RunAt = rt.clock.Now().Add(out.trigger.Timeout)
			opts.Headers[headerSignalWait] = key
			sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: sigWaitKey(key), Value: []byte(jobID)})
			waitKey = key
		}
	}
	ptr, err := encodeRecord(&stepPointer{Nonce: d.rec.Nonce, Step: next, JobID: jobID})
	if err != nil {
		return err
	}
	sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: stepKey(d.runID), Value: ptr})
	totals, taken, err := d.totalsWrite(ctx)
	if err != nil {
		return err
	}
	sef.KVPuts = append(sef.KVPuts, totals)
	sef.Enqueue = append(sef.Enqueue, queue.NewJob{Queue: rt.cfg.queueName, Payload: out.Payload, Options: opts})
	// A next step due now is claimed in this settlement for this worker,
	// when a slot is free for it: one commit instead of two, and no trip
	// through the ready index.
	if opts.RunAt.IsZero() && waitKey == "" && d.reserve != nil && d.reserve() {
		sef.ClaimFirst = true
	}
	if h := rt.beforeAdvanceCommit; h != nil {
		h(d.runID, out.trigger.SignalKey)
	}
	if h := rt.beforeSettleCommit; h != nil {
		h(d.runID, d.n)
	}
	// A Cancel that reached the job since the runner returned wins: the
	// next step must not be enqueued behind its back.
	if err := rt.q.AckUnlessCancelled(ctx, d.c, sef); err != nil {
		d.unsettled(taken)
		if yielded, err := d.yieldToCancel(ctx, err); yielded {
			return err
		}
		return d.settleFailed(ctx, err)
	}
	rt.pending.add(d.runID, &totalsRecord{Puts: sef.WALShare()})
	if waitKey != "" {
		rt.afterRegister(ctx, waitKey, jobID)
	}
	d.next = sef.Claimed()
	return nil
}

// settleFailed handles an error from a settlement. An outcome the queue
// rejects (too large, invalid) can never settle: the run fails.
func (d *delivery) settleFailed(ctx context.Context, err error) error {
	if errors.Is(err, queue.ErrTooLarge) || errors.Is(err, queue.ErrInvalid) {
		return d.terminate(ctx, runstate.Failed, nil, "the step's outcome could not be committed: "+err.Error(), nil, settleDeadLetter)
	}
	return err
}

// terminate ends the run in the step's settlement: runner effects (when
// given), the runtime's terminal records and the notification commit with it.
func (d *delivery) terminate(ctx context.Context, status runstate.TerminalStatus, result []byte, errMsg string, eff *Effects, mode settleMode) error {
	rt := d.rt
	sef, err := rt.terminalEffects(d.runID, d.rec, d.n, status, result, errMsg)
	if err != nil {
		return err
	}
	resume := d.c.Job.Payload
	if d.resume != nil {
		resume = d.resume
	}
	if err := rt.keepResume(sef, d.runID, d.rec, d.n, status, resume); err != nil {
		return err
	}
	addEffects(sef, eff)
	sef.KVDeletes = append(sef.KVDeletes, d.sigDeletes...)
	if mode == settleAck && eff != nil {
		sef.OnDurable = chainDurable(d.onDurable(), sef.OnDurable)
	}
	// The run's totals end with it: kept with its result, else dropped.
	var taken *totalsRecord
	if rt.cfg.resultRetention > 0 {
		var totals queue.KVWrite
		if totals, taken, err = d.totalsWrite(ctx); err != nil {
			return err
		}
		sef.KVPuts = append(sef.KVPuts, totals)
	} else {
		sef.KVDeletes = append(sef.KVDeletes, totalsKey(d.runID))
		rt.pending.take(d.runID)
	}
	ended := false
	if h := rt.beforeSettleCommit; h != nil && mode != settleCancelled {
		h(d.runID, d.n)
	}
	switch mode {
	case settleAck:
		err = rt.q.AckUnlessCancelled(ctx, d.c, sef)
		if yielded, yerr := d.yieldToCancel(ctx, err); yielded {
			d.unsettled(taken)
			return yerr
		}
		if err != nil {
			d.unsettled(taken)
			return d.settleFailed(ctx, err)
		}
		ended = true
	case settleCancelled:
		err = rt.q.Ack(ctx, d.c, sef)
		ended = err == nil
	case settleDeadLetter:
		err = rt.q.DeadLetterUnlessCancelled(ctx, d.c, errMsg, sef)
		if yielded, yerr := d.yieldToCancel(ctx, err); yielded {
			d.unsettled(taken)
			return yerr
		}
		ended = err == nil
	case settleNack:
		var res queue.NackResult
		res, err = rt.q.Nack(ctx, d.c, errMsg, sef)
		if err == nil && !res.Dead && !res.Cancelled {
			rt.log.Info("step failed; retrying", "run", d.runID, "step", d.n, "attempt", d.c.Job.Attempts, "at", res.RunAt, "err", errMsg)
		}
		ended = err == nil && res.Dead
	}
	switch {
	case !ended:
		d.unsettled(taken)
	case rt.cfg.resultRetention > 0 && notifies(sef, rt.cfg.notifyQueue):
		// The notification's acknowledgement writes the last share.
		rt.pending.add(d.runID, &totalsRecord{Puts: sef.WALShare()})
	}
	return err
}

// addEffects appends staged runner effects to a settlement.
func addEffects(sef *queue.SettlementEffects, eff *Effects) {
	puts, dels := eff.snapshot()
	for _, p := range puts {
		sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: p.Key, Value: p.Value})
	}
	sef.KVDeletes = append(sef.KVDeletes, dels...)
}

// checkLeaseValid asserts (invariants builds) that a step starts only
// while the writer lease is locally valid, for a gate that tells how long
// it stays valid (lease.Lease does).
func (rt *Runtime) checkLeaseValid(d *delivery) {
	if !invariants.Enabled {
		return
	}
	if g, ok := rt.cfg.gate.(interface{ ValidFor() time.Duration }); ok {
		invariants.Check(g.ValidFor() > 0, "step %d of run %s starts without a locally valid writer lease", d.n, d.runID)
	}
}

// notifies reports whether the settlement enqueues a termination
// notification.
func notifies(sef *queue.SettlementEffects, notifyQueue string) bool {
	for _, j := range sef.Enqueue {
		if j.Queue == notifyQueue {
			return true
		}
	}
	return false
}
