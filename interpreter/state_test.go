package interpreter

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
)

// hostileStates are run states whose declared lengths or counts exceed
// the state: the MessagePack library allocates toward them before it finds
// the input short, and recurses once per nesting level.
var hostileStates = map[string][]byte{
	"bin32 input":            []byte("\x81\xa1i\xc6\xff\xff\xff\xff"),
	"str32 definition":       []byte("\x81\xa1d\xdb\xff\xff\xff\xf0"),
	"array32 input":          []byte("\x81\xa1i\xdd\x00\x0f\xff\xff"),
	"map32 vars":             []byte("\x81\xa2vs\xdf\x00\x0f\xff\xff"),
	"ext32 in unknown field": []byte("\x81\xa1x\xc9\xc9\xc9\xc9\xc9\xc9"),
	"input nested 1e6 deep":  append(append([]byte("\x81\xa1i"), bytes.Repeat([]byte{0x91}, 1_000_000)...), 0xc0),
}

// A hostile state is ErrCorruptState and costs memory in proportion to its
// size.
func TestHostileStateAllocatesLittle(t *testing.T) {
	for name, in := range hostileStates {
		t.Run(name, func(t *testing.T) {
			allocbound.Check(t, 4*len(in), func() {
				for range 4 {
					if _, err := decodeState(in); !errors.Is(err, ErrCorruptState) {
						t.Fatalf("decodeState = %v; want ErrCorruptState", err)
					}
				}
			})
		})
	}
}

// The nesting limit on decode admits every value an output or a var may
// hold: one nested as deep as actions.Normalize allows round-trips.
func TestDeepestVarRoundTrips(t *testing.T) {
	var v any = "leaf"
	for range 10_000 {
		v = []any{v}
	}
	if _, err := actions.Normalize(v); err != nil {
		t.Fatalf("the test value is deeper than outputs may be: %v", err)
	}
	s := &state{V: stateVersion, Def: "abc", Input: v, Vars: map[string]any{"deep": v}, Step: 1}
	b, err := s.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(b)
	if err != nil {
		t.Fatalf("a state holding the deepest var does not decode: %v", err)
	}
	depth := 0
	for x := got.Vars["deep"]; ; depth++ {
		l, ok := x.([]any)
		if !ok {
			break
		}
		x = l[0]
	}
	if depth != 10_000 {
		t.Fatalf("decoded var nests %d deep, want 10000", depth)
	}
}

// FuzzDecodeRecords: the interpreter's other stored records (history,
// outputs, waiters, foreach items, large output objects) decode only to
// ErrCorruptState on bad input, with memory in proportion to its size.
func FuzzDecodeRecords(f *testing.F) {
	out := map[string]any{"status": int64(200), "body": map[string]any{"ok": true, "ids": []any{int64(1), int64(2)}}}
	for _, v := range []any{
		&HistoryRecord{N: 3, Step: "fetch", Kind: "http", Attempt: 2, Start: 1_700_000_000_000, End: 1_700_000_000_250,
			Outcome: OutcomeRetry, Error: &dsl.ErrorInfo{Type: "http", Message: "503", Status: 503, Retryable: true},
			Output: out, Next: "parse", Until: 1_700_000_060_000, WaitKey: "k"},
		&HistoryRecord{N: 4, Step: "big", Kind: "shell", Outcome: OutcomeOK, OutputRef: "tqw/outputs/r/0000000004"},
		&outputRecord{N: 3, Output: out},
		&outputRecord{N: 4, Ref: "tqw/outputs/r/0000000004"},
		&waitRecord{RunID: "r", Def: "abc", Step: 2, Schema: map[string]any{"type": "object", "required": []any{"ok"}}},
		&itemRecord{Output: []any{"a", int64(1), 2.5, nil}},
		out,
	} {
		b, err := encodeMsgpack(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range hostileStates {
		if len(b) < 1024 {
			f.Add(b)
		}
	}
	golden.AddCorpus(f, "testdata/golden/*.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		allocbound.Check(t, 6*len(b), func() {
			var h HistoryRecord
			var o outputRecord
			var w waitRecord
			var it itemRecord
			var v any
			for _, dst := range []any{&h, &o, &w, &it, &v} {
				if err := decodeMsgpack(b, dst); err != nil && !errors.Is(err, ErrCorruptState) {
					t.Fatalf("decode %T: %v does not match ErrCorruptState", dst, err)
				}
			}
		})
	})
}
