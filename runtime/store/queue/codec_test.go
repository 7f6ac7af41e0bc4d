package queue

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
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
