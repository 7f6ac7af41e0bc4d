package runtime

import (
	"bytes"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// Durable records are MessagePack maps with short field names; a record
// gains fields by adding optional ones, never by renaming. Every decoder
// returns ErrCorruptRecord (wrapped) on bad input and is fuzzed.

// runRecord lives at workflow/runs/<id> while the run is active.
type runRecord struct {
	Nonce       string            `msgpack:"n"`
	InputHash   []byte            `msgpack:"h"`
	SubmittedMs int64             `msgpack:"t"`
	Headers     map[string]string `msgpack:"hd,omitempty"`
	Labels      map[string]string `msgpack:"lb,omitempty"`
	// CancelHandlers: RunSpec.CancelHandlers.
	CancelHandlers bool `msgpack:"ch,omitempty"`
}

// stepPointer lives at workflow/steps/<id>: the run's live step job.
type stepPointer struct {
	Nonce string `msgpack:"n"`
	Step  int    `msgpack:"s"`
	JobID string `msgpack:"j"`
}

// resultRecord lives at workflow/results/<id> for the result retention
// window after the run terminated.
type resultRecord struct {
	Nonce         string                  `msgpack:"n"`
	Status        runstate.TerminalStatus `msgpack:"st"`
	Result        []byte                  `msgpack:"r,omitempty"`
	ResultOmitted bool                    `msgpack:"ro,omitempty"`
	Error         string                  `msgpack:"e,omitempty"`
	Step          int                     `msgpack:"s"`
	SubmittedMs   int64                   `msgpack:"t"`
	FinishedMs    int64                   `msgpack:"f"`
	Headers       map[string]string       `msgpack:"hd,omitempty"`
	Labels        map[string]string       `msgpack:"lb,omitempty"`
}

// replayRecord is the step-output replay object: the runner's outcome and
// the effects it staged, stored before the outcome is settled.
type replayRecord struct {
	Kind      outcomeKind `msgpack:"k"`
	Payload   []byte      `msgpack:"p,omitempty"`
	Trigger   triggerKind `msgpack:"tk,omitempty"`
	DelayNs   int64       `msgpack:"d,omitempty"`
	SignalKey string      `msgpack:"sk,omitempty"`
	TimeoutNs int64       `msgpack:"to,omitempty"`
	Result    []byte      `msgpack:"r,omitempty"`
	Reason    string      `msgpack:"rs,omitempty"`
	Puts      []kvPut     `msgpack:"kp,omitempty"`
	Deletes   []string    `msgpack:"kd,omitempty"`
	StoredMs  int64       `msgpack:"t"`
}

type kvPut struct {
	Key   string `msgpack:"k"`
	Value []byte `msgpack:"v"`
}

func encodeRecord(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("runtime: encode %T: %w", v, err)
	}
	return b, nil
}

// decodeRecord decodes b into v, checking its lengths and nesting first
// (see internal/msgpackcheck); a decoder panic is corruption too.
func decodeRecord(what string, b []byte, v any) error {
	return decodeRecordWith(what, b, v, msgpackcheck.Options{})
}

func decodeRecordWith(what string, b []byte, v any, opts msgpackcheck.Options) error {
	if err := msgpackcheck.Unmarshal(b, v, opts); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorruptRecord, what, err)
	}
	return nil
}

func decodeRunOutcome(b []byte) (*runstate.Outcome, error) {
	var o runstate.Outcome
	// A notification carries its times as MessagePack timestamps.
	if err := decodeRecordWith("notification", b, &o, msgpackcheck.Options{Timestamps: true}); err != nil {
		return nil, err
	}
	if o.RunID == "" || !o.Status.Valid() {
		return nil, fmt.Errorf("%w: notification without run id or status", ErrCorruptRecord)
	}
	return &o, nil
}

func decodeRunRecord(b []byte) (*runRecord, error) {
	var r runRecord
	if err := decodeRecord("run record", b, &r); err != nil {
		return nil, err
	}
	if r.Nonce == "" || len(r.InputHash) != 32 {
		return nil, fmt.Errorf("%w: run record without nonce or input hash", ErrCorruptRecord)
	}
	return &r, nil
}

func decodeStepPointer(b []byte) (*stepPointer, error) {
	var p stepPointer
	if err := decodeRecord("step pointer", b, &p); err != nil {
		return nil, err
	}
	if p.JobID == "" || p.Step < 0 {
		return nil, fmt.Errorf("%w: step pointer without job id", ErrCorruptRecord)
	}
	return &p, nil
}

// decodePointerJob is decodeStepPointer's JobID alone, read without the
// library's reflection, for visits of many pointers. Its fields are read
// as the library reads them; any other shape (the library also takes a
// struct as an array) goes to decodeStepPointer, so both accept and
// refuse the same bytes.
func decodePointerJob(b []byte) (string, error) {
	if msgpackcheck.Check(b, msgpackcheck.Options{}) == nil {
		dec := msgpack.GetDecoder()
		dec.Reset(bytes.NewReader(b))
		jobID, step, err := readPointerJob(dec)
		msgpack.PutDecoder(dec)
		if err == nil && jobID != "" && step >= 0 {
			return jobID, nil
		}
	}
	p, err := decodeStepPointer(b)
	if err != nil {
		return "", err
	}
	return p.JobID, nil
}

func readPointerJob(dec *msgpack.Decoder) (jobID string, step int, err error) {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return "", 0, err
	}
	for range max(n, 0) {
		k, err := dec.DecodeString()
		if err != nil {
			return "", 0, err
		}
		switch k {
		case "n":
			_, err = dec.DecodeString()
		case "j":
			jobID, err = dec.DecodeString()
		case "s":
			step, err = dec.DecodeInt()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return "", 0, err
		}
	}
	return jobID, step, nil
}

func decodeResultRecord(b []byte) (*resultRecord, error) {
	var r resultRecord
	if err := decodeRecord("result record", b, &r); err != nil {
		return nil, err
	}
	if !r.Status.Valid() {
		return nil, fmt.Errorf("%w: result record with status %d", ErrCorruptRecord, r.Status)
	}
	return &r, nil
}

// decodeResultState is decodeResultRecord's Status alone, for visits of
// many results (the other fields are skipped, not decoded).
func decodeResultState(b []byte) (runstate.State, error) {
	var r struct {
		Status runstate.TerminalStatus `msgpack:"st"`
	}
	if err := decodeRecord("result record", b, &r); err != nil {
		return 0, err
	}
	if !r.Status.Valid() {
		return 0, fmt.Errorf("%w: result record with status %d", ErrCorruptRecord, r.Status)
	}
	return r.Status.State(), nil
}

func decodeReplayRecord(b []byte) (*replayRecord, error) {
	var r replayRecord
	if err := decodeRecord("replay record", b, &r); err != nil {
		return nil, err
	}
	if err := r.outcome(0).validate(); err != nil {
		return nil, fmt.Errorf("%w: replay record: %w", ErrCorruptRecord, err)
	}
	return &r, nil
}

func newReplayRecord(o StepOutcome, eff *Effects, now time.Time) *replayRecord {
	r := &replayRecord{
		Kind: o.kind, Payload: o.Payload, Trigger: o.trigger.Kind,
		DelayNs: int64(o.trigger.Delay), SignalKey: o.trigger.SignalKey, TimeoutNs: int64(o.trigger.Timeout),
		Result: o.Result, Reason: o.Reason, StoredMs: now.UnixMilli(),
	}
	r.Puts, r.Deletes = eff.snapshot()
	return r
}

// outcome rebuilds the stored outcome; an After delay shrinks by elapsed,
// the time since the record was stored, so the original schedule holds.
func (r *replayRecord) outcome(elapsed time.Duration) StepOutcome {
	o := StepOutcome{kind: r.Kind, Payload: r.Payload, Result: r.Result, Reason: r.Reason,
		trigger: trigger{Kind: r.Trigger, Delay: time.Duration(r.DelayNs), SignalKey: r.SignalKey, Timeout: time.Duration(r.TimeoutNs)}}
	if o.kind == outcomeContinue && o.trigger.Kind == triggerAfter && elapsed > 0 {
		o.trigger.Delay = max(o.trigger.Delay-elapsed, 0)
	}
	return o
}
