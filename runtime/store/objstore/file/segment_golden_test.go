package file

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// goldenSegment is a packed folder's segment written by today's encoder:
// header, two puts and a delete, then the zero bytes that end the records.
// A layout change fails TestGoldenSegment; see docs/STORE-LAYOUT.md,
// "Fixtures".
var goldenSegment = filepath.Join("testdata", "golden", "segment.v1.bin")

// goldenSalt is the fuzz targets' salt, so the fixture's records seed
// FuzzSegmentScan.
var goldenSalt = fuzzSalt

type goldenRecord struct {
	kind byte
	key  string
	data []byte
	mod  time.Time
}

var goldenRecords = []goldenRecord{
	{kindPut, "wal/00000000000000000001", []byte("first object"), time.Unix(1767225600, 123456789)},
	{kindPut, "wal/00000000000000000002", []byte{}, time.Unix(1767225601, 0)},
	{kindDelete, "wal/00000000000000000001", nil, time.Unix(1767225602, 5)},
}

func goldenSegmentBytes() []byte {
	seg := encodeSegHeader(segHeader{salt: goldenSalt, prevEnd: 4096})
	for _, r := range goldenRecords {
		var etag [16]byte
		if r.kind == kindPut {
			etag = etag16(r.data)
		}
		seg = appendRecord(seg, goldenSalt, int64(len(seg)), r.kind, r.key, r.data, etag, r.mod)
	}
	return append(seg, make([]byte, segHeaderLen)...)
}

func TestGoldenSegment(t *testing.T) {
	seg := golden.Check(t, goldenSegment, goldenSegmentBytes())
	h, err := decodeSegHeader(seg)
	if err != nil {
		t.Fatal(err)
	}
	if h.salt != goldenSalt || h.prevEnd != 4096 {
		t.Fatalf("header = %+v", h)
	}
	sc := scanner{r: bytes.NewReader(seg), salt: h.salt, limit: int64(len(seg))}
	var got []rec
	var datas [][]byte
	end, damaged, why := sc.scan(segHeaderLen, false, func(off int64, r rec) {
		got = append(got, r)
		datas = append(datas, seg[r.dataOff:r.dataOff+r.dataLen])
	})
	if why != stopZero || damaged != 0 || end != int64(len(seg)-segHeaderLen) {
		t.Fatalf("scan ended at %d (stop %d, %d damaged bytes), want a clean end at %d", end, why, damaged, len(seg)-segHeaderLen)
	}
	if len(got) != len(goldenRecords) {
		t.Fatalf("%d records, want %d", len(got), len(goldenRecords))
	}
	for i, w := range goldenRecords {
		g := got[i]
		if g.kind != w.kind || g.key != w.key || !g.modTime.Equal(w.mod) || !bytes.Equal(datas[i], w.data) {
			t.Errorf("record %d = kind %d key %q data %q mod %v, want %+v", i, g.kind, g.key, datas[i], g.modTime, w)
		}
		if w.kind == kindPut && g.etagString() != etagOf(w.data) {
			t.Errorf("record %d etag %s, want %s", i, g.etagString(), etagOf(w.data))
		}
	}
}
