package queue

import (
	"context"
	"fmt"
)

// settle runs fn on c's job record inside a transaction after checking that
// c is still the job's current claim, and then forgets c's lease.
func (q *Queue) settle(ctx context.Context, op string, c *Claim, eff *SettlementEffects, fn func(t *txn, r *record) error) error {
	if c == nil {
		return invalidf("%s: nil claim", op)
	}
	if c.q != q {
		return fmt.Errorf("%w: %s of job %q: the claim was made by another Queue (closed or reopened since)", ErrClaimLost, op, c.Job.ID)
	}
	if err := validateEffects(eff); err != nil {
		return fmt.Errorf("%s of job %q: %w", op, c.Job.ID, err)
	}
	err := q.update(ctx, op, false, func(t *txn) error {
		if eff != nil {
			t.shareTo = &eff.walShare
		}
		r, err := t.record(c.Job.ID)
		if err != nil {
			return err
		}
		if r == nil || r.State != StateClaimed || r.Token != c.token {
			return fmt.Errorf("%w: %s of job %q: the job was reaped, re-claimed, requeued or removed since this claim", ErrClaimLost, op, c.Job.ID)
		}
		if err := t.unindex(r); err != nil {
			return err
		}
		return fn(t, r)
	})
	if err != nil {
		return err
	}
	c.settled.Store(true)
	return nil
}

// Ack completes c's job and applies eff in the same durable commit. The job
// is kept as done for the queue's KeepDoneJobs, else deleted. A pending
// cancel request and the effects its Cancel left are discarded: the worker
// finished first.
func (q *Queue) Ack(ctx context.Context, c *Claim, eff *SettlementEffects) error {
	return q.settle(ctx, "ack", c, eff, func(t *txn, r *record) error { return q.ack(t, r, eff) })
}

// claimTo makes t's ClaimFirst claim land in eff.
func (t *txn) claimTo(eff *SettlementEffects) {
	if eff != nil && eff.ClaimFirst {
		eff.claimed = nil
		t.claimFor = eff
	}
}

// AckUnlessCancelled is Ack for a worker whose job must not complete once
// Cancel was requested for it: then it writes nothing and returns an error
// wrapping ErrCancelRequested, and the claim stays held for the caller to
// settle as cancelled (Nack applies the Cancel call's effects; Ack or
// DeadLetter the caller's own). The check and the acknowledgement are one
// transaction, so an acknowledgement under way never overtakes a Cancel
// that returned CancelRequested.
func (q *Queue) AckUnlessCancelled(ctx context.Context, c *Claim, eff *SettlementEffects) error {
	return q.settle(ctx, "ack", c, eff, func(t *txn, r *record) error {
		if r.CancelRequested {
			return cancelPending("ack", r)
		}
		return q.ack(t, r, eff)
	})
}

// cancelPending is the error of a settlement that yields to a cancel request.
func cancelPending(op string, r *record) error {
	return fmt.Errorf("%w: %s of job %q not applied: Cancel was requested for it; settle it as cancelled", ErrCancelRequested, op, r.ID)
}

// ack completes claimed record r (already unindexed) and applies eff.
func (q *Queue) ack(t *txn, r *record, eff *SettlementEffects) error {
	t.durable = true
	r.endAttempt(t.now, "acked", "")
	if err := t.dropCancelEffects(r); err != nil {
		return err
	}
	r.State, r.Token, r.CompletedAt, r.CancelRequested = StateDone, 0, t.now, false
	t.finished = append(t.finished, r.job(nil))
	t.claimTo(eff)
	if q.opts.config(r.Queue).KeepDoneJobs > 0 {
		if err := t.putRecord(r); err != nil {
			return err
		}
		if err := t.put(doneKey(r.Queue, r.CompletedAt, r.ID), nil); err != nil {
			return err
		}
		if err := t.add(r.Queue, StateDone, 1); err != nil {
			return err
		}
	} else if err := t.remove(r); err != nil {
		return err
	}
	return t.applyEffects(eff)
}

// Nack fails c's attempt with reason. When Cancel was requested for the job,
// the job is removed as cancelled and the effects the Cancel call gave are
// applied (eff is discarded). Otherwise, when the attempt was the job's last,
// the job dead-letters and eff is applied; else the job is scheduled after
// the backoff for its attempt count and eff is discarded. Only the first two
// are durable before Nack returns; a retry lost in a crash is requeued at
// the next Open instead.
func (q *Queue) Nack(ctx context.Context, c *Claim, reason string, eff *SettlementEffects) (NackResult, error) {
	var res NackResult
	err := q.settle(ctx, "nack", c, eff, func(t *txn, r *record) error {
		res = NackResult{}
		switch {
		case r.CancelRequested:
			res.Cancelled = true
			return t.cancelClaimed(r, reason)
		case r.Attempts >= r.MaxAttempts:
			res.Dead = true
			r.endAttempt(t.now, "nacked", reason)
			if err := t.makeDead(r, reason); err != nil {
				return err
			}
			return t.applyEffects(eff)
		default:
			r.endAttempt(t.now, "nacked", reason)
			r.LastError, r.FailedAt = reason, t.now
			r.RunAt = t.now + int64(q.opts.config(r.Queue).backoff(r.Attempts))
			res.RunAt = fromNanos(r.RunAt)
			if err := t.acquireDedup(r); err != nil {
				return err
			}
			return t.makeScheduled(r)
		}
	})
	return res, err
}

// cancelClaimed removes a claimed job (already unindexed) whose cancel was
// requested, applying the effects its Cancel call stored.
func (t *txn) cancelClaimed(r *record, reason string) error {
	t.durable = true
	r.endAttempt(t.now, "cancelled", reason)
	b, ok, err := t.get(effectsKey(r.ID))
	if err != nil {
		return err
	}
	var eff *SettlementEffects
	if ok {
		if eff, err = decodeEffects(b); err != nil {
			return fmt.Errorf("job %q: %w", r.ID, err)
		}
	}
	if err := t.remove(r); err != nil {
		return err
	}
	j := r.job(nil)
	j.State = StateCancelled
	t.finished = append(t.finished, j)
	return t.applyEffects(eff)
}

// DeadLetter moves c's job to dead with reason and applies eff, in one
// durable commit.
func (q *Queue) DeadLetter(ctx context.Context, c *Claim, reason string, eff *SettlementEffects) error {
	return q.settle(ctx, "dead-letter", c, eff, func(t *txn, r *record) error { return t.deadLetter(r, reason, eff) })
}

// DeadLetterUnlessCancelled is DeadLetter yielding to a cancel request as
// AckUnlessCancelled does: when Cancel was requested for the job it writes
// nothing, returns an error wrapping ErrCancelRequested and leaves the
// claim held.
func (q *Queue) DeadLetterUnlessCancelled(ctx context.Context, c *Claim, reason string, eff *SettlementEffects) error {
	return q.settle(ctx, "dead-letter", c, eff, func(t *txn, r *record) error {
		if r.CancelRequested {
			return cancelPending("dead-letter", r)
		}
		return t.deadLetter(r, reason, eff)
	})
}

// deadLetter moves claimed record r (already unindexed) to dead and applies eff.
func (t *txn) deadLetter(r *record, reason string, eff *SettlementEffects) error {
	r.endAttempt(t.now, "dead_lettered", reason)
	if err := t.makeDead(r, reason); err != nil {
		return err
	}
	return t.applyEffects(eff)
}

// Cancel cancels job id. A pending or scheduled job is removed and eff is
// applied in the same durable commit (CancelRemoved). A claimed job gets a
// durable cancel request (CancelRequested): its claim's Cancelled channel
// closes, a redelivery after a crash or an expired lease sees
// Job.CancelRequested, and eff is stored with the job; the next Nack of the
// job removes it and applies that eff, while an Ack or DeadLetter settles it
// normally and discards eff (AckUnlessCancelled and
// DeadLetterUnlessCancelled refuse to settle it). If the claim ends without
// a settlement (lease expired, process crashed), the job is requeued
// keeping the request, so the next claim sees it at once, or dead-lettered
// (discarding eff) when that was its last attempt. A second Cancel of a claimed job keeps the
// first request's effects. Done and dead jobs are left alone (CancelFinished).
func (q *Queue) Cancel(ctx context.Context, id string, eff *SettlementEffects) (CancelResult, error) {
	if err := validName("job ID", id); err != nil {
		return "", err
	}
	if err := validateEffects(eff); err != nil {
		return "", fmt.Errorf("cancel of job %q: %w", id, err)
	}
	var res CancelResult
	err := q.update(ctx, "cancel", true, func(t *txn) error {
		r, err := t.record(id)
		if err != nil {
			return err
		}
		if r == nil {
			res = CancelNotFound
			return nil
		}
		switch r.State {
		case StatePending, StateScheduled:
			res = CancelRemoved
			if err := t.unindex(r); err != nil {
				return err
			}
			if err := t.remove(r); err != nil {
				return err
			}
			j := r.job(nil)
			j.State = StateCancelled
			t.finished = append(t.finished, j)
			return t.applyEffects(eff)
		case StateClaimed:
			res = CancelRequested
			if r.CancelRequested {
				return nil
			}
			r.CancelRequested = true
			if err := t.putRecord(r); err != nil {
				return err
			}
			if !eff.empty() {
				b, err := encodeEffects(eff)
				if err != nil {
					return err
				}
				if err := t.put(effectsKey(r.ID), b); err != nil {
					return err
				}
			}
			t.cancels = append(t.cancels, leaseRef{r.ID, r.Token})
			return nil
		default:
			res = CancelFinished
			return nil
		}
	})
	if err != nil {
		return "", err
	}
	return res, nil
}

// WakeScheduled promotes scheduled job id to pending now, recording payload
// as its WakePayload and the time as WokenAt, in one durable commit. Exactly
// one of concurrent wakes, the scheduler's promotion and a Cancel wins; the
// others see the job no longer scheduled. It is WakeScheduledKV with an
// empty batch.
func (q *Queue) WakeScheduled(ctx context.Context, id string, payload []byte) (WakeOutcome, error) {
	return q.WakeScheduledKV(ctx, id, payload, KVBatch{})
}

// RequeueDead moves dead job id back to pending with its attempts reset, in
// one durable commit. It fails with ErrNotFound when no dead job has that ID.
func (q *Queue) RequeueDead(ctx context.Context, id string) error {
	if err := validName("job ID", id); err != nil {
		return err
	}
	return q.update(ctx, "requeue dead job", true, func(t *txn) error {
		r, err := t.record(id)
		if err != nil {
			return err
		}
		if r == nil || r.State != StateDead {
			return fmt.Errorf("%w: no dead job %q", ErrNotFound, id)
		}
		if err := t.unindex(r); err != nil {
			return err
		}
		r.Attempts, r.CancelRequested = 0, false
		if err := t.acquireDedup(r); err != nil {
			return err
		}
		return t.makePending(r)
	})
}

// ApplyEffects applies eff in one durable commit without settling any job,
// provided every condition in expect holds when it commits: each Key holds
// Value, or is absent when Value is nil. It reports whether it applied;
// false means a condition failed and nothing was written. A guard that the
// effects themselves falsify (delete the key expected present, put the key
// expected absent) makes the call idempotent: a repeat after a crash or a
// lost response applies nothing. Cost: one durable commit.
func (q *Queue) ApplyEffects(ctx context.Context, eff *SettlementEffects, expect []KVWrite) (bool, error) {
	if eff.empty() {
		return false, invalidf("ApplyEffects: no effects to apply")
	}
	if err := validateEffects(eff); err != nil {
		return false, fmt.Errorf("ApplyEffects: %w", err)
	}
	for _, c := range expect {
		if err := validKVKey(c.Key); err != nil {
			return false, fmt.Errorf("ApplyEffects expect: %w", err)
		}
	}
	var ok bool
	err := q.update(ctx, "apply effects", true, func(t *txn) error {
		ok = false
		for _, c := range expect {
			cur, exists, err := t.get(kvKey(c.Key))
			if err != nil {
				return err
			}
			if !matches(cur, exists, c.Value) {
				return nil
			}
		}
		ok = true
		return t.applyEffects(eff)
	})
	return ok && err == nil, err
}
