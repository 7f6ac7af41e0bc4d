package archive

import (
	"bytes"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// A sealed segment written by today's Build from fixed runs: its index
// object, data object and catalog entry. A layout change fails these
// tests; see docs/STORE-LAYOUT.md, "Fixtures". Each map holds one key, so
// the MessagePack encoding (whose map order is unspecified) is
// deterministic.
var (
	goldenIndex = filepath.Join("testdata", "golden", "index.v1.bin")
	goldenData  = filepath.Join("testdata", "golden", "data.v1.bin")
	goldenMeta  = filepath.Join("testdata", "golden", "meta.v1.bin")
)

func goldenRuns() []Run {
	return []Run{
		{Entry: Entry{ID: "run-b", Nonce: "nonce-b", Status: Failed, Step: 4, Error: "boom",
			SubmittedMs: 1767225600000, FinishedMs: 1767225660000, Totals: []byte{0x80}},
			Records: []Record{{Key: "tqw/out/run-b/2", Value: []byte("two")}, {Key: "tqw/hist/run-b/1", Value: []byte("one")}}},
		{Entry: Entry{ID: "run-a", Nonce: "nonce-a", Status: Succeeded, Step: 2, Result: []byte(`{"ok":true}`),
			SubmittedMs: 1767225500000, FinishedMs: 1767225700000,
			Headers: map[string]string{"traceparent": "00-abc-def-01"}, Labels: map[string]string{"team": "infra"}},
			Records: []Record{{Key: "tqw/out/run-a/1", Value: []byte("x")}}},
		{Entry: Entry{ID: "run-c", Nonce: "nonce-c", Status: Cancelled, Step: 1, ResultOmitted: true,
			SubmittedMs: 1767225400000, FinishedMs: 1767225450000}},
	}
}

func TestGoldenSegment(t *testing.T) {
	index, data, meta, err := Build(goldenRuns())
	if err != nil {
		t.Fatal(err)
	}
	meta.Seq, meta.Key = 7, "seg/00000000000000000007-01JGZ0000000000000000000AB"
	meta.ResultRetentionMs, meta.RecordRetentionMs, meta.MemoRetentionMs = 86400000, 3600000, 604800000
	mb, err := EncodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	index = golden.Check(t, goldenIndex, index)
	data = golden.Check(t, goldenData, data)
	mb = golden.Check(t, goldenMeta, mb)

	x, err := DecodeIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	if x.Version != 1 || x.DataSize != int64(len(data)) || len(x.Entries) != 3 {
		t.Fatalf("index: version %d, data size %d (data %d bytes), %d entries", x.Version, x.DataSize, len(data), len(x.Entries))
	}
	a, b, c := x.Find("run-a"), x.Find("run-b"), x.Find("run-c")
	if a == nil || b == nil || c == nil || x.Entries[0].ID != "run-a" || x.Entries[2].ID != "run-c" {
		t.Fatalf("entries %+v", x.Entries)
	}
	if a.Nonce != "nonce-a" || a.Status != Succeeded || a.Step != 2 || string(a.Result) != `{"ok":true}` || a.ResultOmitted ||
		a.SubmittedMs != 1767225500000 || a.FinishedMs != 1767225700000 ||
		!reflect.DeepEqual(a.Headers, map[string]string{"traceparent": "00-abc-def-01"}) ||
		!reflect.DeepEqual(a.Labels, map[string]string{"team": "infra"}) || a.Totals != nil {
		t.Errorf("run-a = %+v", a)
	}
	if b.Nonce != "nonce-b" || b.Status != Failed || b.Step != 4 || b.Error != "boom" || b.Result != nil ||
		b.SubmittedMs != 1767225600000 || b.FinishedMs != 1767225660000 || !bytes.Equal(b.Totals, []byte{0x80}) {
		t.Errorf("run-b = %+v", b)
	}
	if c.Status != Cancelled || !c.ResultOmitted || c.Step != 1 {
		t.Errorf("run-c = %+v", c)
	}

	for _, tc := range []struct {
		e    *Entry
		want []Record
	}{
		{a, []Record{{Key: "tqw/out/run-a/1", Value: []byte("x")}}},
		{b, []Record{{Key: "tqw/hist/run-b/1", Value: []byte("one")}, {Key: "tqw/out/run-b/2", Value: []byte("two")}}},
		{c, nil},
	} {
		recs, err := DecodeRecords(data, tc.e)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != len(tc.want) {
			t.Fatalf("%s: records %+v, want %+v", tc.e.ID, recs, tc.want)
		}
		for i := range recs {
			if recs[i].Key != tc.want[i].Key || !bytes.Equal(recs[i].Value, tc.want[i].Value) {
				t.Errorf("%s: record %d = %+v, want %+v", tc.e.ID, i, recs[i], tc.want[i])
			}
		}
	}

	m, err := DecodeMeta(mb)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 1 || m.Seq != 7 || m.Key != "seg/00000000000000000007-01JGZ0000000000000000000AB" ||
		m.IndexSize != int64(len(index)) || m.DataSize != int64(len(data)) || m.Runs != 3 ||
		!reflect.DeepEqual(m.States, []int{1, 1, 1}) || m.MinID != "run-a" || m.MaxID != "run-c" ||
		m.MinFinishedMs != 1767225450000 || m.MaxFinishedMs != 1767225700000 || len(m.Hashes) != 24 ||
		m.ResultRetentionMs != 86400000 || m.RecordRetentionMs != 3600000 || m.MemoRetentionMs != 604800000 || m.Slim {
		t.Fatalf("meta = %+v", m)
	}
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		if !m.MayHold(id) {
			t.Errorf("MayHold(%s) = false", id)
		}
	}
	if !m.MayHaveLabel("team", "infra") {
		t.Error(`MayHaveLabel("team", "infra") = false`)
	}
}
