package remote

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime"
)

// hostileMarkers are records whose declared lengths, counts or nesting
// exceed what their bytes hold (the runtime's records_test.go has the
// same for its records): the MessagePack library allocates toward
// declared lengths before it finds the input short.
var hostileMarkers = map[string][]byte{
	"bin32 input hash":       []byte("\x81\xa1h\xc6\xff\xff\xff\xff"),
	"bin32 replay payload":   []byte("\x81\xa1p\xc6\x7f\xff\xff\xff"),
	"str32 nonce":            []byte("\x81\xa1n\xdb\xff\xff\xff\xf0"),
	"map32 headers":          []byte("\x81\xa2hd\xdf\x00\x0f\xff\xff"),
	"array32 kv puts":        []byte("\x81\xa2kp\xdd\x00\x0f\xff\xff"),
	"ext32 in unknown field": []byte("\x81\xa1x\xc9\xc9\xc9\xc9\xc9\xc9"),
	"time ext32":             []byte("\x81\xa1t\xc9\xff\xff\xff\xff\xff"),
}

// The marker decoder turns a hostile record into ErrCorruptRecord with
// memory in proportion to its size, however often it is decoded.
func TestHostileMarkersAllocateLittle(t *testing.T) {
	for name, in := range hostileMarkers {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 4*len(in), func() {
				for range 4 {
					if _, err := decodeInboxMarker(in); !errors.Is(err, runtime.ErrCorruptRecord) {
						t.Fatalf("inbox marker: %v; want ErrCorruptRecord", err)
					}
				}
			})
		})
	}
}

// FuzzDecodeInboxMarker: bad input is ErrCorruptRecord, never a panic nor
// more memory than in proportion to its size, and a good marker
// round-trips.
func FuzzDecodeInboxMarker(f *testing.F) {
	for _, m := range []*inboxMarker{
		{Kind: CommandSignal, Buf: []byte{1, 2}, Outcome: "delivered", AtMs: 5},
		{Kind: CommandSubmit, Active: "01A", Result: "01B", AtMs: 7},
		{Kind: CommandClearSignal, Cleared: true},
	} {
		b, err := encodeMarker(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range hostileMarkers {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	golden.AddCorpus(f, "testdata/golden/marker-*.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		var m *inboxMarker
		var err error
		allocbound.Check(t, 7*len(b), func() { m, err = decodeInboxMarker(b) })
		if err != nil {
			if !errors.Is(err, runtime.ErrCorruptRecord) {
				t.Fatalf("error not ErrCorruptRecord: %v", err)
			}
			return
		}
		again, err := encodeMarker(m)
		if err != nil {
			t.Fatal(err)
		}
		if m2, err := decodeInboxMarker(again); err != nil || m2.Kind != m.Kind || m2.Outcome != m.Outcome || m2.AtMs != m.AtMs {
			t.Fatalf("marker %+v does not round-trip: %+v, %v", m, m2, err)
		}
	})
}
