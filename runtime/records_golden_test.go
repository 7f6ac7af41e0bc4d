package runtime

import (
	"bytes"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// The runtime's durable records and keys written by today's encoders from
// fixed inputs. Records gain fields only as optional ones, so these
// fixtures are version 1 until a record changes incompatibly; a layout
// change fails these tests (docs/STORE-LAYOUT.md, "Fixtures"). Each map
// holds one key, so the MessagePack encoding (whose map order is
// unspecified) is deterministic.

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name) }

var (
	goldenSubmitted = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	goldenFinished  = time.Date(2026, 1, 2, 3, 5, 6, 789000000, time.UTC)
	goldenHash      = bytes.Repeat([]byte{0xab}, 32)
)

// checkRecord encodes v, checks it against the fixture and decodes the
// fixture with decode, returning what it decoded.
func checkRecord[T any](t *testing.T, name string, v *T, decode func([]byte) (*T, error)) *T {
	t.Helper()
	b := golden.Check(t, goldenPath(name), mustEncode(t, v))
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestGoldenRunRecord(t *testing.T) {
	want := &runRecord{Nonce: "01JGZ0000000000000000000NC", InputHash: goldenHash, SubmittedMs: goldenSubmitted.UnixMilli(),
		Headers: map[string]string{"traceparent": "00-a-b-01"}, Labels: map[string]string{"team": "infra"}}
	if got := checkRecord(t, "run.v1.bin", want, decodeRunRecord); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestGoldenStepPointer(t *testing.T) {
	want := &stepPointer{Nonce: "01JGZ0000000000000000000NC", Step: 3, JobID: "01JGZ0000000000000000000JB"}
	if got := checkRecord(t, "step-pointer.v1.bin", want, decodeStepPointer); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	b := golden.Read(t, goldenPath("step-pointer.v1.bin"))
	if id, err := decodePointerJob(b); err != nil || id != want.JobID {
		t.Fatalf("decodePointerJob = %q, %v", id, err)
	}
}

func TestGoldenResultRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  resultRecord
	}{
		{"result-succeeded.v1.bin", resultRecord{Nonce: "01JGZ0000000000000000000NC", Status: runstate.Succeeded, Result: []byte(`{"ok":true}`),
			Step: 4, SubmittedMs: goldenSubmitted.UnixMilli(), FinishedMs: goldenFinished.UnixMilli(),
			Headers: map[string]string{"traceparent": "00-a-b-01"}, Labels: map[string]string{"team": "infra"}}},
		{"result-failed.v1.bin", resultRecord{Nonce: "01JGZ0000000000000000000NC", Status: runstate.Failed, ResultOmitted: true,
			Error: "step 2: boom", Step: 2, SubmittedMs: goldenSubmitted.UnixMilli(), FinishedMs: goldenFinished.UnixMilli()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkRecord(t, tc.name, &tc.rec, decodeResultRecord); !reflect.DeepEqual(*got, tc.rec) {
				t.Fatalf("decoded %+v, want %+v", *got, tc.rec)
			}
			st, err := decodeResultState(golden.Read(t, goldenPath(tc.name)))
			if err != nil || st != tc.rec.Status.State() {
				t.Fatalf("decodeResultState = %v, %v", st, err)
			}
		})
	}
}

func TestGoldenReplayRecord(t *testing.T) {
	eff := newEffects()
	if err := eff.Put("app/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := eff.Delete("app/gone"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    StepOutcome
		eff  *Effects
	}{
		{"replay-signal.v1.bin", ContinueOnSignal([]byte("state"), "approve/order-7", time.Hour), eff},
		{"replay-after.v1.bin", ContinueAfter([]byte("state"), 90*time.Second), newEffects()},
		{"replay-succeed.v1.bin", Succeed([]byte(`"done"`)), newEffects()},
		{"replay-fail.v1.bin", Fail("boom"), newEffects()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := newReplayRecord(tc.o, tc.eff, goldenSubmitted)
			got := checkRecord(t, tc.name, want, decodeReplayRecord)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded %+v, want %+v", got, want)
			}
			if o := got.outcome(0); !reflect.DeepEqual(o, tc.o) {
				t.Fatalf("outcome %+v, want %+v", o, tc.o)
			}
		})
	}
}

func TestGoldenTotals(t *testing.T) {
	want := &totalsRecord{Nonce: "01JGZ0000000000000000000NC", Puts: 2.5, Gets: 3, Lists: 1, Deletes: 0.25, Heads: 4,
		Counters: map[string]float64{"llm.tokens": 1234}}
	got := checkRecord(t, "totals.v1.bin", want, func(b []byte) (*totalsRecord, error) {
		var r totalsRecord
		return &r, decodeRecord("totals", b, &r)
	})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// TestGoldenSealedRow: the per-run row of stores sealed by earlier builds,
// which this build still reads to delete.
func TestGoldenSealedRow(t *testing.T) {
	want := &sealedRow{Nonce: "01JGZ0000000000000000000NC", Seq: 7, State: runstate.Cancelled}
	got := checkRecord(t, "sealed-row.v1.bin", want, func(b []byte) (*sealedRow, error) {
		var r sealedRow
		return &r, decodeRecord("sealed row", b, &r)
	})
	if *got != *want {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestGoldenOutcome(t *testing.T) {
	want := &runstate.Outcome{RunID: "order-7", Status: runstate.Succeeded, Result: []byte(`{"ok":true}`), Step: 4,
		Headers: map[string]string{"traceparent": "00-a-b-01"}, Labels: map[string]string{"team": "infra"},
		SubmittedAt: goldenSubmitted, FinishedAt: goldenFinished}
	got := checkRecord(t, "outcome.v1.bin", want, decodeRunOutcome)
	if !got.SubmittedAt.Equal(want.SubmittedAt) || !got.FinishedAt.Equal(want.FinishedAt) {
		t.Fatalf("times %v, %v; want %v, %v", got.SubmittedAt, got.FinishedAt, want.SubmittedAt, want.FinishedAt)
	}
	got.SubmittedAt, got.FinishedAt = want.SubmittedAt, want.FinishedAt
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

// TestGoldenSignals: a signal value of format 1 (payload only) and of
// format 2 (buffering time, then payload); both decode.
func TestGoldenSignals(t *testing.T) {
	b := golden.Check(t, goldenPath("signal.v1.bin"), encodeSignal([]byte(`{"approved":true}`)))
	p, at, err := decodeSignalTime(b)
	if err != nil || string(p) != `{"approved":true}` || !at.IsZero() {
		t.Fatalf("format 1: %q, %v, %v", p, at, err)
	}
	b = golden.Check(t, goldenPath("signal.v2.bin"), encodeBufferedSignal([]byte(`{"approved":true}`), goldenFinished))
	p, at, err = decodeSignalTime(b)
	if err != nil || string(p) != `{"approved":true}` || !at.Equal(goldenFinished) {
		t.Fatalf("format 2: %q, %v, %v", p, at, err)
	}
	b = golden.Check(t, goldenPath("signal-empty.v1.bin"), encodeSignal(nil))
	if p, err := decodeSignal(b); err != nil || p == nil || len(p) != 0 {
		t.Fatalf("empty payload: %q, %v", p, err)
	}
}

// TestGoldenKeys fixes the runtime's caller-KV keys, one "name key" a line.
func TestGoldenKeys(t *testing.T) {
	const run = "order-7"
	keys := []struct{ name, key string }{
		{"run", runKey(run)},
		{"step", stepKey(run)},
		{"cancel", cancelKey(run)},
		{"result", resultKey(run)},
		{"expiry", timedKey(kvExpiry, goldenFinished, run)},
		{"terminal", timedKey(kvTerminals, goldenFinished, run)},
		{"signal-buffer", sigBufKey("approve/order-7")},
		{"signal-wait", sigWaitKey("approve/order-7")},
		{"signal-delivered", deliveredKey(run, 2)},
		{"totals", totalsKey(run)},
		{"label", labelKey("team", "infra", run)},
		{"seal-queue", timedKey(kvSealQ, goldenFinished, run)},
		{"sealed-segment", segmentKey(7)},
		{"sealed-run", sealedRunKey(run)},
		{"sealed-next", kvSealNext},
		{"sealed-gen", kvSealGen},
		{"step-dedup", dedupKey(run, 3)},
	}
	var text strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&text, "%s %q\n", k.name, k.key)
	}
	b := golden.Check(t, goldenPath("keys.v1.txt"), []byte(text.String()))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, quoted, _ := strings.Cut(line, " ")
		var key string
		if _, err := fmt.Sscanf(quoted, "%q", &key); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for prefix, timed := range map[string]string{"expiry": kvExpiry, "terminal": kvTerminals, "seal-queue": kvSealQ} {
			if name != prefix {
				continue
			}
			at, id, err := parseTimedKey(timed, key)
			if err != nil || id != run || at.UnixMilli() != goldenFinished.UnixMilli() {
				t.Errorf("%s: parseTimedKey = %v, %q, %v", name, at, id, err)
			}
		}
	}
}
