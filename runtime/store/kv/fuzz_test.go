package kv

import (
	"bytes"
	"testing"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
)

func walSeeds() [][]byte {
	var rec recordEncoder
	rec.put([]byte("key"), []byte("value"))
	rec.del([]byte("gone"))
	rec.putLarge([]byte("big"), largeRef{name: "00000000000000000001-00000000000000000001", size: 1 << 20})
	body := rec.appendTo(nil)
	var rec2 recordEncoder
	rec2.put(nil, nil)
	body = rec2.appendTo(body)
	id := [batchIDLen]byte{1, 2, 3}
	return [][]byte{
		append(encodeWALHeader(false, 3, 7, id, 2), body...),
		encodeWALHeader(true, 4, 8, id, 0),
		{},
		[]byte("TQWL\x01"),
	}
}

// FuzzDecodeWAL checks the WAL decoder never panics on any input, allocates
// in proportion to it, and that whatever it accepts re-encodes to the same
// bytes.
func FuzzDecodeWAL(f *testing.F) {
	for _, s := range walSeeds() {
		f.Add(s)
	}
	golden.AddCorpus(f, "testdata/golden/wal*.v*.bin")
	f.Fuzz(func(t *testing.T, data []byte) {
		var h walHeader
		var recs [][]walOp
		var err error
		allocbound.Check(t, len(data), func() { h, recs, err = decodeWAL(data) })
		if err != nil {
			return
		}
		var out []byte
		for _, ops := range recs {
			var rec recordEncoder
			for _, op := range ops {
				switch op.kind {
				case opPut:
					rec.put(op.key, op.value)
				case opDelete:
					rec.del(op.key)
				case opPutLarge:
					rec.putLarge(op.key, op.large)
				}
			}
			out = rec.appendTo(out)
		}
		out = append(encodeWALHeader(h.fence, h.epoch, h.seq, h.batchID, h.nrec), out...)
		if !bytes.Equal(out, data) {
			t.Fatalf("accepted input does not re-encode identically:\n in %x\nout %x", data, out)
		}
	})
}

// FuzzDecodeChunk checks the chunk decoder never panics, allocates in
// proportion to its input, accepts only strictly sorted keys, and
// round-trips what it accepts.
func FuzzDecodeChunk(f *testing.F) {
	var w chunkWriter
	w.add(&entry{key: []byte("a"), val: []byte("1")})
	w.add(&entry{key: []byte("b"), large: &largeRef{name: "x", size: 100}})
	w.add(&entry{key: []byte("c"), val: nil})
	f.Add(w.finish())
	f.Add([]byte{})
	f.Add([]byte("TQWC\x01\x00\x00\x00\x00\x00"))
	golden.AddCorpus(f, "testdata/golden/chunk.v*.bin")
	f.Fuzz(func(t *testing.T, data []byte) {
		var es []entry
		var err error
		allocbound.Check(t, len(data), func() { es, err = decodeChunk(data) })
		if err != nil {
			return
		}
		var w chunkWriter
		for i := range es {
			if i > 0 && bytes.Compare(es[i-1].key, es[i].key) >= 0 {
				t.Fatalf("accepted unsorted keys %q, %q", es[i-1].key, es[i].key)
			}
			w.add(&es[i])
		}
		if out := w.finish(); !bytes.Equal(out, data) {
			t.Fatalf("accepted chunk does not re-encode identically")
		}
	})
}

// FuzzDecodeManifest checks the manifest decoder never panics, allocates in
// proportion to its input, and round-trips what it accepts.
func FuzzDecodeManifest(f *testing.F) {
	m := &manifest{epoch: 5, firstLiveWAL: 9, checkpointID: 2, chunks: []chunkInfo{{name: "n", first: []byte("k"), count: 3, size: 99}}}
	f.Add(m.encode())
	f.Add((&manifest{epoch: 1, firstLiveWAL: 1}).encode())
	f.Add((&manifest{epoch: 2, firstLiveWAL: 3, packedWAL: true}).encode())
	f.Add([]byte("TQWM"))
	golden.AddCorpus(f, "testdata/golden/manifest.v*.bin")
	f.Fuzz(func(t *testing.T, data []byte) {
		var m *manifest
		var err error
		allocbound.Check(t, len(data), func() { m, err = decodeManifest(data) })
		if err != nil {
			return
		}
		if out := m.encode(); !bytes.Equal(out, data) {
			t.Fatalf("accepted manifest does not re-encode identically")
		}
	})
}
