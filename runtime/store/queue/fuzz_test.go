package queue

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
)

func sampleRecord() *record {
	return &record{
		ID: "01J", Queue: "q", Headers: map[string]string{"a": "b"}, State: StateClaimed, Attempts: 2, MaxAttempts: 5,
		Priority: -3, Seq: 99, HasPayload: true, EnqueuedAt: 1, ClaimedAt: 2, RunAt: 3, WokenAt: 4, WakePayload: []byte("w"),
		LastError: "e", DedupKey: "d", Token: 7, CancelRequested: true,
		History: []attemptRecord{{N: 1, ClaimedAt: 1, EndedAt: 2, Outcome: "nacked", Error: "x"}, {N: 2, ClaimedAt: 3}},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := sampleRecord()
	b, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, r)
	}
	for _, bad := range [][]byte{nil, {0xc1}, b[:len(b)/2]} {
		if _, err := decodeRecord(bad); err == nil {
			t.Fatalf("decodeRecord(%x) accepted garbage", bad)
		}
	}
}

func TestEffectsRoundTrip(t *testing.T) {
	p := 4
	e := &SettlementEffects{
		Enqueue:          []NewJob{{Queue: "q", Payload: []byte("p"), Options: EnqueueOptions{ID: "i", DedupKey: "d", Priority: &p, RunAt: t0, MaxAttempts: 2, Headers: map[string]string{"h": "v"}}}},
		KVPuts:           []KVWrite{{"k", []byte("v")}},
		KVDeletes:        []string{"x"},
		KVCompareDeletes: []KVWrite{{"c", []byte("old")}, {"e", []byte{}}},
	}
	b, err := encodeEffects(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEffects(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, e)
	}
}

// FuzzDecodeRecord: decoding arbitrary bytes never panics, fails only with
// ErrCorrupt, allocates in proportion to the input, and whatever decodes
// re-encodes to something that decodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []*record{sampleRecord(), {ID: "x", Queue: "y", State: StatePending}} {
		b, _ := encodeRecord(r)
		f.Add(b)
	}
	for _, b := range hostileRecords {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	golden.AddCorpus(f, "testdata/golden/job.v*.bin")
	f.Fuzz(func(t *testing.T, data []byte) {
		var r *record
		var err error
		allocbound.Check(t, len(data), func() { r, err = decodeRecord(data) })
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		b, err := encodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeRecord(b)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-encoded record does not round-trip: %v", err)
		}
	})
}

// FuzzDecodeEffects: decoding arbitrary bytes never panics, fails only with
// ErrCorrupt, allocates in proportion to the input, and what decodes
// re-encodes.
func FuzzDecodeEffects(f *testing.F) {
	p := 3
	for _, e := range []*SettlementEffects{
		{KVPuts: []KVWrite{{"k", []byte("v")}}, Enqueue: []NewJob{{Queue: "q"}}},
		{Enqueue: []NewJob{{Queue: "steps", Payload: []byte("payload"), Options: EnqueueOptions{ID: "run:1", DedupKey: "run:r:2",
			Priority: &p, RunAt: t0, MaxAttempts: 3, Headers: map[string]string{"workflow.run": "r"}}}},
			KVDeletes: []string{"workflow/steps/r"}, KVCompareDeletes: []KVWrite{{"workflow/runs/r", []byte("old")}}},
	} {
		b, _ := encodeEffects(e)
		f.Add(b)
	}
	for _, b := range hostileEffects {
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa1, 'v', 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		var e *SettlementEffects
		var err error
		allocbound.Check(t, len(data), func() { e, err = decodeEffects(data) })
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if _, err := encodeEffects(e); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzKeys: index keys built from any queue name and ID parse back.
func FuzzKeys(f *testing.F) {
	f.Add("q", "id", int64(5), 3, uint64(9))
	f.Add("a\xffb", "", int64(-1), -7, uint64(0))
	f.Fuzz(func(t *testing.T, q, id string, at int64, prio int, seq uint64) {
		if bytes.IndexByte([]byte(q), 0) >= 0 {
			return
		}
		k := scheduledKey(q, at, id)
		gotAt, gotID, ok := timeIndexParts(pfxScheduled, q, k)
		if id != "" && (!ok || gotAt != at || gotID != id) {
			t.Fatalf("timeIndexParts(%q) = %d %q %v", k, gotAt, gotID, ok)
		}
		if s, ok := readySeq(q, readyKey(q, prio, seq)); !ok || s != seq {
			t.Fatalf("readySeq = %d %v", s, ok)
		}
		if name, ok := queueOfCountKey(countKey(q, StateDone)); q != "" && (!ok || name != q) {
			t.Fatalf("queueOfCountKey = %q %v", name, ok)
		}
	})
}

func TestKeyOrder(t *testing.T) {
	// Higher priority first, then lower seq.
	ks := [][]byte{readyKey("q", 5, 9), readyKey("q", 5, 10), readyKey("q", 0, 1), readyKey("q", -5, 0)}
	for i := 1; i < len(ks); i++ {
		if bytes.Compare(ks[i-1], ks[i]) >= 0 {
			t.Fatalf("ready key %d does not sort before %d", i-1, i)
		}
	}
	ts := [][]byte{scheduledKey("q", -10, "z"), scheduledKey("q", 0, "a"), scheduledKey("q", 1, "a"), scheduledKey("q", 1, "b")}
	for i := 1; i < len(ts); i++ {
		if bytes.Compare(ts[i-1], ts[i]) >= 0 {
			t.Fatalf("scheduled key %d does not sort before %d", i-1, i)
		}
	}
	// One queue's keys never fall inside another's prefix.
	if bytes.HasPrefix(readyKey("ab", 0, 0), queuePrefix(pfxReady, "a")) {
		t.Fatal("queue a's prefix covers queue ab")
	}
}
