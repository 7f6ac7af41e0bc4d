package queue

import (
	"context"
	"fmt"
)

// RemoveWaiting removes job id while it is scheduled (waiting for its
// time or a wake) and applies eff in the same durable commit, provided
// every condition in expect holds (as ApplyEffects). It returns the
// job's state and whether it removed it: a job in any other state
// (pending: about to run; claimed: running), an absent one (state "")
// or a failed condition writes nothing. Unlike Cancel it never leaves a
// request on a running job. Cost: one durable commit.
func (q *Queue) RemoveWaiting(ctx context.Context, id string, eff *SettlementEffects, expect []KVWrite) (State, bool, error) {
	if err := validName("job ID", id); err != nil {
		return "", false, err
	}
	if err := validateEffects(eff); err != nil {
		return "", false, fmt.Errorf("remove of job %q: %w", id, err)
	}
	for _, c := range expect {
		if err := validKVKey(c.Key); err != nil {
			return "", false, fmt.Errorf("remove of job %q: expect: %w", id, err)
		}
	}
	var (
		st State
		ok bool
	)
	err := q.update(ctx, "remove waiting", true, func(t *txn) error {
		st, ok = "", false
		r, err := t.record(id)
		if err != nil || r == nil {
			return err
		}
		if st = r.State; st != StateScheduled {
			return nil
		}
		for _, c := range expect {
			cur, exists, err := t.get(kvKey(c.Key))
			if err != nil {
				return err
			}
			if !matches(cur, exists, c.Value) {
				return nil
			}
		}
		if err := t.unindex(r); err != nil {
			return err
		}
		if err := t.remove(r); err != nil {
			return err
		}
		j := r.job(nil)
		j.State = StateCancelled
		t.finished = append(t.finished, j)
		ok = true
		return t.applyEffects(eff)
	})
	if err != nil {
		return "", false, err
	}
	return st, ok, nil
}
