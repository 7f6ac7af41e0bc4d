package queue

import (
	"context"
	"fmt"
	"sync"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Reader is a read-only view of a queue store for another process: it
// writes nothing and never disturbs the writer. It sees the state as of its
// last Refresh (commits the writer has made durable by then).
type Reader struct {
	r    *kv.Reader
	view view

	mu     sync.Mutex
	closed bool
}

// OpenReader opens a Reader on the queue store under opts.Prefix.
func OpenReader(ctx context.Context, store objstore.Store, opts Options) (*Reader, error) {
	opts = opts.withDefaults()
	r, err := kv.OpenReader(ctx, store, opts.KV)
	if err != nil {
		return nil, fmt.Errorf("queue: open reader at prefix %q: %w", opts.Prefix, err)
	}
	return &Reader{r: r, view: view{src: r, opts: opts}}, nil
}

func (r *Reader) checkOpen() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	return nil
}

// Refresh catches up with the writer's durable commits.
func (r *Reader) Refresh(ctx context.Context) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	return wrapKV("reader refresh", r.r.Refresh(ctx))
}

// KVGet is Queue.KVGet.
func (r *Reader) KVGet(ctx context.Context, key string) ([]byte, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return r.view.kvGet(ctx, key)
}

// KVScan is Queue.KVScan.
func (r *Reader) KVScan(ctx context.Context, prefix, startAfter string, limit int) ([]KVEntry, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return r.view.kvScan(ctx, prefix, startAfter, limit)
}

// KVScanDesc is Queue.KVScanDesc.
func (r *Reader) KVScanDesc(ctx context.Context, prefix, startBefore string, limit int) ([]KVEntry, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return r.view.kvScanDesc(ctx, prefix, startBefore, limit)
}

// Stats is Queue.Stats.
func (r *Reader) Stats(ctx context.Context, queue string) (Stats, error) {
	if err := r.checkOpen(); err != nil {
		return Stats{}, err
	}
	return r.view.stats(ctx, queue)
}

// GetJob is Queue.GetJob.
func (r *Reader) GetJob(ctx context.Context, id string) (Job, error) {
	if err := r.checkOpen(); err != nil {
		return Job{}, err
	}
	return r.view.getJob(ctx, id)
}

// ListJobs is Queue.ListJobs.
func (r *Reader) ListJobs(ctx context.Context, queue string, state State, after string, limit int) ([]Job, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return r.view.listJobs(ctx, queue, state, after, limit)
}

// DeadJobs is Queue.DeadJobs.
func (r *Reader) DeadJobs(ctx context.Context, queue string, after string, limit int) ([]Job, error) {
	return r.ListJobs(ctx, queue, StateDead, after, limit)
}

// Attempts is Queue.Attempts.
func (r *Reader) Attempts(ctx context.Context, id string) ([]Attempt, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	return r.view.attempts(ctx, id)
}

// Close releases the Reader. It is idempotent.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	return wrapKV("reader close", r.r.Close())
}

// JobState is Queue.JobState.
func (r *Reader) JobState(ctx context.Context, id, header string) (State, string, error) {
	if err := r.checkOpen(); err != nil {
		return "", "", err
	}
	return r.view.jobState(ctx, id, header)
}
