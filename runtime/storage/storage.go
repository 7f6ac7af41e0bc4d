package storage

import (
	"context"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The queue a runtime runs on, and its read-only view.
type (
	// Queue is the store opened as its only writer (Open).
	Queue = queue.Queue
	// Reader is a read-only view of a store another process may write
	// (OpenReader).
	Reader = queue.Reader
	// Options configure Open and OpenReader.
	Options = queue.Options
	// QueueConfig is one queue's attempts, lease, backoff and retention
	// (Options.QueueConfigs, Options.DefaultConfig).
	QueueConfig = queue.QueueConfig
)

// Jobs and the caller KV, as the runtime's users see them.
type (
	// Job is a job record (Queue.ListJobs).
	Job = queue.Job
	// JobState is where a job is in its life.
	JobState = queue.State
	// Attempt is one claim of a job (Queue.Attempts).
	Attempt = queue.Attempt
	// KVEntry is one caller-KV key and value (KVScan).
	KVEntry = queue.KVEntry
	// KVWrite is one caller-KV write of a settlement or a batch.
	KVWrite = queue.KVWrite
	// KVBatch is an atomic set of caller-KV writes and deletes (KVApply).
	KVBatch = queue.KVBatch
	// Health is the store's write-path health (Queue.Health).
	Health = kv.Health
	// Histogram is a latency histogram of Health.
	Histogram = kv.Histogram
)

// Job states a caller lists by.
const (
	StatePending   = queue.StatePending
	StateScheduled = queue.StateScheduled
	// StateClaimed is a job a worker is running.
	StateClaimed = queue.StateClaimed
)

// MaxKVValueSize caps a caller-KV value.
const MaxKVValueSize = queue.MaxKVValueSize

var (
	// ErrNotFound reports a caller-KV key or a job that is not there.
	ErrNotFound = queue.ErrNotFound
	// ErrFenced reports that a newer writer took the store over: this
	// process may not write it any more.
	ErrFenced = kv.ErrFenced
)

// Open opens store as its only writer: the queue every runtime on it
// shares (runtime.New). Cost: see runtime/store/queue, Open.
func Open(ctx context.Context, store objstore.Store, opts Options) (*Queue, error) {
	return queue.Open(ctx, store, opts)
}

// OpenReader opens store read-only, beside a writer in another process or
// none; runtime.NewInspector reads runs through it. Cost: see
// runtime/store/queue, OpenReader.
func OpenReader(ctx context.Context, store objstore.Store, opts Options) (*Reader, error) {
	return queue.OpenReader(ctx, store, opts)
}
