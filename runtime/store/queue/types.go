package queue

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
)

// Sentinel errors; match them with errors.Is. kv.ErrFenced passes through
// wrapped: a queue whose store was opened by a newer writer is dead.
var (
	// ErrNotFound reports a missing job or caller-KV key.
	ErrNotFound = errors.New("queue: not found")
	// ErrClaimLost reports a settlement by a claim that is no longer the
	// job's current claim (the job was reaped, re-claimed, requeued at
	// open or removed); nothing was changed.
	ErrClaimLost = errors.New("queue: claim lost")
	// ErrTooLarge reports a payload, header set or KV value over its limit.
	ErrTooLarge = errors.New("queue: too large")
	// ErrInvalid reports a bad argument; the message says which.
	ErrInvalid = errors.New("queue: invalid argument")
	// ErrClosed reports a call on a closed Queue or Reader.
	ErrClosed = errors.New("queue: closed")
	// ErrCancelRequested is the cause of a Work handler's context when
	// Cancel was requested for its job, and the error of AckUnlessCancelled
	// and DeadLetterUnlessCancelled when they yield to such a request.
	ErrCancelRequested = errors.New("queue: cancel requested")
	// ErrShutdownTimeout reports that Work stopped waiting for in-flight
	// handlers at its shutdown deadline.
	ErrShutdownTimeout = errors.New("queue: shutdown timeout")
)

// Limits.
const (
	// MaxKVValueSize caps a caller-KV value and a wake payload.
	MaxKVValueSize = 1 << 20
	// MaxKVKeySize caps a caller-KV key.
	MaxKVKeySize = 1024
	// MaxPayloadSize caps a job payload.
	MaxPayloadSize = 16 << 20
	// maxHeadersSize caps the summed length of a job's header names and values.
	maxHeadersSize = 64 << 10
	// MaxNameSize caps a queue name, a job ID and a dedup key.
	MaxNameSize = 256
	// maxAttemptHistory is how many attempts a job record remembers; older
	// ones are dropped first.
	maxAttemptHistory = 32
)

// QueueConfig is the per-queue configuration. Zero fields take the defaults
// documented on each field.
type QueueConfig struct {
	// MaxAttempts is how many claims a job gets before a nack or an expired
	// lease dead-letters it. Default 5.
	MaxAttempts int
	// LeaseDuration is how long a claim holds a job before the reaper may
	// requeue it. Default 30s.
	LeaseDuration time.Duration
	// BackoffBase and BackoffMax shape the retry delay: the nack of attempt
	// n schedules the job min(BackoffBase*2^(n-1), BackoffMax) later.
	// Defaults 1s and 5m.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// DefaultPriority applies to jobs enqueued without a priority. Higher
	// runs first. Default 0.
	DefaultPriority int
	// KeepDoneJobs keeps acked jobs (state done) this long, for inspection
	// and WaitForCompletion. 0 deletes a job at its ack.
	KeepDoneJobs time.Duration
	// DeadRetention deletes dead jobs this long after they died. 0 keeps them
	// until RequeueDead (they are never swept).
	DeadRetention time.Duration
}

// defaultQueueConfig returns the defaults.
func defaultQueueConfig() QueueConfig {
	return QueueConfig{MaxAttempts: 5, LeaseDuration: 30 * time.Second, BackoffBase: time.Second, BackoffMax: 5 * time.Minute}
}

// withDefaults fills zero fields from defaultQueueConfig.
func (c QueueConfig) withDefaults() QueueConfig {
	d := defaultQueueConfig()
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = d.LeaseDuration
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = d.BackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = d.BackoffMax
	}
	c.BackoffMax = max(c.BackoffMax, c.BackoffBase)
	return c
}

// backoff is the delay before retrying after the nack of attempt n (1-based).
func (c QueueConfig) backoff(n int) time.Duration {
	d := c.BackoffBase
	for i := 1; i < n && d < c.BackoffMax; i++ {
		d *= 2
	}
	return min(d, c.BackoffMax)
}

// Options configure Open and OpenReader.
type Options struct {
	// Prefix is the kv prefix inside the store; default "queue".
	Prefix string
	// KV is passed to kv.Open / kv.OpenReader with Prefix replaced; its
	// Logger defaults to this Options' one. Its Clock stays its own
	// (kv.Options.Clock): the kv's waits are waits for the store.
	KV kv.Options
	// Clock defaults to clock.System().
	Clock clock.Clock
	// QueueConfigs holds per-queue configuration by queue name. An entry
	// replaces DefaultConfig for its queue (zero fields take
	// QueueConfig's documented defaults, not DefaultConfig's); a queue missing
	// here uses DefaultConfig.
	QueueConfigs  map[string]QueueConfig
	DefaultConfig QueueConfig
	// ReapInterval is how often expired leases are looked for; default 1s.
	ReapInterval time.Duration
	// SweepInterval is how often retention sweeps run; default 1m, negative
	// disables the background sweep (Sweep still works).
	SweepInterval time.Duration
	// Entropy feeds new job IDs (ULIDs); default ulid.DefaultEntropy().
	Entropy io.Reader
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "queue"
	}
	if o.Clock == nil {
		o.Clock = clock.System()
	}
	if o.ReapInterval <= 0 {
		o.ReapInterval = time.Second
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.KV.Prefix = o.Prefix
	if o.KV.Logger == nil {
		o.KV.Logger = o.Logger
	}
	return o
}

func (o Options) config(queue string) QueueConfig {
	if c, ok := o.QueueConfigs[queue]; ok {
		return c.withDefaults()
	}
	return o.DefaultConfig.withDefaults()
}

// State is a job's state.
type State string

// Job states. StateCancelled never appears on a stored job: it marks the
// final snapshot WaitForCompletion returns for a job Cancel removed.
const (
	StatePending   State = "pending"
	StateScheduled State = "scheduled"
	StateClaimed   State = "claimed"
	StateDone      State = "done"
	StateDead      State = "dead"
	StateCancelled State = "cancelled"
)

// Job is a snapshot of one job.
type Job struct {
	ID, Queue string
	Payload   []byte
	Headers   map[string]string
	State     State
	// Attempts counts claims, including the current one.
	Attempts, MaxAttempts, Priority int
	// Zero times are unset.
	EnqueuedAt, ClaimedAt, CompletedAt, FailedAt, RunAt, WokenAt time.Time
	// WakePayload is the payload of the WakeScheduled call that promoted the job.
	WakePayload []byte
	LastError   string
	// DedupKey is the key the job was enqueued with; it blocks duplicates
	// only while the job is pending or scheduled.
	DedupKey string
	// CancelRequested is set by Cancel on a claimed job.
	CancelRequested bool
}

// EnqueueOptions are the per-job options of an enqueue.
type EnqueueOptions struct {
	// ID is the job's ID; "" means a new ULID. IDs are unique across
	// queues: an ID that names an existing job (in any queue and state)
	// makes the enqueue a duplicate of it. Once a job is deleted (acked
	// without retention, swept, cancelled) its ID can be used again.
	ID string
	// DedupKey, when set, makes the enqueue a duplicate of the job that
	// holds the same key in the same queue while that job is pending or
	// scheduled.
	DedupKey string
	// Priority nil means the queue's DefaultPriority.
	Priority *int
	// RunAt after now makes the job scheduled until then.
	RunAt time.Time
	// MaxAttempts 0 means the queue's MaxAttempts.
	MaxAttempts int
	Headers     map[string]string
}

// NewJob is one job of EnqueueBatch or of SettlementEffects.Enqueue.
type NewJob struct {
	Queue   string
	Payload []byte
	Options EnqueueOptions
}

// EnqueueResult reports an enqueue. Duplicate means nothing was written and
// ID names the existing job.
type EnqueueResult struct {
	ID        string
	Duplicate bool
	// WALShare is the enqueue's share of the WAL PUT that made it durable
	// (see SettlementEffects.WALShare); 0 for a duplicate.
	WALShare float64
}

// KVWrite is one caller-KV write.
type KVWrite struct {
	Key   string
	Value []byte
}

// SettlementEffects are applied in the same commit as the settlement, on: an
// ack, a dead-letter, an attempt-exhausting nack, and a cancel that removes
// the job; they are discarded otherwise. Effect enqueues that are duplicates
// are skipped; KV deletes of absent keys are no-ops. Deletes apply after
// puts, compare-deletes last.
type SettlementEffects struct {
	Enqueue   []NewJob
	KVPuts    []KVWrite
	KVDeletes []string
	// KVCompareDeletes delete each Key only if it still holds Value when the
	// settlement commits; a key holding anything else (or absent) is left
	// alone and the rest of the settlement applies regardless. Use it to
	// consume a value read before the settlement without dropping one
	// written since (the read and the commit are not one transaction).
	KVCompareDeletes []KVWrite
	// OnDurable, when set, runs once the commit that applies these
	// effects is durable, before anything that commit made claimable can
	// be claimed; it never runs when they are not applied. It is not
	// stored: effects a Cancel keeps for a later settlement drop it.
	// It runs on the settling goroutine and must not block.
	OnDurable func()
	// ClaimFirst creates the first Enqueue job claimed by the settling
	// caller instead of pending, when it is claimable at once (no RunAt
	// in the future) and not a duplicate: the settlement and the next
	// claim are one commit, and the job is never visible as pending.
	// Claimed returns its Claim once the settlement succeeded. Only Ack
	// and AckUnlessCancelled honour it.
	ClaimFirst bool

	claimed  *Claim
	walShare float64
}

// WALShare returns, once the settlement that applied these effects is
// durable, its share of the WAL PUT that made it so: 1/n for a PUT that
// carried n commits (group commit); 0 before, or when nothing was written.
func (e *SettlementEffects) WALShare() float64 {
	if e == nil {
		return 0
	}
	return e.walShare
}

// Claimed returns the claim ClaimFirst made, or nil (none asked for, the
// job was scheduled or a duplicate, or the settlement failed).
func (e *SettlementEffects) Claimed() *Claim {
	if e == nil {
		return nil
	}
	return e.claimed
}

func (e *SettlementEffects) empty() bool {
	return e == nil || len(e.Enqueue)+len(e.KVPuts)+len(e.KVDeletes)+len(e.KVCompareDeletes) == 0
}

// NackResult reports where a nacked job went: Dead when the nack used up the
// attempts (effects applied), Cancelled when a pending cancel request removed
// it (the Cancel call's effects applied), else scheduled for RunAt.
type NackResult struct {
	Dead      bool
	Cancelled bool
	RunAt     time.Time
}

// CancelResult reports what Cancel did.
type CancelResult string

// Cancel outcomes.
const (
	CancelRemoved   CancelResult = "removed"   // was pending or scheduled; removed, effects applied
	CancelRequested CancelResult = "requested" // is claimed; the request is recorded and signalled
	CancelNotFound  CancelResult = "not_found" // no such job
	CancelFinished  CancelResult = "finished"  // already done or dead
)

// WakeOutcome reports what WakeScheduled did.
type WakeOutcome string

// WakeScheduled outcomes.
const (
	Woken        WakeOutcome = "woken"
	NotScheduled WakeOutcome = "not_scheduled"
	NotFound     WakeOutcome = "not_found"
)

// KVEntry is one caller-KV entry returned by KVScan.
type KVEntry struct {
	Key   string
	Value []byte
}

// Stats are a queue's job counts by state. Done counts retained done jobs.
type Stats struct {
	Pending, Scheduled, Claimed, Done, Dead int64
}

// Attempt is one claim of a job and how it ended. Outcome is "" while the
// attempt runs, else one of "acked", "nacked", "dead_lettered", "cancelled",
// "lease_expired", "interrupted" (the process stopped while claimed).
type Attempt struct {
	N                  int
	ClaimedAt, EndedAt time.Time
	Outcome, Error     string
}

// SweepResult counts the jobs a retention sweep deleted.
type SweepResult struct {
	Done, Dead int
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
