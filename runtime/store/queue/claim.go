package queue

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
)

// Claim is one delivery of a job to a worker. Settle it exactly once with
// Ack, Nack or DeadLetter; a settlement after the claim stopped being current
// fails with ErrClaimLost.
type Claim struct {
	// Job is the job at claim time, with Attempts already counting this claim.
	Job Job
	// Cancelled is closed when Cancel is requested for the job while this
	// claim holds it (and at once when the request predates the claim).
	Cancelled <-chan struct{}

	q       *Queue
	token   uint64
	settled atomic.Bool
}

// Settled reports whether a settlement of this claim succeeded.
func (c *Claim) Settled() bool { return c.settled.Load() }

// Claim claims the first ready job of queue (highest priority, then oldest)
// and returns it, or (nil, nil) when none is ready. The claim is a
// non-durable commit: a crash before the next durable commit forgets it and
// the job is pending again.
func (q *Queue) Claim(ctx context.Context, queue string) (*Claim, error) {
	cs, err := q.ClaimBatch(ctx, queue, 1)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	return cs[0], nil
}

// ClaimBatch claims up to max ready jobs of queue in one commit, in claim
// order. It returns an empty slice when none is ready.
func (q *Queue) ClaimBatch(ctx context.Context, queue string, max int) ([]*Claim, error) {
	if err := validName("queue name", queue); err != nil {
		return nil, err
	}
	if max <= 0 {
		return nil, invalidf("ClaimBatch max %d must be positive", max)
	}
	qs := q.state(queue)
	qs.claimMu.Lock()
	defer qs.claimMu.Unlock()

	type got struct {
		r       *record
		payload []byte
	}
	var claimed []got
	var now int64
	err := q.update(ctx, "claim", false, func(t *txn) error {
		claimed, now = claimed[:0], t.now
		pfx := queuePrefix(pfxReady, queue)
		var keys [][]byte
		var ids []string
		err := t.tx.Scan(ctx, kv.Range{Start: pfx, End: prefixEnd(pfx)}, func(k, v []byte) (bool, error) {
			if q.isGated(qs, string(v)) {
				return true, nil // its commit is not durable yet
			}
			keys, ids = append(keys, bytes.Clone(k)), append(ids, string(v))
			return len(ids) < max, nil
		})
		if err != nil {
			return err
		}
		for i, id := range ids {
			r, err := t.record(id)
			if err != nil {
				return err
			}
			if r == nil || r.State != StatePending {
				// Impossible by construction; drop the entry rather than
				// hand out a job twice or stall the queue on it.
				q.log.Warn("dropping stale ready-index entry", "queue", queue, "job", id)
				if err := t.del(keys[i]); err != nil {
					return err
				}
				continue
			}
			payload := r.Inline
			if r.HasPayload {
				if payload, _, err = t.get(payloadKey(id)); err != nil {
					return err
				}
				payload = bytes.Clone(payload)
			}
			if err := t.unindex(r); err != nil {
				return err
			}
			if err := t.releaseDedup(r); err != nil {
				return err
			}
			r.State, r.Token, r.ClaimedAt = StateClaimed, q.nextToken(), t.now
			r.Attempts++
			r.beginAttempt(t.now)
			if err := t.putRecord(r); err != nil {
				return err
			}
			if err := t.put(claimedKey(queue, id), nil); err != nil {
				return err
			}
			if err := t.add(queue, StateClaimed, 1); err != nil {
				return err
			}
			claimed = append(claimed, got{r, payload})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lease := q.opts.config(queue).LeaseDuration
	expires := fromNanos(now).Add(lease)
	out := make([]*Claim, len(claimed))
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, g := range claimed {
		l := q.registerLeaseLocked(g.r, expires)
		out[i] = &Claim{Job: g.r.job(g.payload), Cancelled: l.cancelled, q: q, token: g.r.Token}
	}
	return out, nil
}

func (q *Queue) registerLeaseLocked(r *record, expires time.Time) *lease {
	l := &lease{token: r.Token, expires: expires, cancelled: make(chan struct{})}
	if _, early := q.earlyCancel[r.Token]; r.CancelRequested || early {
		delete(q.earlyCancel, r.Token)
		l.signalCancel()
	}
	q.leases[r.ID] = l
	return l
}

// ClaimWait claims the first ready job of queue, waiting until one is ready.
// It waits on a notification that every commit making work ready sends, so
// an idle queue costs nothing. It returns ctx's error when ctx ends,
// ErrClosed when the queue closes, and at once the kv's error (wrapping
// kv.ErrStopped or kv.ErrFenced) when the store stops accepting commits.
func (q *Queue) ClaimWait(ctx context.Context, queue string) (*Claim, error) {
	if err := validName("queue name", queue); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return nil, ErrClosed
		}
		ready := q.stateLocked(queue).ready
		q.mu.Unlock()
		c, err := q.Claim(ctx, queue)
		if c != nil || err != nil {
			return c, err
		}
		if h := q.idleHook.Load(); h != nil {
			(*h)(queue)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.done:
			return nil, ErrClosed
		case <-q.db.Stopped():
			// Fenced or stopped after a WAL failure: no claim can commit.
			return nil, wrapKV("claim", q.db.Err())
		}
	}
}

// RenewLease sets c's lease to expire d from now. Leases live in memory:
// renewing costs no request.
func (q *Queue) RenewLease(ctx context.Context, c *Claim, d time.Duration) error {
	return q.setLease(c, d, false)
}

// EnsureLeaseAtLeast extends c's lease to expire no sooner than d from now;
// a longer lease is left alone.
func (q *Queue) EnsureLeaseAtLeast(ctx context.Context, c *Claim, d time.Duration) error {
	return q.setLease(c, d, true)
}

func (q *Queue) setLease(c *Claim, d time.Duration, extendOnly bool) error {
	if d <= 0 {
		return invalidf("lease duration %s must be positive", d)
	}
	if c == nil {
		return invalidf("nil claim")
	}
	if c.q != q {
		return fmt.Errorf("%w: job %q: the claim was made by another Queue (closed or reopened since)", ErrClaimLost, c.Job.ID)
	}
	until := q.clock.Now().Add(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	l := q.leases[c.Job.ID]
	if l == nil || l.token != c.token {
		return fmt.Errorf("%w: job %q: the lease is gone (settled, reaped or re-claimed)", ErrClaimLost, c.Job.ID)
	}
	if !extendOnly || l.expires.Before(until) {
		l.expires = until
	}
	return nil
}

// LeaseExpiry returns when c's lease expires, and false when c no longer
// holds a lease.
func (q *Queue) LeaseExpiry(c *Claim) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.leases[c.Job.ID]; l != nil && c.q == q && l.token == c.token {
		return l.expires, true
	}
	return time.Time{}, false
}

// Reap requeues (or dead-letters, when the attempt was the last) every
// claimed job whose lease has expired and returns how many it moved. The
// background reaper calls it every Options.ReapInterval.
func (q *Queue) Reap(ctx context.Context) (int, error) {
	now := q.clock.Now()
	var expired []leaseRef
	q.mu.Lock()
	for tok, at := range q.earlyCancel {
		if now.Sub(at) > time.Minute { // no claim takes that long to register
			delete(q.earlyCancel, tok)
		}
	}
	for id, l := range q.leases {
		if !l.expires.After(now) {
			expired = append(expired, leaseRef{id, l.token})
		}
	}
	q.mu.Unlock()
	// In ID order, like recovery at Open, so which job of several with the
	// same dedup key takes it back does not depend on map order.
	sort.Slice(expired, func(i, j int) bool { return expired[i].id < expired[j].id })
	moved := 0
	for len(expired) > 0 {
		batch := expired[:min(len(expired), recoverBatch)]
		expired = expired[len(batch):]
		n := 0
		err := q.update(ctx, "reap expired leases", false, func(t *txn) error {
			n = 0
			for _, ref := range batch {
				if !q.leaseExpired(ref, now) {
					continue // renewed since
				}
				r, err := t.record(ref.id)
				if err != nil {
					return err
				}
				if r == nil || r.State != StateClaimed || r.Token != ref.token {
					t.drops = append(t.drops, ref) // settled meanwhile
					continue
				}
				if _, err := t.requeueClaimed(ref.id, "lease_expired", "lease expired"); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return moved, err
		}
		moved += n
	}
	if moved > 0 {
		q.log.Debug("reaped expired leases", "jobs", moved)
	}
	return moved, nil
}

func (q *Queue) leaseExpired(ref leaseRef, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.leases[ref.id]
	return l != nil && l.token == ref.token && !l.expires.After(now)
}
