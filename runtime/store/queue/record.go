package queue

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// recordVersion is the job record format written; decode accepts it and
// minRecordVersion onward. Version 2 added inline payloads ("pl"), which a
// version-1 reader would silently drop, hence the bump.
const (
	recordVersion    = 2
	minRecordVersion = 1
	// effectsVersion is the format of stored cancel effects.
	effectsVersion = 1
)

// ErrCorrupt reports a stored job record or cancel-effects record that
// does not decode or breaks the record format's rules; the message says
// which kind of record and what is wrong. Retrying does not help: the
// store needs repair.
var ErrCorrupt = errors.New("queue: corrupt record")

// record is the stored form of a job (key j/<id>). The payload lives apart
// (p/<id>) so the record every state change rewrites stays small.
type record struct {
	V           int               `msgpack:"v"`
	ID          string            `msgpack:"id"`
	Queue       string            `msgpack:"q"`
	Headers     map[string]string `msgpack:"h,omitempty"`
	State       State             `msgpack:"st"`
	Attempts    int               `msgpack:"a"`
	MaxAttempts int               `msgpack:"ma"`
	Priority    int               `msgpack:"pr"`
	Seq         uint64            `msgpack:"sq"`           // position in the ready index
	HasPayload  bool              `msgpack:"hp,omitempty"` // payload under p/<id>
	// Inline holds a payload of at most inlinePayloadMax bytes in the
	// record itself: rewriting a few more bytes per state change is
	// cheaper than a separate key's put, get and delete.
	Inline      []byte `msgpack:"pl,omitempty"`
	EnqueuedAt  int64  `msgpack:"ea"`
	ClaimedAt   int64  `msgpack:"ca,omitempty"`
	CompletedAt int64  `msgpack:"da,omitempty"`
	FailedAt    int64  `msgpack:"fa,omitempty"`
	RunAt       int64  `msgpack:"ra,omitempty"`
	WokenAt     int64  `msgpack:"wa,omitempty"`
	WakePayload []byte `msgpack:"wp,omitempty"`
	LastError   string `msgpack:"le,omitempty"`
	DedupKey    string `msgpack:"dk,omitempty"`
	// Token identifies the current claim; settlements must present it.
	Token           uint64          `msgpack:"tk,omitempty"`
	CancelRequested bool            `msgpack:"cr,omitempty"`
	History         []attemptRecord `msgpack:"hi,omitempty"`
}

type attemptRecord struct {
	N         int    `msgpack:"n"`
	ClaimedAt int64  `msgpack:"c"`
	EndedAt   int64  `msgpack:"e,omitempty"`
	Outcome   string `msgpack:"o,omitempty"`
	Error     string `msgpack:"r,omitempty"`
}

// inlinePayloadMax is the largest payload kept inside the job record.
const inlinePayloadMax = 1024

func encodeRecord(r *record) ([]byte, error) {
	r.V = recordVersion
	return appendRecord(make([]byte, 0, 128+len(r.Inline)+len(r.WakePayload)), r), nil
}

func decodeRecord(b []byte) (*record, error) {
	var r record
	if err := readRecord(b, &r); err != nil {
		return nil, fmt.Errorf("%w: job record: %w", ErrCorrupt, err)
	}
	if r.HasPayload && len(r.Inline) > 0 {
		return nil, fmt.Errorf("%w: job record %q has both an inline and a separate payload", ErrCorrupt, r.ID)
	}
	if r.V < minRecordVersion || r.V > recordVersion {
		return nil, fmt.Errorf("%w: job record %q has format version %d; this build reads %d to %d", ErrCorrupt, r.ID, r.V, minRecordVersion, recordVersion)
	}
	switch r.State {
	case StatePending, StateScheduled, StateClaimed, StateDone, StateDead:
	default:
		return nil, fmt.Errorf("%w: job record %q has unknown state %q", ErrCorrupt, r.ID, r.State)
	}
	if r.ID == "" || r.Queue == "" {
		return nil, fmt.Errorf("%w: job record without id or queue", ErrCorrupt)
	}
	return &r, nil
}

// beginAttempt appends a running attempt, dropping the oldest past the cap.
func (r *record) beginAttempt(now int64) {
	r.History = append(r.History, attemptRecord{N: r.Attempts, ClaimedAt: now})
	if len(r.History) > maxAttemptHistory {
		r.History = append(r.History[:0:0], r.History[len(r.History)-maxAttemptHistory:]...)
	}
}

// endAttempt closes the running attempt, if any.
func (r *record) endAttempt(now int64, outcome, errText string) {
	if n := len(r.History); n > 0 && r.History[n-1].EndedAt == 0 && r.History[n-1].N == r.Attempts {
		h := &r.History[n-1]
		h.EndedAt, h.Outcome, h.Error = now, outcome, errText
	}
}

func (r *record) job(payload []byte) Job {
	return Job{
		ID: r.ID, Queue: r.Queue, Payload: payload, Headers: r.Headers, State: r.State,
		Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, Priority: r.Priority,
		EnqueuedAt: fromNanos(r.EnqueuedAt), ClaimedAt: fromNanos(r.ClaimedAt),
		CompletedAt: fromNanos(r.CompletedAt), FailedAt: fromNanos(r.FailedAt),
		RunAt: fromNanos(r.RunAt), WokenAt: fromNanos(r.WokenAt),
		WakePayload: r.WakePayload, LastError: r.LastError, DedupKey: r.DedupKey,
		CancelRequested: r.CancelRequested,
	}
}

func (r *record) attempts() []Attempt {
	out := make([]Attempt, len(r.History))
	for i, h := range r.History {
		out[i] = Attempt{N: h.N, ClaimedAt: fromNanos(h.ClaimedAt), EndedAt: fromNanos(h.EndedAt), Outcome: h.Outcome, Error: h.Error}
	}
	return out
}

// storedEffects is the stored form of the effects a Cancel of a claimed job
// leaves for the nack that removes it (key e/<id>).
type storedEffects struct {
	V         int             `msgpack:"v"`
	Enqueue   []storedNewJob  `msgpack:"en,omitempty"`
	KVPuts    []storedKVWrite `msgpack:"kp,omitempty"`
	KVDeletes []string        `msgpack:"kd,omitempty"`
	KVCmpDels []storedKVWrite `msgpack:"kc,omitempty"`
}

type storedNewJob struct {
	Queue       string            `msgpack:"q"`
	Payload     []byte            `msgpack:"p,omitempty"`
	ID          string            `msgpack:"id,omitempty"`
	DedupKey    string            `msgpack:"dk,omitempty"`
	Priority    *int              `msgpack:"pr,omitempty"`
	RunAt       int64             `msgpack:"ra,omitempty"`
	MaxAttempts int               `msgpack:"ma,omitempty"`
	Headers     map[string]string `msgpack:"h,omitempty"`
}

type storedKVWrite struct {
	Key   string `msgpack:"k"`
	Value []byte `msgpack:"v"`
}

func encodeEffects(e *SettlementEffects) ([]byte, error) {
	s := storedEffects{V: effectsVersion, KVDeletes: e.KVDeletes}
	for _, j := range e.Enqueue {
		s.Enqueue = append(s.Enqueue, storedNewJob{
			Queue: j.Queue, Payload: j.Payload, ID: j.Options.ID, DedupKey: j.Options.DedupKey,
			Priority: j.Options.Priority, RunAt: nanos(j.Options.RunAt), MaxAttempts: j.Options.MaxAttempts,
			Headers: j.Options.Headers,
		})
	}
	for _, w := range e.KVPuts {
		s.KVPuts = append(s.KVPuts, storedKVWrite(w))
	}
	for _, w := range e.KVCompareDeletes {
		s.KVCmpDels = append(s.KVCmpDels, storedKVWrite(w))
	}
	b, err := msgpack.Marshal(&s)
	if err != nil {
		return nil, fmt.Errorf("queue: encode cancel effects: %w", err)
	}
	return b, nil
}

func decodeEffects(b []byte) (*SettlementEffects, error) {
	var s storedEffects
	if err := msgpackcheck.Unmarshal(b, &s, msgpackcheck.Options{}); err != nil {
		return nil, fmt.Errorf("%w: cancel effects: %w", ErrCorrupt, err)
	}
	if s.V != effectsVersion {
		return nil, fmt.Errorf("%w: cancel effects have format version %d; this build reads %d", ErrCorrupt, s.V, effectsVersion)
	}
	e := &SettlementEffects{KVDeletes: s.KVDeletes}
	for _, j := range s.Enqueue {
		e.Enqueue = append(e.Enqueue, NewJob{Queue: j.Queue, Payload: j.Payload, Options: EnqueueOptions{
			ID: j.ID, DedupKey: j.DedupKey, Priority: j.Priority, RunAt: fromNanos(j.RunAt),
			MaxAttempts: j.MaxAttempts, Headers: j.Headers,
		}})
	}
	for _, w := range s.KVPuts {
		e.KVPuts = append(e.KVPuts, KVWrite(w))
	}
	for _, w := range s.KVCmpDels {
		if w.Value == nil {
			return nil, fmt.Errorf("%w: cancel effects: compare-delete of %q without a value", ErrCorrupt, w.Key)
		}
		e.KVCompareDeletes = append(e.KVCompareDeletes, KVWrite(w))
	}
	return e, nil
}
