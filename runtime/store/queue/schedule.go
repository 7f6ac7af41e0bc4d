package queue

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
)

// PromoteDue moves every scheduled job whose RunAt has come to pending and
// returns how many it moved. The background scheduler calls it whenever the
// earliest RunAt comes due or the scheduled set changes. Promotions are
// non-durable commits: one lost in a crash is redone after the next Open.
func (q *Queue) PromoteDue(ctx context.Context) (int, error) {
	now := nanos(q.clock.Now())
	total := 0
	for _, name := range q.queueNames() {
		pfx := queuePrefix(pfxScheduled, name)
		end := appendTime(bytes.Clone(pfx), now+1)
		due := false // a read without a transaction skips the usual case
		err := q.db.Scan(ctx, kv.Range{Start: pfx, End: end, Limit: 1}, func(_, _ []byte) (bool, error) {
			due = true
			return false, nil
		})
		if err != nil {
			return total, wrapKV("scheduler: scan scheduled index", err)
		}
		if !due {
			continue
		}
		n, err := q.drainTimeIndex(ctx, pfxScheduled, name, now, "promote scheduled jobs",
			func(r *record, at int64) bool { return r.State == StateScheduled && r.RunAt == at },
			(*txn).makePending)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// nextRunAt returns the earliest RunAt of any scheduled job.
func (q *Queue) nextRunAt(ctx context.Context) (time.Time, bool, error) {
	var best int64
	found := false
	for _, name := range q.queueNames() {
		pfx := queuePrefix(pfxScheduled, name)
		err := q.db.Scan(ctx, kv.Range{Start: pfx, End: prefixEnd(pfx), Limit: 1}, func(k, _ []byte) (bool, error) {
			if at, _, ok := timeIndexParts(pfxScheduled, name, k); ok && (!found || at < best) {
				best, found = at, true
			}
			return false, nil
		})
		if err != nil {
			return time.Time{}, false, wrapKV("scheduler: scan scheduled index", err)
		}
	}
	return fromNanos(best), found, nil
}

// Sweep applies retention: it deletes done jobs older than their queue's
// KeepDoneJobs (all of them when it is 0) and dead jobs older than a
// positive DeadRetention. The background sweeper calls it every
// Options.SweepInterval. Deletions are batched in non-durable commits and
// made durable with one Sync before Sweep returns, so a sweep costs about one
// WAL PUT however many jobs it removes.
func (q *Queue) Sweep(ctx context.Context) (SweepResult, error) {
	now := nanos(q.clock.Now())
	var res SweepResult
	for _, name := range q.queueNames() {
		cfg := q.opts.config(name)
		n, err := q.sweepIndex(ctx, pfxDone, StateDone, name, now-int64(cfg.KeepDoneJobs))
		res.Done += n
		if err != nil {
			return res, err
		}
		if cfg.DeadRetention > 0 {
			n, err := q.sweepIndex(ctx, pfxDead, StateDead, name, now-int64(cfg.DeadRetention))
			res.Dead += n
			if err != nil {
				return res, err
			}
		}
	}
	if res.Done+res.Dead > 0 {
		if err := q.db.Sync(ctx); err != nil {
			return res, fmt.Errorf("queue: retention sweep: %w", err)
		}
	}
	return res, nil
}

// sweepIndex deletes the jobs of a done or dead index whose time is <= cut.
func (q *Queue) sweepIndex(ctx context.Context, pfx string, st State, name string, cut int64) (int, error) {
	return q.drainTimeIndex(ctx, pfx, name, cut, "retention sweep",
		func(r *record, _ int64) bool { return r.State == st },
		(*txn).remove)
}

// drainTimeIndex applies act, batch by batch, to every job of queue name
// whose entry in the time index pfx is at or before cut, each batch one
// non-durable commit. An entry whose job no longer matches it (live false)
// is stale residue and is dropped.
func (q *Queue) drainTimeIndex(ctx context.Context, pfx, name string, cut int64, what string,
	live func(r *record, at int64) bool, act func(t *txn, r *record) error) (int, error) {
	start := queuePrefix(pfx, name)
	end := appendTime(bytes.Clone(start), cut+1)
	total := 0
	for {
		n, full := 0, false
		err := q.update(ctx, what, false, func(t *txn) error {
			n = 0
			keys, err := scanKeys(ctx, t.tx, kv.Range{Start: start, End: end, Limit: recoverBatch})
			if err != nil {
				return err
			}
			full = len(keys) == recoverBatch
			for _, k := range keys {
				at, id, _ := timeIndexParts(pfx, name, k)
				r, err := t.record(id)
				if err != nil {
					return err
				}
				if r == nil || !live(r, at) {
					q.log.Warn("dropping stale index entry", "index", pfx, "queue", name, "job", id)
					if err := t.del(k); err != nil {
						return err
					}
					continue
				}
				if err := t.unindex(r); err != nil {
					return err
				}
				if err := act(t, r); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if !full {
			return total, nil
		}
	}
}

func scanKeys(ctx context.Context, tx *kv.Tx, r kv.Range) ([][]byte, error) {
	var keys [][]byte
	err := tx.Scan(ctx, r, func(k, _ []byte) (bool, error) {
		keys = append(keys, bytes.Clone(k))
		return true, nil
	})
	return keys, err
}
