package kv

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"
)

// Sentinel errors. Returned errors wrap them; branch with errors.Is.
var (
	// ErrNotFound reports a Get of a key that does not exist.
	ErrNotFound = errors.New("kv: key not found")
	// ErrConflict reports an optimistic commit that lost: a key it read or a
	// range it scanned changed after its snapshot. Retry the transaction.
	ErrConflict = errors.New("kv: transaction conflict")
	// ErrFenced reports that a newer writer opened the store; this DB is dead
	// and every call returns it. Open the store again to continue.
	ErrFenced = errors.New("kv: fenced by a newer writer")
	// ErrCorrupt reports a WAL, chunk or manifest object that failed its
	// checksum or decoding; the message names the object.
	ErrCorrupt = errors.New("kv: corrupt object")
	// ErrClosed reports a call on a closed DB or Reader.
	ErrClosed = errors.New("kv: closed")
	// ErrStopped reports a DB that stopped accepting commits because a WAL
	// write failed for good (retries exhausted, or an unreadable object in
	// its slot): writing on would leave a gap that hides every later WAL
	// object from replay. Every later call returns it wrapped, with the
	// failure that caused it. Reopen the store to continue; commits not yet
	// durable at the failure may be lost.
	ErrStopped = errors.New("kv: stopped after a failed WAL write")
	// ErrCommitUncertain reports a durable commit (Commit, Update,
	// Durability.Wait, Sync) that was applied in memory, visible to later
	// reads, but whose WAL write failed or was not awaited: it may or may
	// not survive a crash. The error also wraps the cause (ErrStopped,
	// ErrFenced, a context error). A commit that fails without it was never
	// applied.
	ErrCommitUncertain = errors.New("kv: commit applied, durability unknown")
	// ErrTxDone reports use of a committed or rolled-back Tx.
	ErrTxDone = errors.New("kv: transaction already committed or rolled back")
	// ErrTooLarge reports a key or value over the limits.
	ErrTooLarge = errors.New("kv: key or value too large")
)

// notFoundError is ErrNotFound naming the key. Lookups of absent keys are
// on hot paths (existence checks), so the message is formatted only when
// someone prints it.
type notFoundError struct{ key string }

func (e *notFoundError) Error() string { return fmt.Sprintf("%v: %q", ErrNotFound, e.key) }
func (e *notFoundError) Unwrap() error { return ErrNotFound }

func notFound(key []byte) error { return &notFoundError{key: string(key)} }

// DefaultLinger is Options.Linger's default.
const DefaultLinger = 10 * time.Millisecond

// MaxKeySize is the largest key accepted, in bytes.
const MaxKeySize = 16 << 10

// Options configure a DB or Reader. The zero value is usable.
type Options struct {
	// Prefix puts every object of this store under Prefix + "/" (e.g. "db");
	// "" means the store root.
	Prefix string
	// Logger receives lifecycle events; nil means slog.Default().
	Logger *slog.Logger
	// LargeValueThreshold: values longer than this live in their own
	// objects. Default 64 KiB.
	LargeValueThreshold int
	// MaxValueSize is the largest value accepted. Default 64 MiB.
	MaxValueSize int
	// CheckpointWALBytes starts a checkpoint when the WAL written since the
	// last one passes this many bytes. Default 16 MiB: Open replays the WAL
	// since the last checkpoint, so this bounds the reopen (about 0.2 s of
	// CPU per 16 MiB here), while a checkpoint rewrites only the chunks
	// whose keys changed.
	CheckpointWALBytes int64
	// CheckpointWALObjects starts a checkpoint when this many WAL objects
	// were written since the last one. Default 2000.
	CheckpointWALObjects int
	// MaxBatchBytes caps one WAL object (a single larger commit still goes
	// out alone). Default 16 MiB.
	MaxBatchBytes int
	// ConflictRetries is how often Update retries fn on ErrConflict.
	// Default 100.
	ConflictRetries int
	// Clock is the kv's one source of time (default clock.System()): it
	// times the linger, the commit delay and the pauses between retries
	// of a failing store request, measures WAL PUTs, and stamps Health,
	// Stats and logs. Its waits are waits for the store, so a queue does
	// not give its kv its own clock: a test's Mock then does not hold
	// commits back.
	Clock clock.Clock

	// ChunkBytes is the target size of a checkpoint chunk. Default 2 MiB.
	ChunkBytes int
	// CloseTimeout bounds how long Close keeps retrying to make pending
	// commits durable during a store outage. Default 30 s.
	CloseTimeout time.Duration
	// RequestTimeout bounds one store request; a request that hangs longer
	// is abandoned and retried (a PUT is then read back). Default 20 s.
	RequestTimeout time.Duration
	// Rand seeds batch ids, writer ids and backoff jitter; nil means a
	// random seed. It is read only inside Open and OpenReader.
	Rand *rand.Rand
	// DisableAutoCheckpoint turns off size-triggered checkpoints (tests).
	DisableAutoCheckpoint bool
	// Linger is how long a WAL batch holding only non-durable commits
	// waits for a durable commit to share its PUT before it is written
	// anyway. A durable commit, Sync or Close ends the wait at once. So a
	// claim (non-durable) and the acknowledgement that follows it within
	// Linger cost one PUT, and a non-durable commit alone still becomes
	// durable within Linger plus one PUT. Default 10 ms; negative writes
	// every batch at once.
	Linger time.Duration
	// CommitDelay bounds how long a WAL batch that a durable commit or a
	// Sync made ready waits for registered committers (Committer) that
	// have not joined it yet, PostgreSQL's commit_delay with
	// commit_siblings counted exactly. The wait also ends once no durable
	// commit joined for one WAL PUT's duration (the last one's), and it
	// never happens when every registered committer joined already (a
	// lone committer never waits). Default DefaultCommitDelay (5 ms);
	// negative turns the wait off.
	CommitDelay time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LargeValueThreshold <= 0 {
		o.LargeValueThreshold = 64 << 10
	}
	if o.MaxValueSize <= 0 {
		o.MaxValueSize = 64 << 20
	}
	if o.CheckpointWALBytes <= 0 {
		o.CheckpointWALBytes = 16 << 20
	}
	if o.CheckpointWALObjects <= 0 {
		o.CheckpointWALObjects = 2000
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 16 << 20
	}
	if o.ConflictRetries <= 0 {
		o.ConflictRetries = 100
	}
	if o.Clock == nil {
		o.Clock = clock.System()
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 2 << 20
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 30 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 20 * time.Second
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	if o.CommitDelay == 0 {
		o.CommitDelay = DefaultCommitDelay
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return o
}

// Range selects keys in [Start, End) in ascending or descending order.
type Range struct {
	// Start is the first key included; nil means from the first key.
	Start []byte
	// End is the first key excluded; nil means through the last key.
	End []byte
	// Reverse visits keys in descending order.
	Reverse bool
	// Limit stops after this many keys; 0 means no limit.
	Limit int
}

// PrefixRange returns the ascending Range of every key starting with prefix.
func PrefixRange(prefix []byte) Range {
	return Range{Start: append([]byte(nil), prefix...), End: prefixEnd(prefix)}
}

// prefixEnd returns the smallest key greater than every key with the
// prefix, or nil if there is none (prefix is all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (r Range) contains(k []byte) bool {
	return (r.Start == nil || bytes.Compare(k, r.Start) >= 0) && (r.End == nil || bytes.Compare(k, r.End) < 0)
}

func checkKey(k []byte) error {
	if len(k) > MaxKeySize {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrTooLarge, len(k), MaxKeySize)
	}
	return nil
}

// largeRef names the object holding a large value.
type largeRef struct {
	name string
	size int64
}

// entry is one live key in the memtable. Entries are immutable once in a
// tree, so snapshots share them.
type entry struct {
	key   []byte
	val   []byte
	large *largeRef
}

func entryLess(a, b *entry) bool { return bytes.Compare(a.key, b.key) < 0 }

func (e *entry) size() int {
	if e.large != nil {
		return len(e.key) + len(e.large.name) + 16
	}
	return len(e.key) + len(e.val)
}
