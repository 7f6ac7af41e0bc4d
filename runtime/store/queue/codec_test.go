package queue

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/allocbound"
)

// The hand-written record codec speaks the library's format both ways, so
// records written by either decode with the other.
func TestRecordCodecMatchesLibrary(t *testing.T) {
	long := strings.Repeat("x", 300)
	recs := []*record{
		sampleRecord(),
		{V: 1, ID: "a", Queue: "q", State: StatePending},
		{V: 2, ID: long, Queue: strings.Repeat("q", 40), State: StateDead, Attempts: 300, MaxAttempts: 70000,
			Priority: math.MinInt32 - 1, Seq: math.MaxUint64, Inline: []byte(long), EnqueuedAt: -1,
			FailedAt: math.MaxInt64, RunAt: math.MinInt64, WakePayload: make([]byte, 70000), LastError: long,
			Token: 1 << 40, Headers: map[string]string{long: "", "k": long},
			History: []attemptRecord{{N: 1, ClaimedAt: -200, Outcome: "o"}}},
	}
	for i, r := range recs {
		lib, err := msgpack.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var fromLib record
		if err := readRecord(lib, &fromLib); err != nil || !reflect.DeepEqual(&fromLib, r) {
			t.Fatalf("record %d: library bytes decoded by hand: %v\n got %+v\nwant %+v", i, err, fromLib, r)
		}
		var fromHand record
		if err := msgpack.Unmarshal(appendRecord(nil, r), &fromHand); err != nil || !reflect.DeepEqual(&fromHand, r) {
			t.Fatalf("record %d: hand bytes decoded by the library: %v\n got %+v\nwant %+v", i, err, fromHand, r)
		}
	}
}

// A record with both payload forms is corrupt, not silently resolved.
func TestRecordWithTwoPayloadsIsCorrupt(t *testing.T) {
	r := sampleRecord()
	r.Inline = []byte("p")
	b, _ := encodeRecord(r)
	if _, err := decodeRecord(b); err == nil {
		t.Fatal("accepted")
	}
}

// hostileRecords are job records whose declared lengths exceed the record.
// The first is the input FuzzDecodeRecord's worker died on: the
// MessagePack library's pooled decoder grew its buffer toward the declared
// 3.4 GB a little more at every decode (and kept it), so repeated decodes
// ran the process out of memory while the input alone replayed clean.
var hostileRecords = map[string][]byte{
	"ext32 in an unknown field": []byte("\xde00\xa1%\xc9\xc9\xc9\xc9\xc9\xc9"),
	"bin32 inline payload":      []byte("\x81\xa2pl\xc6\xff\xff\xff\xff"),
	"bin32 wake payload":        []byte("\x81\xa2wp\xc6\x7f\xff\xff\xff"),
	"str32 id":                  []byte("\x81\xa2id\xdb\xff\xff\xff\xf0"),
	"str32 key":                 []byte("\x81\xdb\xff\xff\xff\xf0"),
	"map32 headers":             []byte("\x81\xa1h\xdf\xff\xff\xff\xff"),
	"array32 history":           []byte("\x81\xa2hi\xdd\x00\x00\xff\xff"),
	"deep nesting":              append([]byte("\x81\xa1x"), bytes.Repeat([]byte{0x91}, 100_000)...),
	// Found after the length check: the library reads an extension's
	// payload as the record map, so the ext32 inside it went unchecked.
	"extension read as the map": []byte("\xd70\x89\xa10\xc90000"),
}

// A record whose lengths exceed its bytes is ErrCorrupt and costs memory
// in proportion to its size, however often it is decoded.
func TestHostileRecordAllocatesLittle(t *testing.T) {
	for name, in := range hostileRecords {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 8*len(in), func() {
				for range 8 {
					if _, err := decodeRecord(in); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("decodeRecord = %v; want ErrCorrupt", err)
					}
				}
			})
		})
	}
}

// hostileEffects are cancel-effects records whose declared lengths exceed
// the record (decoded by the library's reflection, which trusts them too).
var hostileEffects = map[string][]byte{
	"bin32 payload":    []byte("\x82\xa1v\x01\xa2en\x91\x81\xa1p\xc6\xff\xff\xff\xff"),
	"bin32 kv value":   []byte("\x82\xa1v\x01\xa2kp\x91\x82\xa1k\xa1k\xa1v\xc6\xff\xff\xff\xff"),
	"array32 enqueues": []byte("\x82\xa1v\x01\xa2en\xdd\x00\x0f\xff\xff"),
	"str32 delete":     []byte("\x82\xa1v\x01\xa2kd\x91\xdb\xff\xff\xff\xf0"),
	"ext32 unknown":    []byte("\x82\xa1v\x01\xa1x\xc9\xc9\xc9\xc9\xc9\xc9"),
}

func TestHostileEffectsAllocateLittle(t *testing.T) {
	for name, in := range hostileEffects {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 8*len(in), func() {
				for range 8 {
					if _, err := decodeEffects(in); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("decodeEffects = %v; want ErrCorrupt", err)
					}
				}
			})
		})
	}
}
