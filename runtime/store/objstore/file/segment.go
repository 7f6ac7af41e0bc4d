package file

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Segment file format. A packed folder's objects live in segment files
// FOLDER/\log/<10-digit number>, each a fixed size, zero-filled when made
// and then written in place, never grown.
//
//	header (64 bytes):
//	  0  "TQWS"          magic
//	  4  version         1
//	  5  [3]byte         zero
//	  8  salt [16]       random, per segment
//	  24 prevEnd uint64  where the valid records of the previous segment end
//	  32 [24]byte        zero
//	  56 crc32c [4]      of bytes 0..56, then 4 zero bytes
//	records from offset 64, each at an 8-aligned offset:
//	  0  "TQWR"          magic
//	  4  kind            1 put, 2 delete
//	  5  byte            zero
//	  6  keyLen uint16   1..objstore.MaxKeyLen
//	  8  dataLen uint32  0 for a delete
//	  12 [4]byte         zero
//	  16 modTime int64   Unix nanoseconds
//	  24 etag [16]       first 128 bits of SHA-256(data); zero for a delete
//	  40 check [16]      first 128 bits of SHA-256(salt, offset, bytes 0..40, key)
//	  56 key, data, zero padding to the next multiple of 8
//
// Integers are little-endian. A record is valid only when every field
// checks: magic, kind, zero bytes, a valid key, data inside the segment,
// check and etag. The check binds the record to its segment (the salt) and
// its place in it (the offset): bytes copied from elsewhere, and bytes
// that merely look like a record inside an object's data (which users
// control), never pass, since their writer cannot know the salt. The
// etag binds the data, so a record whose write was torn by a crash fails.
const (
	segHeaderLen = 64
	recHeaderLen = 56
	segVersion   = 1

	kindPut    = 1
	kindDelete = 2

	// maxRecordData bounds an object in a packed folder.
	maxRecordData = 1<<32 - 1
)

var (
	segMagic = [4]byte{'T', 'Q', 'W', 'S'}
	recMagic = [4]byte{'T', 'Q', 'W', 'R'}
	castag   = crc32.MakeTable(crc32.Castagnoli)
)

// errBadSegment reports a segment header that fails its checks.
var errBadSegment = errors.New("not a valid segment header")

// segHeader is the decoded header of a segment.
type segHeader struct {
	salt    [16]byte
	prevEnd int64
}

func encodeSegHeader(h segHeader) []byte {
	b := make([]byte, segHeaderLen)
	copy(b, segMagic[:])
	b[4] = segVersion
	copy(b[8:24], h.salt[:])
	binary.LittleEndian.PutUint64(b[24:], uint64(h.prevEnd))
	binary.LittleEndian.PutUint32(b[56:], crc32.Checksum(b[:56], castag))
	return b
}

func decodeSegHeader(b []byte) (segHeader, error) {
	var h segHeader
	if len(b) < segHeaderLen {
		return h, fmt.Errorf("%w: %d bytes", errBadSegment, len(b))
	}
	if [4]byte(b[:4]) != segMagic || b[4] != segVersion {
		return h, fmt.Errorf("%w: bad magic or version", errBadSegment)
	}
	if crc32.Checksum(b[:56], castag) != binary.LittleEndian.Uint32(b[56:]) {
		return h, fmt.Errorf("%w: checksum mismatch", errBadSegment)
	}
	copy(h.salt[:], b[8:24])
	h.prevEnd = int64(binary.LittleEndian.Uint64(b[24:]))
	if h.prevEnd != 0 && h.prevEnd < segHeaderLen || h.prevEnd%8 != 0 {
		return h, fmt.Errorf("%w: previous segment's end %d", errBadSegment, h.prevEnd)
	}
	return h, nil
}

// rec is one decoded record.
type rec struct {
	kind    byte
	key     string
	modTime time.Time
	etag    [16]byte
	dataOff int64 // offset of the data in the segment
	dataLen int64
	size    int64 // bytes the record takes, padding included
}

func recordSize(keyLen, dataLen int) int64 {
	return align8(int64(recHeaderLen + keyLen + dataLen))
}

func align8(n int64) int64 { return (n + 7) &^ 7 }

func recordCheck(salt [16]byte, off int64, hdr []byte, key string) [16]byte {
	h := sha256.New()
	h.Write(salt[:])
	var o [8]byte
	binary.LittleEndian.PutUint64(o[:], uint64(off))
	h.Write(o[:])
	h.Write(hdr[:40])
	h.Write([]byte(key))
	var sum [32]byte
	return [16]byte(h.Sum(sum[:0]))
}

// appendRecord appends the record of kind for key at segment offset off to
// b. data is nil for a delete.
func appendRecord(b []byte, salt [16]byte, off int64, kind byte, key string, data []byte, etag [16]byte, mod time.Time) []byte {
	start := len(b)
	b = append(b, make([]byte, recHeaderLen)...)
	h := b[start:]
	copy(h, recMagic[:])
	h[4] = kind
	binary.LittleEndian.PutUint16(h[6:], uint16(len(key)))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint64(h[16:], uint64(mod.UnixNano()))
	copy(h[24:40], etag[:])
	check := recordCheck(salt, off, h, key)
	copy(h[40:56], check[:])
	b = append(b, key...)
	b = append(b, data...)
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// parseRecordHeader checks the fixed header and key of the record at
// segment offset off, whose bytes start at b, within a segment whose valid
// bytes end at limit. It returns the record without verifying its data.
// ok is false for anything that is not the start of a record.
func parseRecordHeader(b []byte, salt [16]byte, off, limit int64) (r rec, ok bool) {
	if len(b) < recHeaderLen || [4]byte(b[:4]) != recMagic || b[5] != 0 || [4]byte(b[12:16]) != [4]byte{} {
		return r, false
	}
	r.kind = b[4]
	keyLen := int(binary.LittleEndian.Uint16(b[6:]))
	r.dataLen = int64(binary.LittleEndian.Uint32(b[8:]))
	if (r.kind != kindPut && r.kind != kindDelete) || keyLen == 0 || keyLen > objstore.MaxKeyLen ||
		len(b) < recHeaderLen+keyLen {
		return r, false
	}
	copy(r.etag[:], b[24:40])
	if r.kind == kindDelete && (r.dataLen != 0 || r.etag != [16]byte{}) {
		return r, false
	}
	r.size = recordSize(keyLen, int(r.dataLen))
	if off+r.size > limit || off+r.size < off {
		return r, false
	}
	r.key = string(b[recHeaderLen : recHeaderLen+keyLen])
	if [16]byte(b[40:56]) != recordCheck(salt, off, b, r.key) || objstore.ValidateKey(r.key) != nil {
		return r, false
	}
	r.modTime = time.Unix(0, int64(binary.LittleEndian.Uint64(b[16:])))
	r.dataOff = off + int64(recHeaderLen+keyLen)
	return r, true
}

// dataMatches reports whether data is the record's data.
func (r *rec) dataMatches(data []byte) bool {
	if int64(len(data)) != r.dataLen {
		return false
	}
	if r.kind == kindDelete {
		return true
	}
	sum := sha256.Sum256(data)
	return [16]byte(sum[:16]) == r.etag
}

// etagString is the record's ETag as objects show it (see etagOf).
func (r *rec) etagString() string { return `"` + hex.EncodeToString(r.etag[:]) + `"` }

// stop says why a scan ended.
type stop int

const (
	stopLimit stop = iota // at the end of the bytes it may read
	stopZero              // at a record header's worth of zero bytes: nothing written there
	stopJunk              // at bytes that are not a valid record (a write in progress or torn, or damage)
)

// scanner reads the records of one segment through a window of its bytes.
type scanner struct {
	r     io.ReaderAt
	salt  [16]byte
	limit int64 // the scan reads no byte at or past limit
	buf   []byte
	wOff  int64 // segment offset of buf[0]
	err   error // the first read error other than reaching limit
}

const scanWindow = 64 << 10

// window returns the bytes [off, off+n) of the segment, or nil when they
// reach past limit or cannot be read (s.err).
func (s *scanner) window(off, n int64) []byte {
	if off < 0 || n < 0 || off+n > s.limit {
		return nil
	}
	if off >= s.wOff && off+n <= s.wOff+int64(len(s.buf)) {
		return s.buf[off-s.wOff : off-s.wOff+n]
	}
	size := min(max(n, scanWindow), s.limit-off)
	if int64(cap(s.buf)) < size {
		s.buf = make([]byte, size)
	}
	s.buf = s.buf[:size]
	got, err := s.r.ReadAt(s.buf, off)
	s.buf, s.wOff = s.buf[:got], off
	if int64(got) < n {
		if err != nil && !errors.Is(err, io.EOF) && s.err == nil {
			s.err = err
		}
		return nil
	}
	return s.buf[:n]
}

// at decodes the record at off. zero reports a clean end there.
func (s *scanner) at(off int64) (r rec, ok, zero bool) {
	hdr := s.window(off, recHeaderLen)
	if hdr == nil {
		return r, false, false
	}
	if zeroHeader(hdr) {
		return r, false, true
	}
	keyLen := int64(binary.LittleEndian.Uint16(hdr[6:]))
	b := s.window(off, recHeaderLen+keyLen)
	if b == nil {
		return r, false, false
	}
	r, ok = parseRecordHeader(b, s.salt, off, s.limit)
	if !ok {
		return r, false, false
	}
	data := s.window(r.dataOff, r.dataLen)
	if data == nil || !r.dataMatches(data) {
		return r, false, false
	}
	return r, true, false
}

// scan calls fn with each valid record from offset from on, in order. It
// stops at the first offset holding no valid record unless resync is set;
// then it goes on looking for valid records at every later 8-aligned
// offset up to limit. end is where the last valid record ends (from when
// none), damaged counts the bytes skipped between valid records.
func (s *scanner) scan(from int64, resync bool, fn func(off int64, r rec)) (end, damaged int64, why stop) {
	end = from
	gap := int64(-1)
	off := from
	for off+recHeaderLen <= s.limit {
		r, ok, zero := s.at(off)
		if s.err != nil {
			return end, damaged, stopJunk
		}
		if ok {
			if gap >= 0 {
				damaged += off - gap
				gap = -1
			}
			fn(off, r)
			off += r.size
			end = off
			continue
		}
		if !resync {
			if zero {
				return end, damaged, stopZero
			}
			return end, damaged, stopJunk
		}
		if gap < 0 {
			gap = off
		}
		off += 8
	}
	return end, damaged, stopLimit
}

// zeroHeader reports whether b begins with a record header's worth of
// zero bytes: the clean end of the records, where nothing was written.
func zeroHeader(b []byte) bool {
	for _, c := range b[:min(len(b), recHeaderLen)] {
		if c != 0 {
			return false
		}
	}
	return true
}
