package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Binary formats. Every object starts with a 4-byte magic and a format
// version byte. Integers are unsigned varints unless noted. Decoders check
// every length against the bytes that remain before allocating, so hostile
// input costs at most O(len(input)) memory and never panics.
//
// WAL object wal/<seq>:
//
//	"TQWL" ver flags epoch seq batchID[16] nrec hdrCRC32C[4]
//	nrec × ( len body crc32c(body)[4] )
//	body = nops × op
//	op   = 1 key value            (put, inline value)
//	     | 2 key                  (delete)
//	     | 3 key name size        (put, value in object large/<name>)
//
// A fence object has flags&flagFence set and no records.
//
// Chunk object chunk/<name>:
//
//	"TQWC" ver count entries... crc32c(everything before)[4]
//	entry = 1 key value | 3 key name size
//
// Manifest object manifest:
//
//	"TQWM" ver writerID[16] epoch firstLiveWAL checkpointID nchunks chunks... crc32c[4]
//	chunk = name firstKey count size
//
// A manifest's version is 2 (manifestPackedVersion) once a writer packed
// the store's WAL folder (see doc.go, "Layout"), else 1; the bytes are the
// same. Builds that read only version 1 cannot see packed WAL objects and
// so refuse such a store instead of taking it for a shorter log.
const (
	formatVersion = 1
	// manifestPackedVersion marks a manifest of a store whose WAL folder
	// was packed.
	manifestPackedVersion = 2

	opPut      = 1
	opDelete   = 2
	opPutLarge = 3

	flagFence = 1

	batchIDLen = 16
)

var (
	magicWAL      = []byte("TQWL")
	magicChunk    = []byte("TQWC")
	magicManifest = []byte("TQWM")
	crcTable      = crc32.MakeTable(crc32.Castagnoli)
)

// errDecode is the cause inside ErrCorrupt for malformed bytes.
var errDecode = errors.New("malformed")

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendCRC(b []byte, from int) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[from:], crcTable))
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// decoder reads from a byte slice; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errDecode, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(v) {
		// Overlong encodings are rejected so every accepted object has
		// exactly one encoding.
		d.fail("bad varint for %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items each at least minSize bytes long, rejecting
// counts the remaining input cannot hold.
func (d *decoder) count(what string, minSize int) int {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.b)/minSize) {
		d.fail("%s %d exceeds the %d bytes left", what, v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated before %s", what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) fixed(what string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("truncated in %s", what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// bytes returns a length-prefixed slice aliasing the input.
func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("%s length %d exceeds the %d bytes left", what, n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) magic(m []byte) {
	got := d.fixed("magic", len(m))
	if d.err == nil && string(got) != string(m) {
		d.fail("bad magic %q, want %q", got, m)
	}
	if v := d.byte1("version"); d.err == nil && v != formatVersion {
		d.fail("unknown format version %d (this build reads %d)", v, formatVersion)
	}
}

// checkCRC verifies that the last 4 bytes of b are the CRC32C of the rest and
// returns the rest.
func checkCRC(b []byte) ([]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes is too short for a checksum", errDecode, len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errDecode)
	}
	return body, nil
}

// walOp is one decoded write of a commit record.
type walOp struct {
	kind  byte
	key   []byte
	value []byte // opPut
	large largeRef
}

// walHeader is the decoded header of a WAL object.
type walHeader struct {
	fence   bool
	epoch   uint64
	seq     uint64
	batchID [batchIDLen]byte
	nrec    int
}

// encodeWALHeader returns the header for a WAL object with nrec records.
func encodeWALHeader(fence bool, epoch, seq uint64, id [batchIDLen]byte, nrec int) []byte {
	b := make([]byte, 0, 64)
	b = append(b, magicWAL...)
	b = append(b, formatVersion)
	var flags byte
	if fence {
		flags |= flagFence
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, epoch)
	b = binary.AppendUvarint(b, seq)
	b = append(b, id[:]...)
	b = binary.AppendUvarint(b, uint64(nrec))
	return appendCRC(b, 0)
}

// recordEncoder appends the ops of one commit as one checksummed record.
type recordEncoder struct {
	body []byte
	nops int
}

func (e *recordEncoder) put(key, value []byte) {
	e.body = append(e.body, opPut)
	e.body = appendBytes(e.body, key)
	e.body = appendBytes(e.body, value)
	e.nops++
}

func (e *recordEncoder) putLarge(key []byte, ref largeRef) {
	e.body = append(e.body, opPutLarge)
	e.body = appendBytes(e.body, key)
	e.body = appendString(e.body, ref.name)
	e.body = binary.AppendUvarint(e.body, uint64(ref.size))
	e.nops++
}

func (e *recordEncoder) del(key []byte) {
	e.body = append(e.body, opDelete)
	e.body = appendBytes(e.body, key)
	e.nops++
}

// appendTo appends the finished record (len body crc) to dst, where body
// is the op count and the ops.
func (e *recordEncoder) appendTo(dst []byte) []byte {
	var n [binary.MaxVarintLen64]byte
	count := binary.PutUvarint(n[:], uint64(e.nops))
	dst = binary.AppendUvarint(dst, uint64(count+len(e.body)))
	start := len(dst)
	dst = append(dst, n[:count]...)
	dst = append(dst, e.body...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], crcTable))
}

// reset empties e, keeping its buffer for the next record.
func (e *recordEncoder) reset() {
	if cap(e.body) > 1<<20 {
		e.body = nil // do not pin one huge commit's buffer
	}
	e.body, e.nops = e.body[:0], 0
}

// decodeWALHeader decodes and verifies the header; it returns the rest.
func decodeWALHeader(b []byte) (walHeader, []byte, error) {
	var h walHeader
	d := &decoder{b: b}
	d.magic(magicWAL)
	flags := d.byte1("flags")
	h.fence = flags&flagFence != 0
	h.epoch = d.uvarint("epoch")
	h.seq = d.uvarint("sequence")
	copy(h.batchID[:], d.fixed("batch id", batchIDLen))
	h.nrec = d.count("record count", 5)
	if d.err != nil {
		return h, nil, d.err
	}
	hdrLen := len(b) - len(d.b)
	if len(d.b) < 4 {
		return h, nil, fmt.Errorf("%w: truncated header checksum", errDecode)
	}
	if _, err := checkCRC(b[:hdrLen+4]); err != nil {
		return h, nil, fmt.Errorf("%w (header)", err)
	}
	if flags&^flagFence != 0 {
		return h, nil, fmt.Errorf("%w: unknown flags %#x", errDecode, flags)
	}
	if h.fence && h.nrec != 0 {
		return h, nil, fmt.Errorf("%w: fence object with %d records", errDecode, h.nrec)
	}
	return h, d.b[4:], nil
}

// decodeWAL decodes a whole WAL object: its header and, per record, the ops
// of one commit. Keys and values alias b.
func decodeWAL(b []byte) (walHeader, [][]walOp, error) {
	h, rest, err := decodeWALHeader(b)
	if err != nil {
		return h, nil, err
	}
	recs := make([][]walOp, 0, h.nrec)
	d := &decoder{b: rest}
	for i := 0; i < h.nrec; i++ {
		body := d.bytes("record")
		sum := d.fixed("record checksum", 4)
		if d.err != nil {
			return h, nil, fmt.Errorf("record %d of %d: %w", i+1, h.nrec, d.err)
		}
		if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(sum) {
			return h, nil, fmt.Errorf("record %d of %d: %w: checksum mismatch", i+1, h.nrec, errDecode)
		}
		ops, err := decodeRecord(body)
		if err != nil {
			return h, nil, fmt.Errorf("record %d of %d: %w", i+1, h.nrec, err)
		}
		recs = append(recs, ops)
	}
	if len(d.b) != 0 {
		return h, nil, fmt.Errorf("%w: %d trailing bytes after %d records", errDecode, len(d.b), h.nrec)
	}
	return h, recs, nil
}

func decodeRecord(body []byte) ([]walOp, error) {
	d := &decoder{b: body}
	n := d.count("op count", 2)
	ops := make([]walOp, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		op := walOp{kind: d.byte1("op kind")}
		op.key = d.bytes("key")
		switch op.kind {
		case opPut:
			op.value = d.bytes("value")
		case opDelete:
		case opPutLarge:
			op.large = decodeLargeRef(d)
		default:
			d.fail("unknown op kind %d", op.kind)
		}
		ops = append(ops, op)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes in record", len(d.b))
	}
	return ops, d.err
}

func decodeLargeRef(d *decoder) largeRef {
	name := d.bytes("large value name")
	size := d.uvarint("large value size")
	if d.err == nil && size > 1<<40 {
		d.fail("large value size %d out of range", size)
	}
	return largeRef{name: string(name), size: int64(size)}
}

// chunkWriter builds one chunk object.
type chunkWriter struct {
	body  []byte
	count int
	first []byte
}

func (w *chunkWriter) add(e *entry) {
	if w.count == 0 {
		w.first = e.key
	}
	if e.large != nil {
		w.body = append(w.body, opPutLarge)
		w.body = appendBytes(w.body, e.key)
		w.body = appendString(w.body, e.large.name)
		w.body = binary.AppendUvarint(w.body, uint64(e.large.size))
	} else {
		w.body = append(w.body, opPut)
		w.body = appendBytes(w.body, e.key)
		w.body = appendBytes(w.body, e.val)
	}
	w.count++
}

func (w *chunkWriter) finish() []byte {
	b := make([]byte, 0, len(w.body)+16)
	b = append(b, magicChunk...)
	b = append(b, formatVersion)
	b = binary.AppendUvarint(b, uint64(w.count))
	b = append(b, w.body...)
	return appendCRC(b, 0)
}

// decodeChunk decodes a chunk into entries sorted by key. Keys and values
// alias b.
func decodeChunk(b []byte) ([]entry, error) {
	body, err := checkCRC(b)
	if err != nil {
		return nil, err
	}
	d := &decoder{b: body}
	d.magic(magicChunk)
	n := d.count("entry count", 3)
	out := make([]entry, 0, n)
	var prev []byte
	for i := 0; i < n && d.err == nil; i++ {
		kind := d.byte1("entry kind")
		e := entry{key: d.bytes("key")}
		switch kind {
		case opPut:
			e.val = d.bytes("value")
		case opPutLarge:
			ref := decodeLargeRef(d)
			e.large = &ref
		default:
			d.fail("unknown entry kind %d", kind)
		}
		if d.err == nil && i > 0 && string(prev) >= string(e.key) {
			d.fail("keys out of order at entry %d", i+1)
		}
		prev = e.key
		out = append(out, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

// manifest is the root of a store: the writer epoch, the checkpoint and the
// first WAL sequence not covered by it.
type manifest struct {
	writer       [16]byte // random per write: makes every manifest unique
	epoch        uint64
	firstLiveWAL uint64
	checkpointID uint64
	chunks       []chunkInfo
	packedWAL    bool // a writer packed the WAL folder; never cleared
}

// chunkInfo describes one chunk of a checkpoint. Chunks are disjoint and in
// key order; chunk i holds the keys in [chunks[i].first, chunks[i+1].first).
type chunkInfo struct {
	name  string
	first []byte
	count int
	size  int64
}

func (m *manifest) encode() []byte {
	b := append([]byte(nil), magicManifest...)
	if m.packedWAL {
		b = append(b, manifestPackedVersion)
	} else {
		b = append(b, formatVersion)
	}
	b = append(b, m.writer[:]...)
	b = binary.AppendUvarint(b, m.epoch)
	b = binary.AppendUvarint(b, m.firstLiveWAL)
	b = binary.AppendUvarint(b, m.checkpointID)
	b = binary.AppendUvarint(b, uint64(len(m.chunks)))
	for _, c := range m.chunks {
		b = appendString(b, c.name)
		b = appendBytes(b, c.first)
		b = binary.AppendUvarint(b, uint64(c.count))
		b = binary.AppendUvarint(b, uint64(c.size))
	}
	return appendCRC(b, 0)
}

func decodeManifest(b []byte) (*manifest, error) {
	body, err := checkCRC(b)
	if err != nil {
		return nil, err
	}
	m := &manifest{}
	d := &decoder{b: body}
	if got := d.fixed("magic", len(magicManifest)); d.err == nil && string(got) != string(magicManifest) {
		d.fail("bad magic %q, want %q", got, magicManifest)
	}
	switch v := d.byte1("version"); {
	case d.err != nil, v == formatVersion:
	case v == manifestPackedVersion:
		m.packedWAL = true
	default:
		d.fail("unknown format version %d (this build reads %d and %d)", v, formatVersion, manifestPackedVersion)
	}
	copy(m.writer[:], d.fixed("writer id", 16))
	m.epoch = d.uvarint("epoch")
	m.firstLiveWAL = d.uvarint("first live WAL")
	m.checkpointID = d.uvarint("checkpoint id")
	n := d.count("chunk count", 4)
	for i := 0; i < n && d.err == nil; i++ {
		c := chunkInfo{name: string(d.bytes("chunk name"))}
		c.first = append([]byte(nil), d.bytes("chunk first key")...)
		cnt := d.uvarint("chunk count")
		size := d.uvarint("chunk size")
		if d.err == nil && (cnt > 1<<40 || size > 1<<40) {
			d.fail("chunk %d count/size out of range", i)
		}
		c.count, c.size = int(cnt), int64(size)
		m.chunks = append(m.chunks, c)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err == nil && m.firstLiveWAL == 0 {
		d.fail("first live WAL sequence is 0")
	}
	if d.err != nil {
		return nil, d.err
	}
	return m, nil
}
