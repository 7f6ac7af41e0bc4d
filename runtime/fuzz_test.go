package runtime

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
)

// Decoders of every durable record: bad input is ErrCorruptRecord, never a
// panic nor more memory than in proportion to its size, and a good record
// round-trips.

func mustEncode(t testing.TB, v any) []byte {
	b, err := encodeRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeRecords(f *testing.F) {
	hash := bytes.Repeat([]byte{7}, 32)
	f.Add(mustEncode(f, &runRecord{Nonce: "n", InputHash: hash, SubmittedMs: 5, Headers: map[string]string{"a": "b"}}))
	f.Add(mustEncode(f, &stepPointer{Nonce: "n", Step: 3, JobID: "j"}))
	f.Add([]byte{0x93, 0xa1, 'n', 0x03, 0xa1, 'j'}) // the struct as an array
	f.Add(mustEncode(f, &resultRecord{Nonce: "n", Status: runstate.Failed, Error: "e", Step: 2}))
	f.Add(mustEncode(f, newReplayRecord(ContinueOnSignal([]byte("p"), "k", time.Second), newEffects(), t0)))
	f.Add(mustEncode(f, &runstate.Outcome{RunID: "r", Status: runstate.Succeeded, Result: []byte("x"), FinishedAt: t0}))
	for _, b := range hostileRecords {
		f.Add(b)
	}
	f.Add(encodeSignal([]byte("x")))
	f.Add(encodeBufferedSignal([]byte(`{"ok":true}`), t0))
	f.Add([]byte{signalFormatTimed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x81, 0xa1, 'n', 0xc0})
	golden.AddCorpus(f, "testdata/golden/*.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(err error) {
			if err != nil && !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error not ErrCorruptRecord: %v", err)
			}
		}
		allocbound.Check(t, 7*len(b), func() {
			for _, decode := range []func([]byte) error{
				func(b []byte) error { return second(decodeRunRecord(b)) },
				func(b []byte) error { return second(decodeStepPointer(b)) },
				func(b []byte) error { return second(decodePointerJob(b)) },
				func(b []byte) error { return second(decodeResultRecord(b)) },
				func(b []byte) error { return second(decodeReplayRecord(b)) },
				func(b []byte) error { return second(decodeRunOutcome(b)) },
				func(b []byte) error { return second(decodeSignal(b)) },
			} {
				check(decode(b))
			}
		})
		if r, err := decodeRunRecord(b); err == nil {
			if len(r.InputHash) != 32 || r.Nonce == "" {
				t.Fatalf("accepted invalid run record %+v", r)
			}
		} else {
			check(err)
		}
		if p, err := decodeStepPointer(b); err == nil {
			if p.JobID == "" || p.Step < 0 {
				t.Fatalf("accepted invalid pointer %+v", p)
			}
			if id, err := decodePointerJob(b); err != nil || id != p.JobID {
				t.Fatalf("decodePointerJob = %q, %v; decodeStepPointer read job %q", id, err, p.JobID)
			}
		} else {
			check(err)
			if id, err2 := decodePointerJob(b); err2 == nil {
				t.Fatalf("decodePointerJob accepted %q from a pointer decodeStepPointer refuses (%v)", id, err)
			}
		}
		if r, err := decodeResultRecord(b); err == nil {
			if !r.Status.Valid() {
				t.Fatalf("accepted invalid result %+v", r)
			}
		} else {
			check(err)
		}
		if r, err := decodeReplayRecord(b); err == nil {
			if r.outcome(0).validate() != nil {
				t.Fatalf("accepted invalid replay record %+v", r)
			}
		} else {
			check(err)
		}
		if o, err := decodeRunOutcome(b); err == nil {
			if o.RunID == "" || !o.Status.Valid() {
				t.Fatalf("accepted invalid notification %+v", o)
			}
		} else {
			check(err)
		}
		if p, at, err := decodeSignalTime(b); err == nil {
			again := encodeSignal(p)
			if b[0] == signalFormatTimed {
				again = encodeBufferedSignal(p, at)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("signal value does not round-trip")
			}
		} else {
			check(err)
		}
	})
}

func FuzzParseTimedKey(f *testing.F) {
	f.Add(timedKey(kvTerminals, t0, "run-1"))
	f.Add(kvTerminals + "zz/run")
	f.Add(kvTerminals)
	f.Fuzz(func(t *testing.T, key string) {
		ts, id, err := parseTimedKey(kvTerminals, key)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error not ErrCorruptRecord: %v", err)
			}
			return
		}
		if ts.UnixMilli() < 0 {
			t.Fatalf("negative time from %q", key)
		}
		hexPart := key[len(kvTerminals) : len(kvTerminals)+16]
		if hexPart == strings.ToLower(hexPart) && timedKey(kvTerminals, ts, id) != key {
			t.Fatalf("timed key %q does not round-trip", key)
		}
	})
}

func TestRecordsRoundTrip(t *testing.T) {
	eff := newEffects()
	_ = eff.Put("a", []byte("1"))
	_ = eff.Delete("b")
	rec := newReplayRecord(ContinueAfter([]byte("p"), time.Minute), eff, t0)
	got, err := decodeReplayRecord(mustEncode(t, rec))
	if err != nil {
		t.Fatal(err)
	}
	o := got.outcome(0)
	if o.kind != outcomeContinue || o.trigger.Kind != triggerAfter || o.trigger.Delay != time.Minute || string(o.Payload) != "p" ||
		len(got.Puts) != 1 || got.Puts[0].Key != "a" || len(got.Deletes) != 1 || got.Deletes[0] != "b" || got.StoredMs != t0.UnixMilli() {
		t.Fatalf("replay round trip %+v", got)
	}
	ts, id, err := parseTimedKey(kvExpiry, timedKey(kvExpiry, t0, "r:1"))
	if err != nil || !ts.Equal(t0) || id != "r:1" {
		t.Fatalf("timed key round trip: %v %q %v", ts, id, err)
	}
}
