package kv

import (
	"math"
	"sync"
	"time"
)

// Stats is a snapshot of a DB's counters since Open.
type Stats struct {
	// Commits counts committed transactions with writes, durable or not.
	Commits int64
	// DurableCommits counts commits whose WAL object is in the store.
	DurableCommits int64
	// WALPuts counts successful WAL object writes (fences included).
	WALPuts int64
	// WALBytes counts bytes of WAL objects written.
	WALBytes int64
	// Checkpoints counts checkpoints completed.
	Checkpoints int64
	// Conflicts counts commits that failed with ErrConflict.
	Conflicts int64
	// FlushLatency is the distribution of WAL PUT durations, retries included.
	FlushLatency Histogram
	// Keys is the number of live keys.
	Keys int
	// MemtableBytes approximates the bytes of keys and inline values held.
	MemtableBytes int64
	// WALObjectsSinceCheckpoint and WALBytesSinceCheckpoint measure the WAL
	// a reopen would replay.
	WALObjectsSinceCheckpoint int
	WALBytesSinceCheckpoint   int64
	// ChunksWritten and ChunksReused count checkpoint chunk objects.
	ChunksWritten, ChunksReused int64
	// LargeValuesWritten counts large-value objects written.
	LargeValuesWritten int64
	// HeldBatches counts WAL batches that waited for registered
	// committers before they were written (Options.CommitDelay).
	HeldBatches int64
	// Taken is when the snapshot was taken (Options.Clock).
	Taken time.Time
}

// histBuckets is the number of log-scale buckets: bucket i holds durations
// in [2^(i/4) µs, 2^((i+1)/4) µs), i.e. ±9% resolution up to ~30 minutes.
const histBuckets = 124

// Histogram is a fixed-bucket latency histogram. The zero value is empty.
type Histogram struct {
	Counts [histBuckets]int64
	Total  int64
	Max    time.Duration
}

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	i := int(math.Log2(us) * 4)
	return min(i, histBuckets-1)
}

// Add records one duration.
func (h *Histogram) Add(d time.Duration) {
	h.Counts[bucketOf(d)]++
	h.Total++
	h.Max = max(h.Max, d)
}

// Percentile returns an upper bound of the p-th percentile (0 < p <= 100),
// or 0 when empty.
func (h *Histogram) Percentile(p float64) time.Duration {
	if h.Total == 0 {
		return 0
	}
	want := int64(math.Ceil(float64(h.Total) * p / 100))
	want = max(1, min(want, h.Total))
	var n int64
	for i, c := range h.Counts {
		n += c
		if n >= want {
			up := time.Duration(math.Exp2(float64(i+1)/4) * float64(time.Microsecond))
			return min(up, h.Max)
		}
	}
	return h.Max
}

// P50 is Percentile(50).
func (h *Histogram) P50() time.Duration { return h.Percentile(50) }

// P99 is Percentile(99).
func (h *Histogram) P99() time.Duration { return h.Percentile(99) }

// lockedHist guards a Histogram.
type lockedHist struct {
	mu sync.Mutex
	h  Histogram
}

func (l *lockedHist) add(d time.Duration) {
	l.mu.Lock()
	l.h.Add(d)
	l.mu.Unlock()
}

func (l *lockedHist) get() Histogram {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h
}

// Health says whether the store answers the DB's requests. A store that
// stops answering (network down, server stopped, 5xx) makes requests fail
// with errors a retry may fix: the DB keeps retrying them with backoff
// (commits wait, none is lost or reordered) and Health reports it until
// a request succeeds again.
type Health struct {
	// Failing is true while the latest request to the store failed with a
	// retryable error.
	Failing bool
	// Since is when the current run of failures began.
	Since time.Time
	// LastError is the latest failure.
	LastError error
	// Failures counts failed attempts since Since.
	Failures int64
}

// Health reports whether the store answers; it makes no request.
func (db *DB) Health() Health { return db.o.health.get() }
