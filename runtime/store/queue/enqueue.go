package queue

import (
	"bytes"
	"context"
	"fmt"
)

// Enqueue adds one job to queue. It returns once the job is durable. A
// dedup hit (or an ID that names an existing job) writes nothing and
// returns the existing job's ID with Duplicate set.
func (q *Queue) Enqueue(ctx context.Context, queue string, payload []byte, opts EnqueueOptions) (EnqueueResult, error) {
	return q.EnqueueWithKV(ctx, queue, payload, opts, nil)
}

// EnqueueWithKV adds one job and writes puts into the caller KV in the same
// durable commit. A duplicate writes neither the job nor the KV entries.
func (q *Queue) EnqueueWithKV(ctx context.Context, queue string, payload []byte, opts EnqueueOptions, puts []KVWrite) (EnqueueResult, error) {
	nj := NewJob{Queue: queue, Payload: payload, Options: opts}
	if err := validateNewJob(&nj); err != nil {
		return EnqueueResult{}, err
	}
	if err := validateKVWrites(puts); err != nil {
		return EnqueueResult{}, err
	}
	var res EnqueueResult
	var share float64
	err := q.update(ctx, "enqueue", true, func(t *txn) error {
		t.shareTo = &share
		var err error
		if res, err = t.enqueue(&nj); err != nil || res.Duplicate {
			return err
		}
		for _, w := range puts {
			if err := t.put(kvKey(w.Key), w.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return EnqueueResult{}, err
	}
	res.WALShare = share
	return res, nil
}

// EnqueueBatch adds jobs atomically in one durable commit. Each job is
// deduplicated on its own (also against earlier jobs of the batch); the
// results are in the order of jobs.
func (q *Queue) EnqueueBatch(ctx context.Context, jobs []NewJob) ([]EnqueueResult, error) {
	for i := range jobs {
		if err := validateNewJob(&jobs[i]); err != nil {
			return nil, fmt.Errorf("job %d of the batch: %w", i, err)
		}
	}
	res := make([]EnqueueResult, len(jobs))
	err := q.update(ctx, "enqueue batch", true, func(t *txn) error {
		for i := range jobs {
			var err error
			if res[i], err = t.enqueue(&jobs[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func validateNewJob(j *NewJob) error {
	if err := validName("queue name", j.Queue); err != nil {
		return err
	}
	if len(j.Payload) > MaxPayloadSize {
		return fmt.Errorf("%w: payload of a job for queue %q is %d bytes; the limit is %d (store large data elsewhere and enqueue a reference)",
			ErrTooLarge, j.Queue, len(j.Payload), MaxPayloadSize)
	}
	o := &j.Options
	if o.ID != "" {
		if err := validName("job ID", o.ID); err != nil {
			return err
		}
	}
	if o.DedupKey != "" {
		if err := validName("dedup key", o.DedupKey); err != nil {
			return err
		}
	}
	if o.MaxAttempts < 0 {
		return invalidf("MaxAttempts %d is negative; use 0 for the queue default", o.MaxAttempts)
	}
	size := 0
	for k, v := range o.Headers {
		size += len(k) + len(v)
	}
	if size > maxHeadersSize {
		return fmt.Errorf("%w: headers of a job for queue %q total %d bytes; the limit is %d", ErrTooLarge, j.Queue, size, maxHeadersSize)
	}
	return nil
}

func validateKVWrites(ws []KVWrite) error {
	for _, w := range ws {
		if err := validKVKey(w.Key); err != nil {
			return err
		}
		if len(w.Value) > MaxKVValueSize {
			return fmt.Errorf("%w: KV value for %q is %d bytes; the limit is %d", ErrTooLarge, w.Key, len(w.Value), MaxKVValueSize)
		}
	}
	return nil
}

func validateEffects(e *SettlementEffects) error {
	if e == nil {
		return nil
	}
	for i := range e.Enqueue {
		if err := validateNewJob(&e.Enqueue[i]); err != nil {
			return fmt.Errorf("effect enqueue %d: %w", i, err)
		}
	}
	if err := validateKVWrites(e.KVPuts); err != nil {
		return fmt.Errorf("effect KV put: %w", err)
	}
	for _, k := range e.KVDeletes {
		if err := validKVKey(k); err != nil {
			return fmt.Errorf("effect KV delete: %w", err)
		}
	}
	for _, w := range e.KVCompareDeletes {
		if err := validKVKey(w.Key); err != nil {
			return fmt.Errorf("effect KV compare-delete: %w", err)
		}
		if w.Value == nil {
			return invalidf("effect KV compare-delete of %q: expected value is nil; pass the value the key must hold", w.Key)
		}
	}
	return nil
}

// enqueue writes one validated job unless it is a duplicate.
func (t *txn) enqueue(j *NewJob) (EnqueueResult, error) { return t.enqueueAs(j, false) }

// enqueueAs is enqueue; claim creates a job due now claimed by this
// transaction's caller (t.claims) instead of pending.
func (t *txn) enqueueAs(j *NewJob, claim bool) (EnqueueResult, error) {
	o := &j.Options
	id := o.ID
	if id != "" {
		_, exists, err := t.get(jobKey(id))
		if err != nil {
			return EnqueueResult{}, err
		}
		if exists {
			return EnqueueResult{ID: id, Duplicate: true}, nil
		}
	}
	if o.DedupKey != "" {
		v, held, err := t.get(dedupKey(j.Queue, o.DedupKey))
		if err != nil {
			return EnqueueResult{}, err
		}
		if held {
			return EnqueueResult{ID: string(v), Duplicate: true}, nil
		}
	}
	if id == "" {
		var err error
		if id, err = t.q.newID(fromNanos(t.now)); err != nil {
			return EnqueueResult{}, err
		}
	}
	cfg := t.q.opts.config(j.Queue)
	r := &record{
		ID: id, Queue: j.Queue, Headers: o.Headers, MaxAttempts: cfg.MaxAttempts, Priority: cfg.DefaultPriority,
		EnqueuedAt: t.now, DedupKey: o.DedupKey, HasPayload: len(j.Payload) > inlinePayloadMax,
	}
	if !r.HasPayload && len(j.Payload) > 0 {
		r.Inline = j.Payload
	}
	if o.MaxAttempts > 0 {
		r.MaxAttempts = o.MaxAttempts
	}
	if o.Priority != nil {
		r.Priority = *o.Priority
	}
	if r.HasPayload {
		if err := t.put(payloadKey(id), j.Payload); err != nil {
			return EnqueueResult{}, err
		}
	}
	runAt := nanos(o.RunAt)
	claim = claim && runAt <= t.now
	if o.DedupKey != "" && !claim { // a claimed job holds no dedup key
		if err := t.put(dedupKey(j.Queue, o.DedupKey), []byte(id)); err != nil {
			return EnqueueResult{}, err
		}
	}
	var err error
	switch {
	case runAt > t.now:
		r.RunAt = runAt
		err = t.makeScheduled(r)
	case claim:
		err = t.makeClaimed(r, j.Payload)
	default:
		err = t.makePending(r)
	}
	if err != nil {
		return EnqueueResult{}, err
	}
	t.durable = true
	return EnqueueResult{ID: id}, nil
}

// applyEffects writes validated settlement effects into t.
func (t *txn) applyEffects(e *SettlementEffects) error {
	if e != nil && e.OnDurable != nil {
		t.durable = true
		t.onDurable = append(t.onDurable, e.OnDurable)
	}
	if e.empty() {
		return nil
	}
	t.durable = true
	for i := range e.Enqueue {
		if _, err := t.enqueueAs(&e.Enqueue[i], i == 0 && e.ClaimFirst && t.claimFor == e); err != nil {
			return err
		}
	}
	for _, w := range e.KVPuts {
		if err := t.put(kvKey(w.Key), w.Value); err != nil {
			return err
		}
	}
	for _, k := range e.KVDeletes {
		if err := t.del(kvKey(k)); err != nil {
			return err
		}
	}
	for _, w := range e.KVCompareDeletes {
		// The read joins the transaction's read set: a write to the key
		// after it makes the commit conflict and re-run, so the compare
		// holds at commit time.
		cur, ok, err := t.get(kvKey(w.Key))
		if err != nil {
			return err
		}
		if ok && bytes.Equal(cur, w.Value) {
			if err := t.del(kvKey(w.Key)); err != nil {
				return err
			}
		}
	}
	return nil
}
