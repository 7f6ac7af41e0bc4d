package queue

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// The queue's stored formats written by today's encoders from fixed
// inputs: job records (format 2, and format 1, which this build still
// reads), cancel effects and the index keys. A layout change fails these
// tests; see docs/STORE-LAYOUT.md, "Fixtures". Each map holds one key, so
// the encoding (whose map order is unspecified) is deterministic.

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name) }

// goldenNanos is 2026-01-01T00:00:00Z in Unix nanoseconds.
const goldenNanos = int64(1767225600) * int64(time.Second)

func goldenJobRecord() *record {
	return &record{
		ID: "01JGZ0000000000000000000JB", Queue: "workflow", Headers: map[string]string{"traceparent": "00-a-b-01"},
		State: StateClaimed, Attempts: 2, MaxAttempts: 5, Priority: -3, Seq: 99, Inline: []byte(`{"run":"r1"}`),
		EnqueuedAt: goldenNanos, ClaimedAt: goldenNanos + 2e9, RunAt: goldenNanos + 1e9, WokenAt: goldenNanos + 3e9,
		WakePayload: []byte("wake"), LastError: "boom", DedupKey: "dedup-1", Token: 7, CancelRequested: true,
		History: []attemptRecord{
			{N: 1, ClaimedAt: goldenNanos + 1e9, EndedAt: goldenNanos + 15e8, Outcome: "nacked", Error: "boom"},
			{N: 2, ClaimedAt: goldenNanos + 2e9},
		},
	}
}

func TestGoldenJobRecord(t *testing.T) {
	want := goldenJobRecord()
	b, err := encodeRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath("job.v2.bin"), b)
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n %+v\nwant\n %+v", got, want)
	}
	st, h, err := readJobState(b, "traceparent")
	if err != nil || st != StateClaimed || h != "00-a-b-01" {
		t.Fatalf("readJobState = %q, %q, %v", st, h, err)
	}
}

// TestGoldenJobRecordV1: a format-1 record is a format-2 one without inline
// payloads ("pl"); builds still read it.
func TestGoldenJobRecordV1(t *testing.T) {
	want := &record{V: 1, ID: "01JGZ0000000000000000000J1", Queue: "workflow", State: StateDone, Attempts: 1, MaxAttempts: 3,
		Seq: 4, HasPayload: true, EnqueuedAt: goldenNanos, ClaimedAt: goldenNanos + 1e9, CompletedAt: goldenNanos + 2e9,
		History: []attemptRecord{{N: 1, ClaimedAt: goldenNanos + 1e9, EndedAt: goldenNanos + 2e9, Outcome: "acked"}}}
	b := golden.Check(t, goldenPath("job.v1.bin"), appendRecord(nil, want))
	got, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != 1 || !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n %+v\nwant\n %+v", got, want)
	}
	if st, _, err := readJobState(b, "traceparent"); err != nil || st != StateDone {
		t.Fatalf("readJobState = %q, %v", st, err)
	}
}

func TestGoldenEffects(t *testing.T) {
	prio := 4
	want := &SettlementEffects{
		Enqueue: []NewJob{{Queue: "workflow", Payload: []byte("p"), Options: EnqueueOptions{ID: "01JGZ0000000000000000000E1",
			DedupKey: "d", Priority: &prio, RunAt: time.Unix(0, goldenNanos+5e9), MaxAttempts: 2, Headers: map[string]string{"h": "v"}}}},
		KVPuts:           []KVWrite{{Key: "app/k", Value: []byte("v")}},
		KVDeletes:        []string{"app/x"},
		KVCompareDeletes: []KVWrite{{Key: "app/c", Value: []byte("old")}, {Key: "app/e", Value: []byte{}}},
	}
	b, err := encodeEffects(want)
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath("effects.v1.bin"), b)
	got, err := decodeEffects(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Enqueue[0].Options.RunAt.Equal(want.Enqueue[0].Options.RunAt) {
		t.Fatalf("run at %v, want %v", got.Enqueue[0].Options.RunAt, want.Enqueue[0].Options.RunAt)
	}
	got.Enqueue[0].Options.RunAt = want.Enqueue[0].Options.RunAt
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n %+v\nwant\n %+v", got, want)
	}
}

// TestGoldenKeys fixes the index keys' bytes: name, then the key in hex,
// one a line.
func TestGoldenKeys(t *testing.T) {
	const q, id = "workflow", "01JGZ0000000000000000000JB"
	keys := []struct {
		name string
		key  []byte
	}{
		{"job", jobKey(id)},
		{"payload", payloadKey(id)},
		{"effects", effectsKey(id)},
		{"ready", readyKey(q, -3, 99)},
		{"scheduled", scheduledKey(q, goldenNanos, id)},
		{"claimed", claimedKey(q, id)},
		{"done", doneKey(q, goldenNanos, id)},
		{"dead", deadKey(q, -goldenNanos, id)},
		{"dedup", dedupKey(q, "dedup-1")},
		{"count-pending", countKey(q, StatePending)},
		{"count-scheduled", countKey(q, StateScheduled)},
		{"count-claimed", countKey(q, StateClaimed)},
		{"count-done", countKey(q, StateDone)},
		{"count-dead", countKey(q, StateDead)},
		{"kv", kvKey("app/k")},
	}
	var text strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&text, "%s %s\n", k.name, hex.EncodeToString(k.key))
	}
	b := golden.Check(t, goldenPath("keys.v1.txt"), []byte(text.String()))
	fixed := map[string][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, h, _ := strings.Cut(line, " ")
		k, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		fixed[name] = k
	}
	if seq, ok := readySeq(q, fixed["ready"]); !ok || seq != 99 {
		t.Errorf("readySeq = %d, %v", seq, ok)
	}
	for _, tc := range []struct {
		name, pfx string
		at        int64
	}{{"scheduled", pfxScheduled, goldenNanos}, {"done", pfxDone, goldenNanos}, {"dead", pfxDead, -goldenNanos}} {
		if at, gotID, ok := timeIndexParts(tc.pfx, q, fixed[tc.name]); !ok || at != tc.at || gotID != id {
			t.Errorf("%s: timeIndexParts = %d, %q, %v", tc.name, at, gotID, ok)
		}
	}
	if got, ok := queueOfCountKey(fixed["count-done"]); !ok || got != q {
		t.Errorf("queueOfCountKey = %q, %v", got, ok)
	}
	if !bytes.HasPrefix(fixed["kv"], []byte(pfxKV)) || !bytes.HasPrefix(fixed["job"], []byte(pfxJob)) {
		t.Errorf("kv %q, job %q", fixed["kv"], fixed["job"])
	}
}
