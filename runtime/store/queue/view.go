package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
)

// Paging limits of listing calls.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// source is what the read-side needs of a kv: *kv.DB and *kv.Reader.
type source interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Scan(ctx context.Context, r kv.Range, fn func(key, value []byte) (bool, error)) error
}

// view implements the inspection calls shared by Queue and Reader.
type view struct {
	src  source
	opts Options
}

func pageSize(limit int) int {
	if limit <= 0 {
		return defaultPageSize
	}
	return min(limit, maxPageSize)
}

func (v view) get(ctx context.Context, k []byte) ([]byte, bool, error) {
	b, err := v.src.Get(ctx, k)
	if errors.Is(err, kv.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrapKV("read", err)
	}
	return b, true, nil
}

func (v view) kvGet(ctx context.Context, key string) ([]byte, error) {
	if err := validKVKey(key); err != nil {
		return nil, err
	}
	b, ok, err := v.get(ctx, kvKey(key))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFoundKV(key)
	}
	return bytes.Clone(b), nil
}

func (v view) kvScan(ctx context.Context, prefix, startAfter string, limit int) ([]KVEntry, error) {
	if len(prefix) > MaxKVKeySize || len(startAfter) > MaxKVKeySize {
		return nil, invalidf("KV scan prefix or cursor longer than %d bytes", MaxKVKeySize)
	}
	pfx := kvKey(prefix)
	start := pfx
	if startAfter != "" {
		if a := after(kvKey(startAfter)); bytes.Compare(a, start) > 0 {
			start = a
		}
	}
	var out []KVEntry
	err := v.src.Scan(ctx, kv.Range{Start: start, End: prefixEnd(pfx), Limit: pageSize(limit)}, func(k, val []byte) (bool, error) {
		out = append(out, KVEntry{Key: string(k[len(pfxKV):]), Value: bytes.Clone(val)})
		return true, nil
	})
	if err != nil {
		return nil, wrapKV("KV scan", err)
	}
	return out, nil
}

func (v view) kvScanDesc(ctx context.Context, prefix, startBefore string, limit int) ([]KVEntry, error) {
	if len(prefix) > MaxKVKeySize || len(startBefore) > MaxKVKeySize {
		return nil, invalidf("KV scan prefix or cursor longer than %d bytes", MaxKVKeySize)
	}
	pfx := kvKey(prefix)
	end := prefixEnd(pfx)
	if startBefore != "" {
		b := kvKey(startBefore)
		if bytes.Compare(b, pfx) <= 0 {
			return nil, nil
		}
		if end == nil || bytes.Compare(b, end) < 0 {
			end = b
		}
	}
	var out []KVEntry
	err := v.src.Scan(ctx, kv.Range{Start: pfx, End: end, Reverse: true, Limit: pageSize(limit)}, func(k, val []byte) (bool, error) {
		out = append(out, KVEntry{Key: string(k[len(pfxKV):]), Value: bytes.Clone(val)})
		return true, nil
	})
	if err != nil {
		return nil, wrapKV("KV scan", err)
	}
	return out, nil
}

func (v view) stats(ctx context.Context, queue string) (Stats, error) {
	if err := validName("queue name", queue); err != nil {
		return Stats{}, err
	}
	var s Stats
	for _, f := range []struct {
		st  State
		dst *int64
	}{{StatePending, &s.Pending}, {StateScheduled, &s.Scheduled}, {StateClaimed, &s.Claimed}, {StateDone, &s.Done}, {StateDead, &s.Dead}} {
		b, ok, err := v.get(ctx, countKey(queue, f.st))
		if err != nil {
			return Stats{}, err
		}
		if ok {
			if len(b) != 8 {
				return Stats{}, fmt.Errorf("%w: counter %s of queue %q is %d bytes, want 8", ErrCorrupt, f.st, queue, len(b))
			}
			*f.dst = int64(binary.BigEndian.Uint64(b))
		}
	}
	return s, nil
}

// record returns job id, or an ErrNotFound error.
func (v view) record(ctx context.Context, id string) (*record, error) {
	if err := validName("job ID", id); err != nil {
		return nil, err
	}
	b, ok, err := v.get(ctx, jobKey(id))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: job %q", ErrNotFound, id)
	}
	return decodeRecord(b)
}

func (v view) job(ctx context.Context, r *record) (Job, error) {
	payload := r.Inline
	if r.HasPayload {
		b, _, err := v.get(ctx, payloadKey(r.ID))
		if err != nil {
			return Job{}, err
		}
		payload = bytes.Clone(b)
	}
	return r.job(payload), nil
}

func (v view) getJob(ctx context.Context, id string) (Job, error) {
	r, err := v.record(ctx, id)
	if err != nil {
		return Job{}, err
	}
	return v.job(ctx, r)
}

// jobState returns job id's state and the value of its header name ("" when
// absent), or an ErrNotFound error.
func (v view) jobState(ctx context.Context, id, header string) (State, string, error) {
	if err := validName("job ID", id); err != nil {
		return "", "", err
	}
	b, ok, err := v.get(ctx, jobKey(id))
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", "", fmt.Errorf("%w: job %q", ErrNotFound, id)
	}
	st, value, err := readJobState(b, header)
	if err != nil {
		return "", "", fmt.Errorf("%w: job record %q: %w", ErrCorrupt, id, err)
	}
	switch st {
	case StatePending, StateScheduled, StateClaimed, StateDone, StateDead:
	default:
		return "", "", fmt.Errorf("%w: job record %q has unknown state %q", ErrCorrupt, id, st)
	}
	return st, value, nil
}

func (v view) attempts(ctx context.Context, id string) ([]Attempt, error) {
	r, err := v.record(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.attempts(), nil
}

// indexPrefix returns the index that lists jobs of a state.
func indexPrefix(st State) (string, error) {
	switch st {
	case StatePending:
		return pfxReady, nil
	case StateScheduled:
		return pfxScheduled, nil
	case StateClaimed:
		return pfxClaimed, nil
	case StateDone:
		return pfxDone, nil
	case StateDead:
		return pfxDead, nil
	}
	return "", invalidf("state %q is not one of pending, scheduled, claimed, done, dead", st)
}

// position is r's key in the index of state st: where a listing that
// stopped at r resumes.
func position(r *record, st State) []byte {
	switch st {
	case StatePending:
		return readyKey(r.Queue, r.Priority, r.Seq)
	case StateScheduled:
		return scheduledKey(r.Queue, r.RunAt, r.ID)
	case StateClaimed:
		return claimedKey(r.Queue, r.ID)
	case StateDone:
		return doneKey(r.Queue, r.CompletedAt, r.ID)
	default:
		return deadKey(r.Queue, r.FailedAt, r.ID)
	}
}

func (v view) listJobs(ctx context.Context, queue string, st State, afterID string, limit int) ([]Job, error) {
	if err := validName("queue name", queue); err != nil {
		return nil, err
	}
	pfx, err := indexPrefix(st)
	if err != nil {
		return nil, err
	}
	qp := queuePrefix(pfx, queue)
	start := qp
	if afterID != "" {
		r, err := v.record(ctx, afterID)
		switch {
		case errors.Is(err, ErrNotFound):
			// The cursor job is gone: removed jobs leave from the head of
			// every index, so the head is where the listing resumes.
		case err != nil:
			return nil, err
		case r.Queue != queue:
			return nil, invalidf("listing cursor %q is a job of queue %q, not %q", afterID, r.Queue, queue)
		default:
			start = after(position(r, st))
		}
	}
	var ids []string
	err = v.src.Scan(ctx, kv.Range{Start: start, End: prefixEnd(qp), Limit: pageSize(limit)}, func(k, val []byte) (bool, error) {
		switch st {
		case StatePending:
			ids = append(ids, string(val))
		case StateClaimed:
			ids = append(ids, string(k[len(qp):]))
		default:
			if _, id, ok := timeIndexParts(pfx, queue, k); ok {
				ids = append(ids, id)
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, wrapKV("list jobs", err)
	}
	out := make([]Job, 0, len(ids))
	for _, id := range ids {
		r, err := v.record(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // moved on between the index read and this read
		}
		if err != nil {
			return nil, err
		}
		if r.State != st {
			continue
		}
		j, err := v.job(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// Stats returns queue's job counts by state.
func (q *Queue) Stats(ctx context.Context, queue string) (Stats, error) {
	if err := q.checkOpen(); err != nil {
		return Stats{}, err
	}
	return q.view.stats(ctx, queue)
}

// GetJob returns job id with its payload, or ErrNotFound.
func (q *Queue) GetJob(ctx context.Context, id string) (Job, error) {
	if err := q.checkOpen(); err != nil {
		return Job{}, err
	}
	return q.view.getJob(ctx, id)
}

// JobState returns job id's state and the value of its header name (""
// when the job has none), or ErrNotFound: GetJob's State and
// Headers[name] without decoding the rest of the record or reading its
// payload, for callers that visit many jobs (the runtime counting runs by
// state).
func (q *Queue) JobState(ctx context.Context, id, header string) (State, string, error) {
	if err := q.checkOpen(); err != nil {
		return "", "", err
	}
	return q.view.jobState(ctx, id, header)
}

// ListJobs returns up to limit jobs of queue in state, in the state's order:
// pending by priority then FIFO, scheduled by RunAt, claimed by ID, done by
// completion time, dead by failure time. after is the ID of the last job of
// the previous page ("" for the first page); when that job no longer exists
// the listing restarts at the head. limit <= 0 means 100; at most 1000.
func (q *Queue) ListJobs(ctx context.Context, queue string, state State, after string, limit int) ([]Job, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	return q.view.listJobs(ctx, queue, state, after, limit)
}

// DeadJobs is ListJobs for the dead state.
func (q *Queue) DeadJobs(ctx context.Context, queue string, after string, limit int) ([]Job, error) {
	return q.ListJobs(ctx, queue, StateDead, after, limit)
}

// Attempts returns the attempt history of job id, oldest first (at most
// 32), or ErrNotFound.
func (q *Queue) Attempts(ctx context.Context, id string) ([]Attempt, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	return q.view.attempts(ctx, id)
}

// WaitForCompletion blocks until job id is done, dead or removed by Cancel,
// and returns its final snapshot (State done, dead or cancelled; Payload
// unset). A job already done or dead returns at once. It fails with
// ErrNotFound when no such job exists, which includes a job acked earlier
// without KeepDoneJobs retention.
func (q *Queue) WaitForCompletion(ctx context.Context, id string) (Job, error) {
	if err := validName("job ID", id); err != nil {
		return Job{}, err
	}
	ch := make(chan Job, 1)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return Job{}, ErrClosed
	}
	q.waiters[id] = append(q.waiters[id], ch)
	q.mu.Unlock()
	r, err := q.view.record(ctx, id)
	if h := q.waitHook.Load(); h != nil {
		(*h)(id)
	}
	if err == nil && (r.State == StateDone || r.State == StateDead) {
		q.dropWaiter(id, ch)
		// The record read may be a commit still on its way to the store:
		// report it only once it is durable.
		if err := q.db.Sync(ctx); err != nil {
			return Job{}, wrapKV("wait for completion", err)
		}
		return r.job(nil), nil
	}
	if err != nil {
		q.dropWaiter(id, ch)
		select {
		case j := <-ch: // finished between registering and reading
			return j, nil
		default:
			return Job{}, err
		}
	}
	select {
	case j := <-ch:
		return j, nil
	case <-ctx.Done():
		q.dropWaiter(id, ch)
		return Job{}, ctx.Err()
	case <-q.done:
		q.dropWaiter(id, ch)
		return Job{}, ErrClosed
	}
}

func (q *Queue) dropWaiter(id string, ch chan Job) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.waiters[id]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(q.waiters, id)
	} else {
		q.waiters[id] = ws
	}
}
