package bulk

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// ErrCorruptRecord reports a batch or item record that failed to decode.
var ErrCorruptRecord = errors.New("bulk: corrupt record")

// Status is where an item of a batch is.
type Status uint8

// Item states. Pending covers submitted and running items.
const (
	Pending Status = iota
	Succeeded
	Failed
	Cancelled
)

// String returns the lower-case name of the status.
func (s Status) String() string {
	switch s {
	case Pending:
		return "pending"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Terminal reports whether s is Succeeded, Failed or Cancelled.
func (s Status) Terminal() bool { return s >= Succeeded && s <= Cancelled }

// Records are MessagePack maps with short names; fields are only added.

// metaRecord is a batch's header, at "<prefix><batch>/meta".
type metaRecord struct {
	Total      int       `msgpack:"n"`
	Threshold  Threshold `msgpack:"th"`
	Stopped    bool      `msgpack:"st,omitempty"`
	StopReason string    `msgpack:"sr,omitempty"`
	CreatedMs  int64     `msgpack:"t"`
}

// itemRecord is one item, at "<prefix><batch>/i/<index>". It is written
// pending with the item's first enqueue (or its replay) and replaced by
// the terminal record in the commit that ends the item's run (or, for
// terminations the step did not decide, by the terminal hook). It is the
// item's share of the batch's totals: totals are sums over item records,
// so a redelivered notification cannot count twice.
type itemRecord struct {
	Gen      int    `msgpack:"g"`
	Status   Status `msgpack:"s"`
	Input    []byte `msgpack:"in,omitempty"`
	Costs    costs  `msgpack:"c,omitempty"`
	Output   []byte `msgpack:"o,omitempty"`
	OutInMem bool   `msgpack:"om,omitempty"` // output too large to inline: read the last phase's memo
	Error    string `msgpack:"e,omitempty"`
	Attempts int    `msgpack:"a,omitempty"`
	FinishMs int64  `msgpack:"f,omitempty"`
}

// phaseMemo is a phase's memoized result: its output and what it cost.
type phaseMemo struct {
	Out   []byte `msgpack:"o"`
	Costs costs  `msgpack:"c,omitempty"`
}

// costs is a record's costs by name. It encodes its keys in order:
// msgpack's SetSortMapKeys sorts only map[string]string, map[string]bool
// and map[string]any, so a map[string]int64 came out in Go's random map
// order and equal records could encode to different bytes.
type costs map[string]int64

// EncodeMsgpack writes c as the default map encoding would, keys sorted.
func (c costs) EncodeMsgpack(e *msgpack.Encoder) error {
	if c == nil {
		return e.EncodeNil()
	}
	if err := e.EncodeMapLen(len(c)); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if err := e.EncodeString(k); err != nil {
			return err
		}
		if err := e.Encode(c[k]); err != nil {
			return err
		}
	}
	return nil
}

func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("bulk: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// decode decodes b into v, checking its lengths and nesting first (see
// internal/msgpackcheck); a decoder panic is corruption too.
func decode(what string, b []byte, v any) error {
	if err := msgpackcheck.Unmarshal(b, v, msgpackcheck.Options{}); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorruptRecord, what, err)
	}
	return nil
}

func decodeMeta(b []byte) (*metaRecord, error) {
	var m metaRecord
	if err := decode("batch record", b, &m); err != nil {
		return nil, err
	}
	if m.Total < 0 || m.Threshold.validate() != nil {
		return nil, fmt.Errorf("%w: batch record with total %d, threshold %+v", ErrCorruptRecord, m.Total, m.Threshold)
	}
	return &m, nil
}

func decodeItem(b []byte) (*itemRecord, error) {
	var r itemRecord
	if err := decode("item record", b, &r); err != nil {
		return nil, err
	}
	if r.Status > Cancelled || r.Gen < 1 {
		return nil, fmt.Errorf("%w: item record with status %d, generation %d", ErrCorruptRecord, r.Status, r.Gen)
	}
	return &r, nil
}
