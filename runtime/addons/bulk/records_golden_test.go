package bulk

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// A batch's records as today's code writes them, from fixed inputs: the
// batch header, item records (pending and terminal) and a phase memo. A
// layout change fails these tests (docs/STORE-LAYOUT.md, "Fixtures").

func goldenCheck(t *testing.T, name string, v any) []byte {
	t.Helper()
	b, err := encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return golden.Check(t, filepath.Join("testdata", "golden", name), b)
}

func TestGoldenMeta(t *testing.T) {
	want := &metaRecord{Total: 25, Threshold: Threshold{MaxFailed: 3, MaxFailedRatio: 0.2, MinFinished: 10}, Stopped: true,
		StopReason: "3 items failed", CreatedMs: 1767323045000}
	got, err := decodeMeta(goldenCheck(t, "meta.v1.bin", want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}

func TestGoldenItems(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  itemRecord
	}{
		{"item-pending.v1.bin", itemRecord{Gen: 1, Status: Pending, Input: []byte(`{"n":1}`)}},
		{"item-succeeded.v1.bin", itemRecord{Gen: 2, Status: Succeeded, Input: []byte(`{"n":2}`), Costs: costs{"tokens": 120, "calls": 2},
			Output: []byte(`"ok"`), Attempts: 1, FinishMs: 1767323046000}},
		{"item-failed.v1.bin", itemRecord{Gen: 1, Status: Failed, Costs: costs{"tokens": 7}, OutInMem: true, Error: "boom",
			Attempts: 3, FinishMs: 1767323047000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeItem(goldenCheck(t, tc.name, &tc.rec))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.rec) {
				t.Fatalf("decoded %+v, want %+v", *got, tc.rec)
			}
		})
	}
}

// TestGoldenItemWrittenUnsorted: an item record written before costs
// encoded their keys in order (Go's map order put "tokens" first) still
// decodes to the same record.
func TestGoldenItemWrittenUnsorted(t *testing.T) {
	want := itemRecord{Gen: 2, Status: Succeeded, Input: []byte(`{"n":2}`), Costs: costs{"tokens": 120, "calls": 2},
		Output: []byte(`"ok"`), Attempts: 1, FinishMs: 1767323046000}
	got, err := decodeItem(golden.Read(t, filepath.Join("testdata", "golden", "item-succeeded-unsorted.v1.bin")))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("decoded %+v, want %+v", *got, want)
	}
}

// TestGoldenPhaseMemo: a phase's result as memo.Memoized stores it (its
// own MessagePack encoding, not encode's), read back as the runner does.
// Costs holds one key: Memoized does not sort map keys.
func TestGoldenPhaseMemo(t *testing.T) {
	ctx := context.Background()
	want := phaseMemo{Out: []byte(`{"summary":"x"}`), Costs: costs{"tokens": 120}}
	m := memo.NewStore(mem.New(), memo.DefaultPrefix, func(string) error { return nil }).Step("order-7", 0)
	if _, err := memo.Memoized(ctx, m, memoKey("summarise"), func(context.Context) (phaseMemo, error) { return want, nil }); err != nil {
		t.Fatal(err)
	}
	b, _, err := m.Get(ctx, memoKey("summarise"))
	if err != nil {
		t.Fatal(err)
	}
	b = golden.Check(t, filepath.Join("testdata", "golden", "phase-memo.v1.bin"), b)
	var got phaseMemo
	if err := decode("phase memo", b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
}
