package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// The job record is rewritten at every state change and read at every
// claim and settlement, so it has a hand-written MessagePack codec instead
// of the library's reflection: same format (a map keyed by the msgpack tags
// of record), so records written either way decode either way.

// appendRecord appends r as a MessagePack map to b.
func appendRecord(b []byte, r *record) []byte {
	n := 9 // v id q st a ma pr sq ea
	opt := func(c bool) {
		if c {
			n++
		}
	}
	opt(len(r.Headers) > 0)
	opt(r.HasPayload)
	opt(len(r.Inline) > 0)
	opt(r.ClaimedAt != 0)
	opt(r.CompletedAt != 0)
	opt(r.FailedAt != 0)
	opt(r.RunAt != 0)
	opt(r.WokenAt != 0)
	opt(len(r.WakePayload) > 0)
	opt(r.LastError != "")
	opt(r.DedupKey != "")
	opt(r.Token != 0)
	opt(r.CancelRequested)
	opt(len(r.History) > 0)
	b = mpMapLen(b, n)
	b = mpInt(mpStr(b, "v"), int64(r.V))
	b = mpStr(mpStr(b, "id"), r.ID)
	b = mpStr(mpStr(b, "q"), r.Queue)
	if len(r.Headers) > 0 {
		b = mpStr(b, "h")
		b = mpMapLen(b, len(r.Headers))
		for k, v := range r.Headers {
			b = mpStr(mpStr(b, k), v)
		}
	}
	b = mpStr(mpStr(b, "st"), string(r.State))
	b = mpInt(mpStr(b, "a"), int64(r.Attempts))
	b = mpInt(mpStr(b, "ma"), int64(r.MaxAttempts))
	b = mpInt(mpStr(b, "pr"), int64(r.Priority))
	b = mpUint(mpStr(b, "sq"), r.Seq)
	if r.HasPayload {
		b = append(mpStr(b, "hp"), 0xc3)
	}
	if len(r.Inline) > 0 {
		b = mpBin(mpStr(b, "pl"), r.Inline)
	}
	b = mpInt(mpStr(b, "ea"), r.EnqueuedAt)
	for _, f := range []struct {
		k string
		v int64
	}{{"ca", r.ClaimedAt}, {"da", r.CompletedAt}, {"fa", r.FailedAt}, {"ra", r.RunAt}, {"wa", r.WokenAt}} {
		if f.v != 0 {
			b = mpInt(mpStr(b, f.k), f.v)
		}
	}
	if len(r.WakePayload) > 0 {
		b = mpBin(mpStr(b, "wp"), r.WakePayload)
	}
	if r.LastError != "" {
		b = mpStr(mpStr(b, "le"), r.LastError)
	}
	if r.DedupKey != "" {
		b = mpStr(mpStr(b, "dk"), r.DedupKey)
	}
	if r.Token != 0 {
		b = mpUint(mpStr(b, "tk"), r.Token)
	}
	if r.CancelRequested {
		b = append(mpStr(b, "cr"), 0xc3)
	}
	if len(r.History) > 0 {
		b = mpArrayLen(mpStr(b, "hi"), len(r.History))
		for i := range r.History {
			h := &r.History[i]
			m := 2
			if h.EndedAt != 0 {
				m++
			}
			if h.Outcome != "" {
				m++
			}
			if h.Error != "" {
				m++
			}
			b = mpMapLen(b, m)
			b = mpInt(mpStr(b, "n"), int64(h.N))
			b = mpInt(mpStr(b, "c"), h.ClaimedAt)
			if h.EndedAt != 0 {
				b = mpInt(mpStr(b, "e"), h.EndedAt)
			}
			if h.Outcome != "" {
				b = mpStr(mpStr(b, "o"), h.Outcome)
			}
			if h.Error != "" {
				b = mpStr(mpStr(b, "r"), h.Error)
			}
		}
	}
	return b
}

// readRecord decodes a record map (any MessagePack encoding of it; unknown
// keys are skipped, as the library does). The bytes are checked first: the
// library allocates toward declared lengths before it finds them short.
func readRecord(data []byte, r *record) (err error) {
	if err := msgpackcheck.Check(data, msgpackcheck.Options{}); err != nil {
		return err
	}
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(data))
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	for range max(n, 0) {
		k, err := dec.DecodeString()
		if err != nil {
			return err
		}
		if err := readRecordField(dec, k, r); err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	}
	return nil
}

func readRecordField(dec *msgpack.Decoder, k string, r *record) error {
	var err error
	switch k {
	case "v":
		r.V, err = dec.DecodeInt()
	case "id":
		r.ID, err = dec.DecodeString()
	case "q":
		r.Queue, err = dec.DecodeString()
	case "h":
		r.Headers, err = readStringMap(dec)
	case "st":
		var s string
		s, err = dec.DecodeString()
		r.State = State(s)
	case "a":
		r.Attempts, err = dec.DecodeInt()
	case "ma":
		r.MaxAttempts, err = dec.DecodeInt()
	case "pr":
		r.Priority, err = dec.DecodeInt()
	case "sq":
		r.Seq, err = dec.DecodeUint64()
	case "hp":
		r.HasPayload, err = dec.DecodeBool()
	case "pl":
		r.Inline, err = dec.DecodeBytes()
	case "ea":
		r.EnqueuedAt, err = dec.DecodeInt64()
	case "ca":
		r.ClaimedAt, err = dec.DecodeInt64()
	case "da":
		r.CompletedAt, err = dec.DecodeInt64()
	case "fa":
		r.FailedAt, err = dec.DecodeInt64()
	case "ra":
		r.RunAt, err = dec.DecodeInt64()
	case "wa":
		r.WokenAt, err = dec.DecodeInt64()
	case "wp":
		r.WakePayload, err = dec.DecodeBytes()
	case "le":
		r.LastError, err = dec.DecodeString()
	case "dk":
		r.DedupKey, err = dec.DecodeString()
	case "tk":
		r.Token, err = dec.DecodeUint64()
	case "cr":
		r.CancelRequested, err = dec.DecodeBool()
	case "hi":
		var n int
		if n, err = dec.DecodeArrayLen(); err != nil || n <= 0 {
			r.History = nil
			return err
		}
		if n > maxAttemptHistory*4 {
			return fmt.Errorf("%d attempts", n)
		}
		r.History = make([]attemptRecord, n)
		for i := range r.History {
			if err := readAttempt(dec, &r.History[i]); err != nil {
				return err
			}
		}
	default:
		err = dec.Skip()
	}
	// Empty values are omitted when encoding; decode them as absent so a
	// record round-trips exactly.
	if len(r.Inline) == 0 {
		r.Inline = nil
	}
	if len(r.WakePayload) == 0 {
		r.WakePayload = nil
	}
	return err
}

func readAttempt(dec *msgpack.Decoder, h *attemptRecord) error {
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	for range max(n, 0) {
		k, err := dec.DecodeString()
		if err != nil {
			return err
		}
		switch k {
		case "n":
			h.N, err = dec.DecodeInt()
		case "c":
			h.ClaimedAt, err = dec.DecodeInt64()
		case "e":
			h.EndedAt, err = dec.DecodeInt64()
		case "o":
			h.Outcome, err = dec.DecodeString()
		case "r":
			h.Error, err = dec.DecodeString()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func readStringMap(dec *msgpack.Decoder) (map[string]string, error) {
	n, err := dec.DecodeMapLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	if n > maxHeadersSize {
		return nil, fmt.Errorf("%d headers", n)
	}
	m := make(map[string]string, n)
	for range n {
		k, err := dec.DecodeString()
		if err != nil {
			return nil, err
		}
		if m[k], err = dec.DecodeString(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// MessagePack writers (the smallest encoding of each value).

func mpMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func mpArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func mpStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func mpBin(b []byte, v []byte) []byte {
	n := len(v)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func mpInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

// readJobState decodes of a record map only its state and the value of
// one header, stepping over every other field without allocating: what a
// caller that counts jobs by state needs, without the header map,
// payload and history GetJob builds. The bytes are checked first, so
// every declared length fits in them.
func readJobState(data []byte, header string) (State, string, error) {
	if err := msgpackcheck.Check(data, msgpackcheck.Options{}); err != nil {
		return "", "", err
	}
	b := data
	n, b, err := mpReadMapLen(b)
	if err != nil {
		return "", "", err
	}
	var st State
	var value string
	for range n {
		var k []byte
		if k, b, err = mpReadStr(b); err != nil {
			return "", "", err
		}
		switch string(k) {
		case "st":
			var v []byte
			v, b, err = mpReadStr(b)
			st = State(v)
		case "h":
			value, b, err = mpReadHeader(b, header)
		default:
			var size int
			if size, err = msgpackcheck.Len(b, msgpackcheck.Options{}); err == nil {
				b = b[size:]
			}
		}
		if err != nil {
			return "", "", fmt.Errorf("field %q: %w", k, err)
		}
	}
	return st, value, nil
}

// mpReadHeader returns the value of header name in a header map (nil
// when absent) and the bytes after the map.
func mpReadHeader(b []byte, name string) (string, []byte, error) {
	if len(b) > 0 && b[0] == 0xc0 {
		return "", b[1:], nil
	}
	n, b, err := mpReadMapLen(b)
	if err != nil {
		return "", nil, err
	}
	value := ""
	for range n {
		var k, v []byte
		if k, b, err = mpReadStr(b); err != nil {
			return "", nil, err
		}
		if v, b, err = mpReadStr(b); err != nil {
			return "", nil, err
		}
		if string(k) == name {
			value = string(v)
		}
	}
	return value, b, nil
}

// The readers below take bytes msgpackcheck.Check accepted: every length
// they meet fits in what follows.

func mpReadMapLen(b []byte) (int, []byte, error) {
	switch t := b[0]; {
	case t >= 0x80 && t <= 0x8f:
		return int(t & 0x0f), b[1:], nil
	case t == 0xde:
		return int(binary.BigEndian.Uint16(b[1:])), b[3:], nil
	case t == 0xdf:
		return int(binary.BigEndian.Uint32(b[1:])), b[5:], nil
	}
	return 0, nil, fmt.Errorf("type byte 0x%02x where a map is expected", b[0])
}

// mpReadStr reads a string value (or binary or nil, as the library
// accepts for one).
func mpReadStr(b []byte) ([]byte, []byte, error) {
	var n, h int
	switch t := b[0]; {
	case t == 0xc0: // nil, which the library decodes as ""
		return nil, b[1:], nil
	case t >= 0xa0 && t <= 0xbf:
		n, h = int(t&0x1f), 1
	case t == 0xd9 || t == 0xc4:
		n, h = int(b[1]), 2
	case t == 0xda || t == 0xc5:
		n, h = int(binary.BigEndian.Uint16(b[1:])), 3
	case t == 0xdb || t == 0xc6:
		n, h = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return nil, nil, fmt.Errorf("type byte 0x%02x where a string is expected", t)
	}
	return b[h : h+n], b[h+n:], nil
}
