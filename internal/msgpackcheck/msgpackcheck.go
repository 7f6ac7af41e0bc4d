package msgpackcheck

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrMalformed is wrapped by every error Check returns.
var ErrMalformed = errors.New("malformed MessagePack")

// MaxDepth is the nesting limit for records that carry user values: the
// limit encoding/json puts on what it decodes and actions.Normalize on
// what an output holds, with room for the record's own levels around them.
const MaxDepth = 10_000 + 64

// RecordDepth is the nesting limit for records of a fixed shape: ours nest
// at most four containers deep.
const RecordDepth = 16

// Check returns nil when b is exactly one MessagePack value whose declared
// lengths and item counts all fit in b, which nests at most opts.MaxDepth
// arrays and maps deep and holds no extension value (but timestamps when
// opts.Timestamps); otherwise an error wrapping ErrMalformed that says what
// is wrong at which byte offset.
//
// Extensions are refused because the library reads the payload of one
// found where a map is expected as that map, declared lengths and all,
// which a check of the payload's size does not bound.
func Check(b []byte, opts Options) error {
	off, err := walk(b, opts)
	if err != nil {
		return err
	}
	if off != len(b) {
		return fmt.Errorf("%w: %d bytes after the value", ErrMalformed, len(b)-off)
	}
	return nil
}

// Len returns the number of bytes the MessagePack value b starts with
// takes (its header, payload and nested items), checked as Check checks
// a value; what follows it is not read. A decoder that steps over the
// fields it does not need uses it.
func Len(b []byte, opts Options) (int, error) { return walk(b, opts) }

// walk checks the value b starts with and returns where it ends.
func walk(b []byte, opts Options) (int, error) {
	maxDepth := opts.depth()
	// open holds, per container not yet complete, the items still to come
	// (a map counts keys and values); the innermost is last. Records nest
	// at most RecordDepth deep, so its array keeps a walk off the heap.
	var stack [RecordDepth]int
	open := stack[:0]
	off := 0
	for {
		if off >= len(b) {
			return 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, off)
		}
		size, items, err := head(b[off:], opts.Timestamps)
		if err != nil {
			return 0, fmt.Errorf("%w: at byte %d: %w", ErrMalformed, off, err)
		}
		off += size
		if items > 0 {
			if items > len(b)-off {
				return 0, fmt.Errorf("%w: at byte %d: %d items declared but only %d bytes follow", ErrMalformed, off-size, items, len(b)-off)
			}
			if len(open) >= maxDepth {
				return 0, fmt.Errorf("%w: at byte %d: nested deeper than %d levels", ErrMalformed, off-size, maxDepth)
			}
			open = append(open, items)
			continue
		}
		// A value ended: it completes the containers it was the last item of.
		for len(open) > 0 {
			open[len(open)-1]--
			if open[len(open)-1] > 0 {
				break
			}
			open = open[:len(open)-1]
		}
		if len(open) == 0 {
			return off, nil
		}
	}
}

// head decodes the value header at the start of b (non-empty). It returns
// the bytes the header and any payload take, and for an array or map the
// number of values that follow it (0 for an empty one or a scalar).
func head(b []byte, timestamps bool) (size, items int, err error) {
	t := b[0]
	switch {
	case t <= 0x7f || t >= 0xe0: // fixint
		return 1, 0, nil
	case t <= 0x8f: // fixmap
		return 1, 2 * int(t&0x0f), nil
	case t <= 0x9f: // fixarray
		return 1, int(t & 0x0f), nil
	case t <= 0xbf: // fixstr
		return payload(b, 1, int(t&0x1f))
	}
	switch t {
	case 0xc0, 0xc2, 0xc3: // nil, false, true
		return 1, 0, nil
	case 0xc1:
		return 0, 0, errors.New("reserved type byte 0xc1")
	case 0xc4, 0xd9: // bin8, str8
		return blob(b, 1, 0)
	case 0xc5, 0xda: // bin16, str16
		return blob(b, 2, 0)
	case 0xc6, 0xdb: // bin32, str32
		return blob(b, 4, 0)
	case 0xc7: // ext8 (a 12-byte timestamp), ext16, ext32: length, then a type byte
		if timestamps && len(b) >= 3 && b[1] == 12 && b[2] == timestampType {
			return payload(b, 3, 12)
		}
		return 0, 0, extError(b)
	case 0xc8, 0xc9:
		return 0, 0, extError(b)
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return payload(b, 1, 4)
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return payload(b, 1, 8)
	case 0xcc, 0xd0: // uint8, int8
		return payload(b, 1, 1)
	case 0xcd, 0xd1: // uint16, int16
		return payload(b, 1, 2)
	case 0xd6, 0xd7: // fixext 4 and 8: timestamps, when allowed
		if timestamps && len(b) >= 2 && b[1] == timestampType {
			return payload(b, 2, 1<<(t-0xd4))
		}
		return 0, 0, extError(b)
	case 0xd4, 0xd5, 0xd8: // fixext 1, 2 and 16
		return 0, 0, extError(b)
	case 0xdc, 0xde: // array16, map16
		n, err := length(b, 2)
		return 3, n * mapFactor(t), err
	case 0xdd, 0xdf: // array32, map32
		n, err := length(b, 4)
		return 5, n * mapFactor(t), err
	}
	return 0, 0, fmt.Errorf("type byte 0x%02x", t) // not reached: every byte value is covered above
}

// timestampType is the extension type of MessagePack timestamps (-1).
const timestampType = 0xff

func extError(b []byte) error {
	if len(b) >= 2 && b[0] >= 0xd4 && b[0] <= 0xd8 {
		return fmt.Errorf("extension of type %d where only timestamps may be", int8(b[1]))
	}
	return errors.New("extension where only timestamps (4, 8 or 12 bytes) may be")
}

func mapFactor(t byte) int {
	if t == 0xde || t == 0xdf {
		return 2
	}
	return 1
}

// length reads the big-endian length of width bytes after the type byte.
func length(b []byte, width int) (int, error) {
	if len(b) < 1+width {
		return 0, fmt.Errorf("truncated %d-byte length", width)
	}
	n := 0
	for _, c := range b[1 : 1+width] {
		n = n<<8 | int(c)
	}
	return n, nil
}

// blob is a value with a length of width bytes, extra bytes, then that
// many payload bytes.
func blob(b []byte, width, extra int) (int, int, error) {
	n, err := length(b, width)
	if err != nil {
		return 0, 0, err
	}
	return payload(b, 1+width+extra, n)
}

// payload is a value of hdr header bytes and n payload bytes.
func payload(b []byte, hdr, n int) (int, int, error) {
	if n > len(b)-hdr {
		return 0, 0, fmt.Errorf("%d bytes declared but only %d follow", n, max(len(b)-hdr, 0))
	}
	return hdr + n, 0, nil
}

// Options configures Check and Unmarshal.
type Options struct {
	// MaxDepth bounds nesting; 0 means RecordDepth.
	MaxDepth int
	// Timestamps admits MessagePack timestamps (extension -1 of 4, 8 or
	// 12 bytes, how the library writes a time.Time); every other extension
	// is refused. With it, Unmarshal decodes with a decoder of its own,
	// not a pooled one: a timestamp where a map is expected is read as a
	// map header (see Check), which can cost one allocation up to the
	// library's cap of a million entries, but nothing grows from one
	// decode to the next.
	Timestamps bool
	// LooseInterfaces decodes numbers inside interface values as int64,
	// uint64 or float64 (the library's UseLooseInterfaceDecoding).
	LooseInterfaces bool
}

func (o Options) depth() int {
	if o.MaxDepth <= 0 {
		return RecordDepth
	}
	return o.MaxDepth
}

// Unmarshal decodes b into v like msgpack.Unmarshal, after Check accepted
// it. The library's own errors (a value of the wrong type for a field,
// say) are returned as they are; a panic of the decoder on a shape it
// does not expect is returned as an error wrapping ErrMalformed.
func Unmarshal(b []byte, v any, opts Options) (err error) {
	if err := Check(b, opts); err != nil {
		return err
	}
	var dec *msgpack.Decoder
	if opts.Timestamps {
		dec = msgpack.NewDecoder(nil)
	} else {
		dec = msgpack.GetDecoder()
	}
	defer func() {
		if p := recover(); p != nil {
			// The decoder is dropped, not pooled: its state is unknown.
			err = fmt.Errorf("%w: the decoder failed: %v", ErrMalformed, p)
		}
	}()
	dec.Reset(bytes.NewReader(b))
	dec.UseLooseInterfaceDecoding(opts.LooseInterfaces)
	err = dec.Decode(v)
	if !opts.Timestamps {
		msgpack.PutDecoder(dec)
	}
	return err
}
