package archive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
)

// ErrCorrupt is wrapped by every error a decoder returns.
var ErrCorrupt = errors.New("archive: corrupt sealed object")

// Version is the format version this package writes and reads.
const Version = 1

var (
	indexMagic = []byte("tqwidx1\n")
	dataMagic  = []byte("tqwdat1\n")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// The terminal states of a run, as the runtime numbers them.
const (
	Succeeded uint8 = iota + 1
	Failed
	Cancelled
)

// Record is one caller-KV entry of a run's records.
type Record struct {
	Key   string `msgpack:"k"`
	Value []byte `msgpack:"v"`
}

// Run is one finished run to seal.
type Run struct {
	Entry
	Records []Record
}

// Entry is a run's line in a segment's index: what Status and a listing
// report, and where its records are.
type Entry struct {
	ID            string            `msgpack:"id"`
	Nonce         string            `msgpack:"n"`
	Status        uint8             `msgpack:"st"`
	Step          int               `msgpack:"s"`
	Result        []byte            `msgpack:"r,omitempty"`
	ResultOmitted bool              `msgpack:"ro,omitempty"`
	Error         string            `msgpack:"e,omitempty"`
	SubmittedMs   int64             `msgpack:"t"`
	FinishedMs    int64             `msgpack:"f"`
	Headers       map[string]string `msgpack:"hd,omitempty"`
	Labels        map[string]string `msgpack:"lb,omitempty"`
	// Totals is the runtime's totals record, opaque here.
	Totals []byte `msgpack:"tot,omitempty"`
	// DataOff, DataLen and DataCRC locate the run's records in the data
	// object.
	DataOff int64  `msgpack:"o"`
	DataLen int64  `msgpack:"l"`
	DataCRC uint32 `msgpack:"c"`
}

// Index is a decoded segment index: entries sorted by run id.
type Index struct {
	Version  int     `msgpack:"v"`
	DataSize int64   `msgpack:"ds"`
	Entries  []Entry `msgpack:"e"`
}

// Find returns the entry of run id, or nil.
func (x *Index) Find(id string) *Entry {
	i := sort.Search(len(x.Entries), func(i int) bool { return x.Entries[i].ID >= id })
	if i < len(x.Entries) && x.Entries[i].ID == id {
		return &x.Entries[i]
	}
	return nil
}

// After returns the position of the first entry whose id sorts after id.
func (x *Index) After(id string) int {
	return sort.Search(len(x.Entries), func(i int) bool { return x.Entries[i].ID > id })
}

// Before returns the position of the last entry whose id sorts before
// id (every entry when id is ""), or -1 when none does.
func (x *Index) Before(id string) int {
	if id == "" {
		return len(x.Entries) - 1
	}
	return sort.Search(len(x.Entries), func(i int) bool { return x.Entries[i].ID >= id }) - 1
}

// Meta is the catalog entry of one segment.
type Meta struct {
	Version int    `msgpack:"v"`
	Seq     uint64 `msgpack:"q"`
	// Key names the segment's objects: Key+".idx" and Key+".dat".
	Key       string `msgpack:"k"`
	IndexSize int64  `msgpack:"is"`
	DataSize  int64  `msgpack:"ds"`
	Runs      int    `msgpack:"n"`
	// States counts the runs by terminal state (Succeeded, Failed,
	// Cancelled at 0, 1, 2).
	States        []int  `msgpack:"sc"`
	MinID         string `msgpack:"a"`
	MaxID         string `msgpack:"z"`
	MinFinishedMs int64  `msgpack:"f0"`
	MaxFinishedMs int64  `msgpack:"f1"`
	// Hashes are the sorted xxhash64 of the run ids, 8 bytes each, big
	// endian. A slim entry (Slim) has none.
	Hashes []byte `msgpack:"h,omitempty"`
	// LabelBloom is a Bloom filter of the runs' labels with LabelProbes
	// probes (none: no run has a label).
	LabelBloom  []byte `msgpack:"lb,omitempty"`
	LabelProbes uint8  `msgpack:"lk,omitempty"`
	// The retentions the segment was sealed under, in milliseconds: a
	// run's status is visible ResultRetentionMs after it finished, its
	// records RecordRetentionMs after (0: forever), its memo entries are
	// deleted MemoRetentionMs after (0: never).
	ResultRetentionMs int64 `msgpack:"rr"`
	RecordRetentionMs int64 `msgpack:"rc,omitempty"`
	MemoRetentionMs   int64 `msgpack:"rm,omitempty"`
	// Slim marks an entry whose runs are no longer visible, kept only
	// until the segment's memo entries expire: no hashes, no labels.
	Slim bool `msgpack:"sl,omitempty"`
}

// IndexKey and DataKey are the keys of the segment's objects.
func (m *Meta) IndexKey() string { return m.Key + ".idx" }

// DataKey is the key of the segment's data object.
func (m *Meta) DataKey() string { return m.Key + ".dat" }

// StateCount returns how many runs ended in state (Succeeded, Failed,
// Cancelled).
func (m *Meta) StateCount(state uint8) int {
	if state < Succeeded || int(state) > len(m.States) {
		return 0
	}
	return m.States[state-1]
}

// MayHold reports whether the segment may hold run id: false means it
// does not; true that it does unless two ids share a 64-bit hash.
func (m *Meta) MayHold(id string) bool {
	if m.Slim || id < m.MinID || id > m.MaxID {
		return false
	}
	h := xxhash.Sum64String(id)
	n := len(m.Hashes) / 8
	i := sort.Search(n, func(i int) bool { return binary.BigEndian.Uint64(m.Hashes[8*i:]) >= h })
	return i < n && binary.BigEndian.Uint64(m.Hashes[8*i:]) == h
}

// MayHaveLabel reports whether a run of the segment may carry label
// key=value: false means none does.
func (m *Meta) MayHaveLabel(key, value string) bool {
	if m.Slim || len(m.LabelBloom) == 0 {
		return false
	}
	return bloomHas(m.LabelBloom, m.LabelProbes, labelString(key, value))
}

// Build encodes runs (unique ids, any order) as a segment: the bytes of
// its index and data objects and its catalog entry, whose Seq, Key and
// retentions the caller sets. It keeps no reference to runs.
func Build(runs []Run) (index, data []byte, meta *Meta, err error) {
	if len(runs) == 0 {
		return nil, nil, nil, errors.New("archive: Build of no runs")
	}
	order := make([]int, len(runs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return runs[order[a]].ID < runs[order[b]].ID })
	meta = &Meta{Version: Version, Runs: len(runs), States: make([]int, 3),
		MinID: runs[order[0]].ID, MaxID: runs[order[len(order)-1]].ID,
		MinFinishedMs: math.MaxInt64, MaxFinishedMs: math.MinInt64}
	x := Index{Version: Version, Entries: make([]Entry, 0, len(runs))}
	data = append([]byte(nil), dataMagic...)
	hashes := make([]uint64, 0, len(runs))
	var labels []string
	for i, o := range order {
		r := &runs[o]
		if r.ID == "" || (i > 0 && r.ID == runs[order[i-1]].ID) {
			return nil, nil, nil, fmt.Errorf("archive: Build: run id %q empty or twice", r.ID)
		}
		if r.Status < Succeeded || r.Status > Cancelled {
			return nil, nil, nil, fmt.Errorf("archive: Build: run %s has state %d", r.ID, r.Status)
		}
		recs := slices.Clone(r.Records)
		slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
		for j := range recs {
			if recs[j].Key == "" || (j > 0 && recs[j].Key == recs[j-1].Key) {
				return nil, nil, nil, fmt.Errorf("archive: Build: run %s: record key %q empty or twice", r.ID, recs[j].Key)
			}
		}
		blob, err := msgpack.Marshal(recs)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("archive: encode records of run %s: %w", r.ID, err)
		}
		e := r.Entry
		e.DataOff, e.DataLen, e.DataCRC = int64(len(data)), int64(len(blob)), crc32.Checksum(blob, castagnoli)
		data = append(data, blob...)
		x.Entries = append(x.Entries, e)
		meta.States[r.Status-1]++
		meta.MinFinishedMs = min(meta.MinFinishedMs, r.FinishedMs)
		meta.MaxFinishedMs = max(meta.MaxFinishedMs, r.FinishedMs)
		hashes = append(hashes, xxhash.Sum64String(r.ID))
		for k, v := range r.Labels {
			labels = append(labels, labelString(k, v))
		}
	}
	x.DataSize = int64(len(data))
	body, err := msgpack.Marshal(&x)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("archive: encode index: %w", err)
	}
	index = make([]byte, 0, len(indexMagic)+len(body)+4)
	index = append(append(index, indexMagic...), body...)
	index = binary.BigEndian.AppendUint32(index, crc32.Checksum(body, castagnoli))
	slices.Sort(hashes)
	meta.Hashes = make([]byte, 0, 8*len(hashes))
	for _, h := range hashes {
		meta.Hashes = binary.BigEndian.AppendUint64(meta.Hashes, h)
	}
	if len(labels) > 0 {
		slices.Sort(labels)
		labels = slices.Compact(labels)
		meta.LabelBloom, meta.LabelProbes = newBloom(labels)
	}
	meta.IndexSize, meta.DataSize = int64(len(index)), int64(len(data))
	return index, data, meta, nil
}

func labelString(key, value string) string { return key + "\x00" + value }

func corrupt(what string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, what, fmt.Sprintf(format, args...))
}

// DecodeIndex decodes an index object.
func DecodeIndex(b []byte) (*Index, error) {
	if len(b) < len(indexMagic)+4 || !bytes.Equal(b[:len(indexMagic)], indexMagic) {
		return nil, corrupt("index", "not a segment index (%d bytes, bad magic)", len(b))
	}
	body := b[len(indexMagic) : len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, corrupt("index", "checksum mismatch")
	}
	var x Index
	if err := msgpackcheck.Unmarshal(body, &x, msgpackcheck.Options{MaxDepth: msgpackcheck.RecordDepth}); err != nil {
		return nil, corrupt("index", "%v", err)
	}
	if x.Version != Version {
		return nil, corrupt("index", "version %d; this build reads %d", x.Version, Version)
	}
	if len(x.Entries) == 0 || x.DataSize < int64(len(dataMagic)) {
		return nil, corrupt("index", "%d entries, data size %d", len(x.Entries), x.DataSize)
	}
	for i := range x.Entries {
		e := &x.Entries[i]
		switch {
		case e.ID == "" || (i > 0 && e.ID <= x.Entries[i-1].ID):
			return nil, corrupt("index", "entry %d: run id %q empty or out of order", i, e.ID)
		case e.Status < Succeeded || e.Status > Cancelled:
			return nil, corrupt("index", "run %s: state %d", e.ID, e.Status)
		case e.DataOff < int64(len(dataMagic)) || e.DataLen < 0 || e.DataOff > x.DataSize-e.DataLen:
			return nil, corrupt("index", "run %s: records at %d+%d outside the data object of %d bytes", e.ID, e.DataOff, e.DataLen, x.DataSize)
		}
	}
	return &x, nil
}

// DecodeRecords returns the records of the run of entry e from data, the
// segment's whole data object.
func DecodeRecords(data []byte, e *Entry) ([]Record, error) {
	if len(data) < len(dataMagic) || !bytes.Equal(data[:len(dataMagic)], dataMagic) {
		return nil, corrupt("data", "not a segment data object (%d bytes, bad magic)", len(data))
	}
	if e.DataOff < int64(len(dataMagic)) || e.DataLen < 0 || e.DataOff > int64(len(data))-e.DataLen {
		return nil, corrupt("data", "run %s: records at %d+%d outside the %d bytes", e.ID, e.DataOff, e.DataLen, len(data))
	}
	blob := data[e.DataOff : e.DataOff+e.DataLen]
	if crc32.Checksum(blob, castagnoli) != e.DataCRC {
		return nil, corrupt("data", "run %s: records checksum mismatch", e.ID)
	}
	var recs []Record
	if err := msgpackcheck.Unmarshal(blob, &recs, msgpackcheck.Options{MaxDepth: msgpackcheck.RecordDepth}); err != nil {
		return nil, corrupt("data", "run %s: %v", e.ID, err)
	}
	for i := range recs {
		if recs[i].Key == "" || (i > 0 && recs[i].Key <= recs[i-1].Key) {
			return nil, corrupt("data", "run %s: record %d: key %q empty or out of order", e.ID, i, recs[i].Key)
		}
	}
	return recs, nil
}

// Records returns the records under prefix, a sub-slice of recs (sorted
// by key).
func Records(recs []Record, prefix string) []Record {
	i := sort.Search(len(recs), func(i int) bool { return recs[i].Key >= prefix })
	j := i
	for j < len(recs) && strings.HasPrefix(recs[j].Key, prefix) {
		j++
	}
	return recs[i:j]
}

// EncodeMeta encodes a catalog entry.
func EncodeMeta(m *Meta) ([]byte, error) {
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("archive: encode catalog entry: %w", err)
	}
	return b, nil
}

// DecodeMeta decodes a catalog entry.
func DecodeMeta(b []byte) (*Meta, error) {
	var m Meta
	if err := msgpackcheck.Unmarshal(b, &m, msgpackcheck.Options{MaxDepth: msgpackcheck.RecordDepth}); err != nil {
		return nil, corrupt("catalog entry", "%v", err)
	}
	switch {
	case m.Version != Version:
		return nil, corrupt("catalog entry", "version %d; this build reads %d", m.Version, Version)
	case m.Key == "" || m.Runs < 1 || len(m.States) != 3:
		return nil, corrupt("catalog entry", "key %q, %d runs, %d state counts", m.Key, m.Runs, len(m.States))
	case m.MinID == "" || m.MinID > m.MaxID || m.MinFinishedMs > m.MaxFinishedMs:
		return nil, corrupt("catalog entry", "run ids %q..%q, finished %d..%d", m.MinID, m.MaxID, m.MinFinishedMs, m.MaxFinishedMs)
	case m.ResultRetentionMs <= 0 || m.RecordRetentionMs < 0 || m.MemoRetentionMs < 0:
		return nil, corrupt("catalog entry", "retentions %d/%d/%d ms", m.ResultRetentionMs, m.RecordRetentionMs, m.MemoRetentionMs)
	}
	sum := 0
	for _, n := range m.States {
		if n < 0 {
			return nil, corrupt("catalog entry", "state count %d", n)
		}
		sum += n
	}
	if sum != m.Runs {
		return nil, corrupt("catalog entry", "state counts sum to %d, not %d runs", sum, m.Runs)
	}
	if !m.Slim {
		if len(m.Hashes) != 8*m.Runs {
			return nil, corrupt("catalog entry", "%d hash bytes for %d runs", len(m.Hashes), m.Runs)
		}
		for i := 8; i < len(m.Hashes); i += 8 {
			if binary.BigEndian.Uint64(m.Hashes[i-8:]) > binary.BigEndian.Uint64(m.Hashes[i:]) {
				return nil, corrupt("catalog entry", "run id hashes out of order")
			}
		}
		if err := checkBloom(m.LabelBloom, m.LabelProbes); err != nil {
			return nil, corrupt("catalog entry", "%v", err)
		}
	}
	return &m, nil
}
