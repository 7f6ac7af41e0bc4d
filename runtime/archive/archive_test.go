package archive

import (
	"errors"
	"fmt"
	"testing"
)

func sampleRuns(n int) []Run {
	runs := make([]Run, 0, n)
	for i := range n {
		id := fmt.Sprintf("run-%04d", (i*7919)%n) // not in id order
		r := Run{Entry: Entry{ID: id, Nonce: "n" + id, Status: uint8(1 + i%3), Step: i, Result: []byte(`"r-` + id + `"`),
			Error: "e" + id, SubmittedMs: int64(1000 + i), FinishedMs: int64(2000 + i),
			Headers: map[string]string{"h": id}, Labels: map[string]string{"team": fmt.Sprint("t", i%4)}, Totals: []byte{0x80}}}
		r.Records = []Record{{Key: "tqw/out/" + id + "/b", Value: []byte("out")}, {Key: "tqw/hist/" + id + "/1", Value: []byte(id)}}
		runs = append(runs, r)
	}
	return runs
}

func TestBuildAndRead(t *testing.T) {
	runs := sampleRuns(300)
	index, data, meta, err := Build(runs)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Runs != 300 || meta.MinID != "run-0000" || meta.MaxID != "run-0299" || meta.StateCount(Succeeded) != 100 ||
		meta.StateCount(Failed) != 100 || meta.StateCount(Cancelled) != 100 || meta.MinFinishedMs != 2000 || meta.MaxFinishedMs != 2299 {
		t.Fatalf("meta %+v", meta)
	}
	meta.Key, meta.ResultRetentionMs = "seg/1", 1000
	mb, err := EncodeMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	meta, err = DecodeMeta(mb)
	if err != nil {
		t.Fatal(err)
	}
	x, err := DecodeIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if !meta.MayHold(r.ID) {
			t.Fatalf("MayHold(%s) = false", r.ID)
		}
		e := x.Find(r.ID)
		if e == nil || e.Status != r.Status || e.Step != r.Step || string(e.Result) != string(r.Result) || e.Labels["team"] != r.Labels["team"] ||
			e.Headers["h"] != r.ID || e.FinishedMs != r.FinishedMs || string(e.Totals) != "\x80" {
			t.Fatalf("entry of %s: %+v", r.ID, e)
		}
		recs, err := DecodeRecords(data, e)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 || recs[0].Key != "tqw/hist/"+r.ID+"/1" || string(recs[0].Value) != r.ID {
			t.Fatalf("records of %s: %+v", r.ID, recs)
		}
		if got := Records(recs, "tqw/out/"+r.ID+"/"); len(got) != 1 || string(got[0].Value) != "out" {
			t.Fatalf("Records(out) of %s: %+v", r.ID, got)
		}
	}
	for i := 1; i < len(x.Entries); i++ {
		if x.Entries[i-1].ID >= x.Entries[i].ID {
			t.Fatal("entries not sorted")
		}
	}
	if x.Find("run-0300") != nil || x.Find("a") != nil || x.After("run-0100") != 101 {
		t.Fatal("Find or After of an absent id")
	}
	// Absent ids: out of range is certain; in range the hashes decide.
	misses := 0
	for i := range 10000 {
		if meta.MayHold(fmt.Sprintf("run-0%03d-x%d", i%300, i)) {
			misses++
		}
	}
	if misses != 0 || meta.MayHold("zzz") {
		t.Fatalf("MayHold of absent ids: %d true", misses)
	}
	for i := range 4 {
		if !meta.MayHaveLabel("team", fmt.Sprint("t", i)) {
			t.Fatalf("label team=t%d missing", i)
		}
	}
	fp := 0
	for i := range 20000 {
		if meta.MayHaveLabel("team", fmt.Sprint("x", i)) {
			fp++
		}
	}
	// 16 bits an entry, 11 probes: about 0.05%.
	if fp > 40 {
		t.Fatalf("label filter: %d false positives in 20,000", fp)
	}
}

func TestBuildRefusesBadRuns(t *testing.T) {
	runs := sampleRuns(2)
	runs[1].ID = runs[0].ID
	if _, _, _, err := Build(runs); err == nil {
		t.Fatal("duplicate run ids accepted")
	}
	runs = sampleRuns(1)
	runs[0].Status = 9
	if _, _, _, err := Build(runs); err == nil {
		t.Fatal("state 9 accepted")
	}
	runs = sampleRuns(1)
	runs[0].Records = append(runs[0].Records, runs[0].Records[0])
	if _, _, _, err := Build(runs); err == nil {
		t.Fatal("duplicate record keys accepted")
	}
}

func TestDecodersRefuseDamage(t *testing.T) {
	index, data, meta, err := Build(sampleRuns(5))
	if err != nil {
		t.Fatal(err)
	}
	meta.Key, meta.ResultRetentionMs = "s", 1
	mb, _ := EncodeMeta(meta)
	for i := range index {
		b := append([]byte(nil), index...)
		b[i] ^= 0x40
		if _, err := DecodeIndex(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("index with byte %d flipped: %v", i, err)
		}
	}
	if _, err := DecodeIndex(index[:len(index)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated index: %v", err)
	}
	x, _ := DecodeIndex(index)
	e := x.Entries[2]
	for i := e.DataOff; i < e.DataOff+e.DataLen; i++ {
		b := append([]byte(nil), data...)
		b[i] ^= 1
		if _, err := DecodeRecords(b, &e); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("data with byte %d flipped: %v", i, err)
		}
	}
	if _, err := DecodeRecords(data[:e.DataOff+e.DataLen-1], &e); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated data: %v", err)
	}
	if _, err := DecodeMeta(mb[:len(mb)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated meta: %v", err)
	}
	bad := *meta
	bad.States = []int{5, 0, 1}
	bb, _ := EncodeMeta(&bad)
	if _, err := DecodeMeta(bb); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("meta with wrong state counts: %v", err)
	}
	bad = *meta
	bad.LabelBloom = bad.LabelBloom[:31]
	bb, _ = EncodeMeta(&bad)
	if _, err := DecodeMeta(bb); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("meta with a 31-byte filter: %v", err)
	}
}
