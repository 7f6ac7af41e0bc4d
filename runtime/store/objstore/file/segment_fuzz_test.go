package file

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
)

var fuzzSalt = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

// FuzzSegmentScan decodes arbitrary bytes as a segment body: the scanner
// never panics or reads outside the segment, and every record it accepts
// lies inside it, at increasing 8-aligned offsets, with its data matching
// its ETag and its bytes exactly what appendRecord writes for it.
func FuzzSegmentScan(f *testing.F) {
	var seed []byte
	for i, key := range []string{"a", "wal/00000000000000000001", "x/y"} {
		seed = appendRecord(seed, fuzzSalt, segHeaderLen+int64(len(seed)), kindPut, key, bytes.Repeat([]byte{byte(i)}, i*9), etag16(bytes.Repeat([]byte{byte(i)}, i*9)), time.Unix(0, int64(i)))
	}
	seed = appendRecord(seed, fuzzSalt, segHeaderLen+int64(len(seed)), kindDelete, "a", nil, [16]byte{}, time.Unix(0, 9))
	f.Add(seed, false)
	f.Add(seed[:len(seed)-3], true)
	f.Add(append(bytes.Clone(seed[:40]), seed...), true)
	f.Add(golden.Read(f, goldenSegment)[segHeaderLen:], false)
	f.Fuzz(func(t *testing.T, body []byte, resync bool) {
		seg := append(encodeSegHeader(segHeader{salt: fuzzSalt}), body...)
		sc := scanner{r: bytes.NewReader(seg), salt: fuzzSalt, limit: int64(len(seg))}
		prev := int64(segHeaderLen)
		end, damaged, _ := sc.scan(segHeaderLen, resync, func(off int64, r rec) {
			if off < prev || off%8 != 0 || off+r.size > int64(len(seg)) {
				t.Fatalf("record at %d (size %d) after %d in %d bytes", off, r.size, prev, len(seg))
			}
			data := seg[r.dataOff : r.dataOff+r.dataLen]
			if !r.dataMatches(data) {
				t.Fatalf("record at %d: data does not match its etag", off)
			}
			var d []byte
			if r.kind == kindPut {
				d = data
			}
			want := appendRecord(nil, fuzzSalt, off, r.kind, r.key, d, r.etag, r.modTime)
			if n := recHeaderLen + len(r.key) + len(d); !bytes.Equal(want[:n], seg[off:off+int64(n)]) {
				t.Fatalf("record at %d decodes to one that encodes differently", off)
			}
			prev = off + r.size
		})
		if end < segHeaderLen || end > int64(len(seg)) || damaged < 0 || (!resync && damaged != 0) {
			t.Fatalf("end %d, damaged %d of %d bytes", end, damaged, len(seg))
		}
		if _, err := decodeSegHeader(seg); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzSegmentDamage writes records, damages the bytes (the fuzzer picks
// where and how), and scans: the records before the damage all come
// back, and nothing ever comes back that was not written, where it was
// written: damage only loses records, never invents or moves one.
func FuzzSegmentDamage(f *testing.F) {
	f.Add(uint16(5), uint16(100), []byte{0xff}, uint8(3))
	f.Add(uint16(0), uint16(64), []byte{}, uint8(1))
	f.Add(uint16(900), uint16(8), bytes.Repeat([]byte{0}, 50), uint8(7))
	f.Fuzz(func(t *testing.T, shape, at uint16, junk []byte, n uint8) {
		var seg []byte
		seg = append(seg, encodeSegHeader(segHeader{salt: fuzzSalt})...)
		written := map[int64]string{}
		var offs []int64
		for i := range int(n%12) + 1 {
			key := fmt.Sprintf("k/%d", i)
			data := bytes.Repeat([]byte{byte(i + 1)}, (int(shape)>>i)%300)
			off := int64(len(seg))
			seg = appendRecord(seg, fuzzSalt, off, kindPut, key, data, etag16(data), time.Unix(0, int64(i)))
			written[off] = key
			offs = append(offs, off)
		}
		seg = append(seg, make([]byte, 256)...) // the zero tail of a preallocated segment
		pos := segHeaderLen + int64(at)%(int64(len(seg))-segHeaderLen)
		copy(seg[pos:], junk)
		changed := pos + int64(len(junk))
		if len(junk) == 0 {
			changed = pos
		}
		for _, resync := range []bool{false, true} {
			sc := scanner{r: bytes.NewReader(seg), salt: fuzzSalt, limit: int64(len(seg))}
			got := map[int64]bool{}
			sc.scan(segHeaderLen, resync, func(off int64, r rec) {
				if written[off] != r.key {
					t.Fatalf("resync %v: record %q at %d was never written there", resync, r.key, off)
				}
				got[off] = true
			})
			for i, off := range offs {
				size := recordSize(len(written[off]), int(binary.LittleEndian.Uint32(seg[off+8:])))
				if i+1 < len(offs) {
					size = offs[i+1] - off
				}
				if off+size <= pos && !got[off] {
					t.Fatalf("resync %v: record at %d, before the damage at %d..%d, is lost", resync, off, pos, changed)
				}
			}
		}
	})
}

func etag16(data []byte) [16]byte { return [16]byte(etagBytes(etagOf(data))) }
