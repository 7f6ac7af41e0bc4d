package archive

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// The decoders take bytes from the store: whatever they are, a decoder
// returns a value that holds its invariants or an error wrapping
// ErrCorrupt, and never panics.

func seedSegment(f *testing.F) (index, data, meta []byte) {
	f.Helper()
	index, data, m, err := Build(sampleRuns(3))
	if err != nil {
		f.Fatal(err)
	}
	m.Key, m.ResultRetentionMs = "seg/1", 1000
	meta, err = EncodeMeta(m)
	if err != nil {
		f.Fatal(err)
	}
	return index, data, meta
}

func FuzzDecodeIndex(f *testing.F) {
	index, _, _ := seedSegment(f)
	f.Add(index)
	f.Add(index[:len(index)/2])
	f.Add([]byte("tqwidx1\n\x80\x00\x00\x00\x00"))
	golden.AddCorpus(f, "testdata/golden/index.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeIndex(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		for i := range x.Entries {
			e := &x.Entries[i]
			if x.Find(e.ID) != e {
				t.Fatalf("Find(%q) misses its entry", e.ID)
			}
			if e.DataOff+e.DataLen > x.DataSize {
				t.Fatalf("entry %q outside the data", e.ID)
			}
		}
	})
}

func FuzzDecodeRecords(f *testing.F) {
	index, data, _ := seedSegment(f)
	x, err := DecodeIndex(index)
	if err != nil {
		f.Fatal(err)
	}
	e := x.Entries[1]
	f.Add(data, e.DataOff, e.DataLen, e.DataCRC)
	f.Add(data[:len(data)-3], e.DataOff, e.DataLen, e.DataCRC)
	f.Add([]byte("tqwdat1\n\x91\x82"), int64(8), int64(2), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, off, n int64, crc uint32) {
		recs, err := DecodeRecords(data, &Entry{ID: "r", DataOff: off, DataLen: n, DataCRC: crc})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		for i := 1; i < len(recs); i++ {
			if recs[i-1].Key >= recs[i].Key {
				t.Fatal("records out of order")
			}
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	_, _, meta := seedSegment(f)
	f.Add(meta)
	f.Add(meta[:len(meta)-2])
	golden.AddCorpus(f, "testdata/golden/meta.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// Queries of a decoded entry never panic.
		m.MayHold(m.MinID)
		m.MayHold("x")
		m.MayHaveLabel("k", "v")
		for s := uint8(0); s < 5; s++ {
			m.StateCount(s)
		}
	})
}
