package kv

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/tqw-dsl/tqw/internal/golden"
)

// The kv objects' fixtures, written by today's encoders from fixed inputs.
// A layout change fails these tests; see docs/STORE-LAYOUT.md, "Fixtures".
var (
	goldenWAL            = filepath.Join("testdata", "golden", "wal.v1.bin")
	goldenFence          = filepath.Join("testdata", "golden", "wal-fence.v1.bin")
	goldenChunk          = filepath.Join("testdata", "golden", "chunk.v1.bin")
	goldenManifest       = filepath.Join("testdata", "golden", "manifest.v1.bin")
	goldenManifestPacked = filepath.Join("testdata", "golden", "manifest.v2.bin")
)

var goldenBatchID = [batchIDLen]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}

func goldenWALBytes() []byte {
	var rec recordEncoder
	rec.put([]byte("workflow/runs/r1"), []byte("value-1"))
	rec.del([]byte("workflow/runs/r0"))
	rec.putLarge([]byte("big"), largeRef{name: "00000000000000000007-00000000000000000001", size: 70000})
	out := rec.appendTo(nil)
	rec.reset()
	rec.put([]byte("k2"), nil)
	out = rec.appendTo(out)
	return append(encodeWALHeader(false, 3, 7, goldenBatchID, 2), out...)
}

func TestGoldenWAL(t *testing.T) {
	b := golden.Check(t, goldenWAL, goldenWALBytes())
	h, recs, err := decodeWAL(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.fence || h.epoch != 3 || h.seq != 7 || h.batchID != goldenBatchID || h.nrec != 2 {
		t.Fatalf("header = %+v", h)
	}
	if len(recs) != 2 || len(recs[0]) != 3 || len(recs[1]) != 1 {
		t.Fatalf("records = %d, ops %v", len(recs), recs)
	}
	want := []walOp{
		{kind: opPut, key: []byte("workflow/runs/r1"), value: []byte("value-1")},
		{kind: opDelete, key: []byte("workflow/runs/r0")},
		{kind: opPutLarge, key: []byte("big"), large: largeRef{name: "00000000000000000007-00000000000000000001", size: 70000}},
		{kind: opPut, key: []byte("k2"), value: []byte{}},
	}
	got := append(append([]walOp(nil), recs[0]...), recs[1]...)
	for i, w := range want {
		g := got[i]
		if g.kind != w.kind || !bytes.Equal(g.key, w.key) || !bytes.Equal(g.value, w.value) || g.large != w.large {
			t.Errorf("op %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestGoldenFence(t *testing.T) {
	b := golden.Check(t, goldenFence, encodeWALHeader(true, 4, 8, goldenBatchID, 0))
	h, recs, err := decodeWAL(b)
	if err != nil {
		t.Fatal(err)
	}
	if !h.fence || h.epoch != 4 || h.seq != 8 || h.batchID != goldenBatchID || h.nrec != 0 || len(recs) != 0 {
		t.Fatalf("fence = %+v, %d records", h, len(recs))
	}
}

func TestGoldenChunk(t *testing.T) {
	var w chunkWriter
	w.add(&entry{key: []byte("a"), val: []byte("1")})
	w.add(&entry{key: []byte("b"), large: &largeRef{name: "00000000000000000009-00000000000000000002", size: 100000}})
	w.add(&entry{key: []byte("c"), val: []byte{}})
	b := golden.Check(t, goldenChunk, w.finish())
	es, err := decodeChunk(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3", len(es))
	}
	if string(es[0].key) != "a" || string(es[0].val) != "1" || es[0].large != nil {
		t.Errorf("entry 0 = %+v", es[0])
	}
	if string(es[1].key) != "b" || es[1].large == nil || *es[1].large != (largeRef{name: "00000000000000000009-00000000000000000002", size: 100000}) {
		t.Errorf("entry 1 = %+v", es[1])
	}
	if string(es[2].key) != "c" || len(es[2].val) != 0 || es[2].large != nil {
		t.Errorf("entry 2 = %+v", es[2])
	}
}

func goldenManifestValue(packed bool) *manifest {
	return &manifest{
		writer:       [16]byte{0xaa, 0xbb, 0xcc, 0xdd, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		epoch:        5,
		firstLiveWAL: 42,
		checkpointID: 3,
		chunks: []chunkInfo{
			{name: "00000000000000000003-0000", first: []byte{}, count: 10, size: 512},
			{name: "00000000000000000003-0001", first: []byte("m"), count: 7, size: 300},
		},
		packedWAL: packed,
	}
}

// TestGoldenManifest covers both versions a build reads: 1 (unpacked WAL
// folder) and 2 (packed), which differ only in the version byte.
func TestGoldenManifest(t *testing.T) {
	for _, tc := range []struct {
		path   string
		packed bool
	}{{goldenManifest, false}, {goldenManifestPacked, true}} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			want := goldenManifestValue(tc.packed)
			b := golden.Check(t, tc.path, want.encode())
			m, err := decodeManifest(b)
			if err != nil {
				t.Fatal(err)
			}
			if m.writer != want.writer || m.epoch != 5 || m.firstLiveWAL != 42 || m.checkpointID != 3 || m.packedWAL != tc.packed {
				t.Fatalf("manifest = %+v", m)
			}
			if len(m.chunks) != 2 {
				t.Fatalf("%d chunks, want 2", len(m.chunks))
			}
			for i, c := range m.chunks {
				w := want.chunks[i]
				if c.name != w.name || !bytes.Equal(c.first, w.first) || c.count != w.count || c.size != w.size {
					t.Errorf("chunk %d = %+v, want %+v", i, c, w)
				}
			}
		})
	}
}
