package runtime

import (
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
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
	Nonce         string            `msgpack:"n"`
	Status        TerminalStatus    `msgpack:"st"`
	Result        []byte            `msgpack:"r,omitempty"`
	ResultOmitted bool              `msgpack:"ro,omitempty"`
	Error         string            `msgpack:"e,omitempty"`
	Step          int               `msgpack:"s"`
	SubmittedMs   int64             `msgpack:"t"`
	FinishedMs    int64             `msgpack:"f"`
	Headers       map[string]string `msgpack:"hd,omitempty"`
}

// replayRecord is the step-output replay object: the runner's outcome and
// the effects it staged, stored before the outcome is settled.
type replayRecord struct {
	Kind      OutcomeKind `msgpack:"k"`
	Payload   []byte      `msgpack:"p,omitempty"`
	Trigger   TriggerKind `msgpack:"tk,omitempty"`
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

// decodeRecord decodes b into v. The MessagePack library can panic on
// malformed input (a nil where a struct is expected); that is corruption
// too, not a crash.
func decodeRecord(what string, b []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: malformed MessagePack (%v)", ErrCorruptRecord, what, r)
		}
	}()
	if err := checkMsgpack(b); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorruptRecord, what, err)
	}
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorruptRecord, what, err)
	}
	return nil
}

func decodeRunOutcome(b []byte) (*RunOutcome, error) {
	var o RunOutcome
	if err := decodeRecord("notification", b, &o); err != nil {
		return nil, err
	}
	if o.RunID == "" || !o.Status.valid() {
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

func decodeResultRecord(b []byte) (*resultRecord, error) {
	var r resultRecord
	if err := decodeRecord("result record", b, &r); err != nil {
		return nil, err
	}
	if !r.Status.valid() {
		return nil, fmt.Errorf("%w: result record with status %d", ErrCorruptRecord, r.Status)
	}
	return &r, nil
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
		Kind: o.Kind, Payload: o.Payload, Trigger: o.Trigger.Kind,
		DelayNs: int64(o.Trigger.Delay), SignalKey: o.Trigger.SignalKey, TimeoutNs: int64(o.Trigger.Timeout),
		Result: o.Result, Reason: o.Reason, StoredMs: now.UnixMilli(),
	}
	r.Puts, r.Deletes = eff.snapshot()
	return r
}

// outcome rebuilds the stored outcome; an After delay shrinks by elapsed,
// the time since the record was stored, so the original schedule holds.
func (r *replayRecord) outcome(elapsed time.Duration) StepOutcome {
	o := StepOutcome{Kind: r.Kind, Payload: r.Payload, Result: r.Result, Reason: r.Reason,
		Trigger: Trigger{Kind: r.Trigger, Delay: time.Duration(r.DelayNs), SignalKey: r.SignalKey, Timeout: time.Duration(r.TimeoutNs)}}
	if o.Kind == OutcomeContinue && o.Trigger.Kind == TriggerAfter && elapsed > 0 {
		o.Trigger.Delay = max(o.Trigger.Delay-elapsed, 0)
	}
	return o
}

// maxRecordDepth bounds the nesting of a decoded record; ours nest at most 3.
const maxRecordDepth = 16

// checkMsgpack walks b as one MessagePack value and rejects truncated
// input, declared lengths beyond the input, unused type bytes and deep
// nesting, so the decoder never allocates for lengths the input cannot hold.
func checkMsgpack(b []byte) error {
	n, err := msgpackValue(b, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d trailing bytes", len(b)-n)
	}
	return nil
}

// msgpackFixed maps the fixed-size type bytes to their payload size.
var msgpackFixed = map[byte]int{0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8,
	0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, 0xd8: 17}

// msgpackValue returns the length of the value at the start of b.
func msgpackValue(b []byte, depth int) (int, error) {
	if depth > maxRecordDepth {
		return 0, fmt.Errorf("nested deeper than %d", maxRecordDepth)
	}
	if len(b) == 0 {
		return 0, fmt.Errorf("truncated")
	}
	t := b[0]
	uintAt := func(size int) (int, error) {
		if len(b) < 1+size {
			return 0, fmt.Errorf("truncated length")
		}
		v := 0
		for _, c := range b[1 : 1+size] {
			v = v<<8 | int(c)
		}
		return v, nil
	}
	blob := func(size, extra int) (int, error) { // length-prefixed bytes
		l, err := uintAt(size)
		if err != nil {
			return 0, err
		}
		end := 1 + size + extra + l
		if l < 0 || end > len(b) {
			return 0, fmt.Errorf("declared length %d beyond the input", l)
		}
		return end, nil
	}
	items := func(head, count int) (int, error) { // a container of count values
		if count < 0 || count > len(b)-head {
			return 0, fmt.Errorf("declared %d items beyond the input", count)
		}
		off := head
		for range count {
			n, err := msgpackValue(b[off:], depth+1)
			if err != nil {
				return 0, err
			}
			off += n
		}
		return off, nil
	}
	switch {
	case t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3:
		return 1, nil
	case t >= 0x80 && t <= 0x8f:
		return items(1, 2*int(t&0x0f))
	case t >= 0x90 && t <= 0x9f:
		return items(1, int(t&0x0f))
	case t >= 0xa0 && t <= 0xbf:
		if end := 1 + int(t&0x1f); end <= len(b) {
			return end, nil
		}
		return 0, fmt.Errorf("truncated string")
	}
	if size, ok := msgpackFixed[t]; ok {
		if 1+size > len(b) {
			return 0, fmt.Errorf("truncated value")
		}
		return 1 + size, nil
	}
	switch t {
	case 0xc4, 0xd9:
		return blob(1, 0)
	case 0xc5, 0xda:
		return blob(2, 0)
	case 0xc6, 0xdb:
		return blob(4, 0)
	case 0xc7:
		return blob(1, 1)
	case 0xc8:
		return blob(2, 1)
	case 0xc9:
		return blob(4, 1)
	case 0xdc, 0xdd, 0xde, 0xdf:
		size := 2
		if t == 0xdd || t == 0xdf {
			size = 4
		}
		n, err := uintAt(size)
		if err != nil {
			return 0, err
		}
		if t >= 0xde {
			n *= 2
		}
		return items(1+size, n)
	}
	return 0, fmt.Errorf("unused type byte 0x%02x", t)
}
