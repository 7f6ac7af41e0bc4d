package interpreter

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/internal/procid"
	"github.com/tqw-dsl/tqw/runtime/storage"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// The interpreter's stored formats written by today's encoders from fixed
// inputs: the run state (the Continue payload), definition objects,
// output records and objects, history, waiter, foreach item and child
// result records, run claims and the keys. Records gain fields only as
// optional ones; a layout change fails these tests (docs/STORE-LAYOUT.md,
// "Fixtures"). encodeMsgpack sorts map keys, so maps encode
// deterministically.

func goldenPath(name string) string { return filepath.Join("testdata", "golden", name) }

// goldenMs is 2026-01-02T03:04:05Z in Unix milliseconds.
const goldenMs = int64(1767323045000)

// goldenValue is a plain value of every kind a state or output holds.
func goldenValue() map[string]any {
	return map[string]any{"status": int64(200), "ratio": 2.5, "ok": true, "none": nil,
		"body": map[string]any{"ids": []any{int64(1), int64(-2)}, "name": "x"}}
}

// checkMsgpack encodes v, checks it against the fixture and decodes the
// fixture into a new value of v's type.
func checkMsgpack[T any](t *testing.T, name string, v *T) *T {
	t.Helper()
	b, err := encodeMsgpack(v)
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath(name), b)
	got := new(T)
	if err := decodeMsgpack(b, got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestGoldenState(t *testing.T) {
	want := &state{V: stateVersion, Def: strings.Repeat("d", 64), Input: goldenValue(),
		Vars: map[string]any{"n": int64(3), "list": []any{"a", "b"}}, Init: true, Step: 2, Attempt: 3, Visit: 7,
		Prev: "fetch", Phase: phaseSignal, WaitKey: "approve/order-7", Child: "order-7.child", Started: goldenMs, Deadline: goldenMs + 3600000,
		Pin: &pin{Hash: strings.Repeat("d", 64), Calls: map[string]*pin{"sub": {Hash: strings.Repeat("e", 64)}}}}
	b, err := want.encode()
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath("state.v1.bin"), b)
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n %+v\nwant\n %+v", got, want)
	}
}

// goldenDefinition is a definition object's bytes: the workflow source,
// stored under the SHA-256 of those bytes.
const goldenDefinition = `tqw: v1
name: golden
steps:
  - id: nap
    action: sleep
    with: {duration: 1s}
  - id: done
    succeed: "${ input.n + 1 }"
`

func TestGoldenDefinition(t *testing.T) {
	src := golden.Check(t, goldenPath("definition.v1.yaml"), []byte(goldenDefinition))
	wf, _, err := dsl.Parse("golden.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	key := golden.Check(t, goldenPath("definition-key.v1.txt"), []byte(defKey(wf.Hash)+"\n"))
	hash := strings.TrimPrefix(strings.TrimSpace(string(key)), defsPrefix)
	if hash != wf.Hash {
		t.Fatalf("definition hash %s, fixture's key names %s", wf.Hash, hash)
	}
	if err := checkDefinition(hash, src); err != nil {
		t.Fatal(err)
	}
	if wf.Name != "golden" || len(wf.Steps) != 2 || wf.Steps[0].ID != "nap" || wf.Steps[1].ID != "done" {
		t.Fatalf("parsed %s with %d steps", wf.Name, len(wf.Steps))
	}
}

func TestGoldenOutputRecords(t *testing.T) {
	inline := &outputRecord{N: 3, Output: goldenValue()}
	if got := checkMsgpack(t, "output.v1.bin", inline); !reflect.DeepEqual(got, inline) {
		t.Fatalf("inline output decoded %+v, want %+v", got, inline)
	}

	obj, err := encodeMsgpack(goldenValue())
	if err != nil {
		t.Fatal(err)
	}
	obj = golden.Check(t, goldenPath("output-object.v1.bin"), obj)
	key := outputObjectKey("order-7", 4, obj)
	v, err := checkOutputObject(key, obj)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, any(goldenValue())) {
		t.Fatalf("output object decoded %#v", v)
	}

	ref := &outputRecord{N: 4, Ref: key}
	if got := checkMsgpack(t, "output-ref.v1.bin", ref); !reflect.DeepEqual(got, ref) {
		t.Fatalf("output reference decoded %+v, want %+v", got, ref)
	}
	if outputObjectSum(ref.Ref) == "" {
		t.Fatalf("output key %s names no checksum", ref.Ref)
	}
}

func TestGoldenHistory(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  HistoryRecord
	}{
		{"history.v1.bin", HistoryRecord{N: 3, Seq: 1, Step: "fetch", Kind: "http", Attempt: 2, Start: goldenMs, End: goldenMs + 250,
			Outcome: OutcomeRetry, Error: &dsl.ErrorInfo{Type: "http", Message: "503 Service Unavailable", Status: 503, Retryable: true},
			Output: goldenValue(), Next: "parse", Until: goldenMs + 60000, WaitKey: "approve/order-7"}},
		{"history-ref.v1.bin", HistoryRecord{N: 4, Step: "big", Kind: "shell", Attempt: 1, Start: goldenMs, End: goldenMs + 1,
			Outcome: OutcomeOK, OutputRef: "tqw/outputs/order-7/0000000004." + strings.Repeat("ab", 32)}},
		{"history-rejected.v1.bin", HistoryRecord{N: 5, Step: "approve", Kind: "wait_signal", Attempt: 1, Start: goldenMs, End: goldenMs,
			Outcome: OutcomeSignalRejected, Error: &dsl.ErrorInfo{Type: "validation", Message: "missing ok"},
			Rejected: &RejectedSignal{Key: "approve/order-7", Size: 12, Reason: "missing ok"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeMsgpack(&tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			b = golden.Check(t, goldenPath(tc.name), b)
			// decodeHistory reads an OutputRef's object only with a store.
			got, err := decodeHistory(context.Background(), nil, storage.KVEntry{Key: histKey("order-7", tc.rec.N, tc.rec.Seq), Value: b})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.rec) {
				t.Fatalf("decoded\n %+v\nwant\n %+v", got, tc.rec)
			}
		})
	}
}

func TestGoldenWaitRecord(t *testing.T) {
	want := &waitRecord{RunID: "order-7", Def: strings.Repeat("d", 64), Step: 2,
		Schema: map[string]any{"type": "object", "required": []any{"ok"}}, Expected: true}
	if got := checkMsgpack(t, "wait.v1.bin", want); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestGoldenItemRecord(t *testing.T) {
	want := &itemRecord{Output: []any{"a", int64(1), 2.5, nil},
		Spent: []actions.Spend{{Attempt: 2, Model: "gpt-x", PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CostUSD: 0.25, CostKnown: true}}}
	if got := checkMsgpack(t, "item.v1.bin", want); !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestGoldenChildResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  childResult
	}{
		{"child-result.v1.bin", childResult{Status: "succeeded", Result: []byte(`{"ok":true}`)}},
		{"child-result-failed.v1.bin", childResult{Status: "failed", Omitted: true, Error: "step 2: boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkMsgpack(t, tc.name, &tc.res); !reflect.DeepEqual(*got, tc.res) {
				t.Fatalf("decoded %+v, want %+v", *got, tc.res)
			}
		})
	}
}

// TestGoldenRunClaim reads the fixture back through RunClaims, as a
// rerun does.
func TestGoldenRunClaim(t *testing.T) {
	want := RunClaim{RunID: "order-7", Key: "nightly", Since: time.UnixMilli(goldenMs).UTC(),
		Owner: procid.Identity{Host: "build-1", BootID: "0b0e1d2c-0000-4000-8000-000000000001", PID: 4242, Start: "123456"}}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, goldenPath("run-claim.v1.json"), b)
	ctx := context.Background()
	store := mem.New()
	if _, err := store.Put(ctx, claimKey(want.Key, want.RunID), b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	claims, err := RunClaims(ctx, store, want.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || !claims[0].Since.Equal(want.Since) {
		t.Fatalf("claims %+v", claims)
	}
	claims[0].Since = want.Since
	if !reflect.DeepEqual(claims[0], want) {
		t.Fatalf("decoded %+v, want %+v", claims[0], want)
	}
}

// TestGoldenKeys fixes the interpreter's keys, one "name key" a line.
func TestGoldenKeys(t *testing.T) {
	finished := time.UnixMilli(goldenMs)
	keys := []struct{ name, key string }{
		{"output", outKey("order-7", "fetch")},
		{"history", histKey("order-7", 7, 0)},
		{"history-folded", histKey("order-7", 7, 2)},
		{"wait", waitKey("approve/order-7")},
		{"child", childPrefix("order-7") + "order-7.child"},
		{"expire", expireKey(finished, "order-7")},
		{"definition", defKey(strings.Repeat("d", 64))},
		{"output-object-old", outputObject("order-7", 4)},
		{"run-claim", claimKey("nightly", "order-7")},
		{"call-signal", callKey("order-7.child")},
	}
	var text strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&text, "%s %q\n", k.name, k.key)
	}
	b := golden.Check(t, goldenPath("keys.v1.txt"), []byte(text.String()))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, quoted, _ := strings.Cut(line, " ")
		if name != "expire" {
			continue
		}
		var key string
		if _, err := fmt.Sscanf(quoted, "%q", &key); err != nil {
			t.Fatal(err)
		}
		at, run, err := parseExpireKey(key)
		if err != nil || run != "order-7" || at.UnixMilli() != goldenMs {
			t.Fatalf("parseExpireKey(%q) = %v, %q, %v", key, at, run, err)
		}
	}
}
