package queue

import (
	"context"
	"fmt"
)

// KVBatch is a set of caller-KV writes that KVApply commits atomically,
// optionally guarded by conditions on current values.
type KVBatch struct {
	// Expect lists conditions that must all hold for the batch to apply:
	// each Key must currently hold Value, or be absent when Value is nil.
	Expect []KVWrite
	// Puts are written first, then Deletes are applied (as in
	// SettlementEffects); deleting an absent key is a no-op.
	Puts    []KVWrite
	Deletes []string
	// NonDurable commits without waiting for the WAL: the batch is visible
	// at once and rides the next WAL object the kv writes; a crash before
	// that loses it. Commits become durable in commit order, so a durable
	// commit made after a non-durable one implies the earlier one is
	// durable too.
	NonDurable bool
}

// KVApply commits b in one kv transaction: every condition holds and every
// write lands, or nothing is written. It reports whether it wrote; false
// means an Expect condition did not hold. Unless b.NonDurable, the batch is
// durable when KVApply returns. Cost: one durable commit (a share of one
// WAL PUT), or nothing until the next durable commit with NonDurable.
func (q *Queue) KVApply(ctx context.Context, b KVBatch) (bool, error) {
	if err := validateKVBatch(&b); err != nil {
		return false, err
	}
	var ok bool
	err := q.update(ctx, "KV apply", !b.NonDurable, func(t *txn) error {
		ok = false
		for _, c := range b.Expect {
			cur, exists, err := t.get(kvKey(c.Key))
			if err != nil {
				return err
			}
			if !matches(cur, exists, c.Value) {
				return nil
			}
		}
		for _, w := range b.Puts {
			if err := t.put(kvKey(w.Key), w.Value); err != nil {
				return err
			}
		}
		for _, k := range b.Deletes {
			if err := t.del(kvKey(k)); err != nil {
				return err
			}
		}
		ok = true
		return nil
	})
	return ok && err == nil, err
}

func validateKVBatch(b *KVBatch) error {
	if len(b.Puts)+len(b.Deletes) == 0 {
		return invalidf("KVApply: the batch has no puts and no deletes")
	}
	for _, c := range b.Expect {
		if err := validKVKey(c.Key); err != nil {
			return fmt.Errorf("KVApply expect: %w", err)
		}
	}
	if err := validateKVWrites(b.Puts); err != nil {
		return fmt.Errorf("KVApply put: %w", err)
	}
	for _, k := range b.Deletes {
		if err := validKVKey(k); err != nil {
			return fmt.Errorf("KVApply delete: %w", err)
		}
	}
	return nil
}

// WakeConditionFailed is the WakeScheduledKV outcome when an Expect
// condition of its batch did not hold: nothing was written.
const WakeConditionFailed WakeOutcome = "condition_failed"

// WakeScheduledKV is WakeScheduled with a caller-KV batch in the same
// durable commit: when every b.Expect condition holds and the job is
// scheduled, the job is woken and the batch applied together; otherwise
// nothing is written and the outcome says why (WakeConditionFailed,
// NotScheduled or NotFound). Conditions are checked first. b.NonDurable is
// ignored: a wake is always durable. The batch may be empty (conditions
// only). Cost: one durable commit.
func (q *Queue) WakeScheduledKV(ctx context.Context, id string, payload []byte, b KVBatch) (WakeOutcome, error) {
	if err := validName("job ID", id); err != nil {
		return "", err
	}
	if len(payload) > MaxKVValueSize {
		return "", fmt.Errorf("%w: wake payload for job %q is %d bytes; the limit is %d", ErrTooLarge, id, len(payload), MaxKVValueSize)
	}
	if len(b.Puts)+len(b.Deletes) == 0 {
		b.Deletes = nil // validate the conditions only
	} else if err := validateKVBatch(&b); err != nil {
		return "", err
	}
	for _, c := range b.Expect {
		if err := validKVKey(c.Key); err != nil {
			return "", fmt.Errorf("WakeScheduledKV expect: %w", err)
		}
	}
	var res WakeOutcome
	err := q.update(ctx, "wake", true, func(t *txn) error {
		for _, c := range b.Expect {
			cur, exists, err := t.get(kvKey(c.Key))
			if err != nil {
				return err
			}
			if !matches(cur, exists, c.Value) {
				res = WakeConditionFailed
				return nil
			}
		}
		r, err := t.record(id)
		if err != nil {
			return err
		}
		switch {
		case r == nil:
			res = NotFound
			return nil
		case r.State != StateScheduled:
			res = NotScheduled
			return nil
		}
		res = Woken
		if err := t.unindex(r); err != nil {
			return err
		}
		r.WokenAt, r.WakePayload = t.now, payload
		if err := t.makePending(r); err != nil {
			return err
		}
		for _, w := range b.Puts {
			if err := t.put(kvKey(w.Key), w.Value); err != nil {
				return err
			}
		}
		for _, k := range b.Deletes {
			if err := t.del(kvKey(k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return res, nil
}
