package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// ProblemKind says what is wrong with an object.
type ProblemKind string

// The kinds of Problem.
const (
	// ProblemMissing: an object the store needs is not there.
	ProblemMissing ProblemKind = "missing"
	// ProblemDamaged: the object fails its checksum or does not decode
	// (truncated, overwritten, not an object of this kind).
	ProblemDamaged ProblemKind = "damaged"
	// ProblemMisplaced: a WAL object whose header names another sequence
	// than its key (renamed, copied or swapped with another slot).
	ProblemMisplaced ProblemKind = "misplaced"
	// ProblemEpoch: a WAL object out of epoch order, or of an epoch newer
	// than the manifest's.
	ProblemEpoch ProblemKind = "epoch"
	// ProblemMismatch: an object that decodes but disagrees with what
	// refers to it (a chunk's count, first key, size or key range; a large
	// value's size).
	ProblemMismatch ProblemKind = "mismatch"
)

// Problem is one thing wrong with one object.
type Problem struct {
	// Object is the object's key in the store.
	Object string      `json:"object"`
	Kind   ProblemKind `json:"kind"`
	// Detail says what is wrong, in a sentence.
	Detail string `json:"detail"`
	// WAL is the WAL sequence of the object, 0 when it is not a WAL object.
	WAL uint64 `json:"wal,omitempty"`
}

// String is "object: detail".
func (p Problem) String() string { return p.Object + ": " + p.Detail }

// Report is what Check found.
type Report struct {
	// Prefix is Options.Prefix of the store checked.
	Prefix string `json:"prefix"`
	// Exists reports that the store has a manifest. A store without one
	// and without any other object of it is simply not there (no problem).
	Exists       bool   `json:"exists"`
	Epoch        uint64 `json:"epoch"`
	CheckpointID uint64 `json:"checkpoint_id"`
	Chunks       int    `json:"chunks"`
	// FirstLiveWAL is the first WAL sequence after the checkpoint.
	FirstLiveWAL uint64 `json:"first_live_wal"`
	// LastGoodWAL is the last sequence of the readable log that starts at
	// FirstLiveWAL; FirstLiveWAL-1 when no WAL object is readable.
	LastGoodWAL uint64 `json:"last_good_wal"`
	// BreakAt is the first WAL sequence where the log breaks (an object
	// missing, damaged, misplaced or out of epoch order), 0 when it does
	// not. Open and OpenReader refuse such a store; TruncateAt can cut
	// the log there.
	BreakAt uint64 `json:"break_at,omitempty"`
	// WALObjects and WALBytes count the WAL objects listed from
	// FirstLiveWAL on; Fences and Commits count those in the readable log.
	WALObjects int   `json:"wal_objects"`
	WALBytes   int64 `json:"wal_bytes"`
	Fences     int   `json:"fences"`
	Commits    int   `json:"commits"`
	// Keys counts the live keys of the checkpoint plus the readable log;
	// LargeValues the large values they reference.
	Keys        int       `json:"keys"`
	LargeValues int       `json:"large_values"`
	Problems    []Problem `json:"problems"`
}

// Healthy reports that Check found no problem.
func (r Report) Healthy() bool { return len(r.Problems) == 0 }

// Check verifies the store read-only and reports every problem it finds,
// object by object: the manifest; every checkpoint chunk (checksum,
// decoding, entry count, size and first key against the manifest, keys in
// the chunk's range so chunks never overlap); the WAL from the manifest's
// first live sequence on (no sequence missing before the last object,
// every object's checksum, header sequence equal to its name, epochs never
// decreasing and never above the manifest's); and every large value the
// resulting state references (present, of the recorded size).
//
// It makes only GET, LIST and HEAD requests, so it works on a read-only
// store and next to a live writer. A checkpoint the writer makes while
// Check reads can delete objects under it; Check then sees the manifest
// changed and checks again (at most 3 times). The error is for a check
// that could not be done (an unreachable store, ctx); what is wrong with
// the store is in the Report. Cost: see doc.go, "Checking and repair".
func Check(ctx context.Context, store objstore.Store, opts Options) (Report, error) {
	opts = opts.withDefaults()
	o, err := newObjects(store, opts)
	if err != nil {
		return Report{}, err
	}
	for attempt := 1; ; attempt++ {
		rep, etag, err := check(ctx, o)
		if err != nil {
			return Report{}, err
		}
		rep.Prefix = opts.Prefix
		if attempt == 3 || rep.Healthy() {
			return rep, nil
		}
		// Objects go missing legitimately only after a manifest switch:
		// check again only if there was one.
		now, err := o.manifestETag(ctx)
		if err != nil {
			return Report{}, err
		}
		if now == etag {
			return rep, nil
		}
		o.log.Info("kv: the store changed during the check; checking again", "prefix", opts.Prefix, "attempt", attempt)
	}
}

// manifestETag returns the manifest's ETag, "" when there is none.
func (o *objects) manifestETag(ctx context.Context) (string, error) {
	var info objstore.ObjectInfo
	err := o.retry(ctx, "head "+o.manifestKey(), func(ctx context.Context) error {
		var err error
		info, err = o.store.Head(ctx, o.manifestKey())
		return err
	})
	if errors.Is(err, objstore.ErrNotExist) {
		return "", nil
	}
	return info.ETag, err
}

// check runs one pass of Check and returns the manifest's ETag with the
// report.
func check(ctx context.Context, o *objects) (rep Report, etag string, err error) {
	add := func(p Problem) { rep.Problems = append(rep.Problems, p) }
	data, info, err := o.get(ctx, o.manifestKey())
	if errors.Is(err, objstore.ErrNotExist) {
		for _, dir := range []string{"wal/", "chunk/", "large/"} {
			key, found, err := o.firstObject(ctx, dir)
			if err != nil {
				return rep, "", err
			}
			if found {
				add(Problem{Object: o.manifestKey(), Kind: ProblemMissing,
					Detail: fmt.Sprintf("missing, but %q and maybe more objects of the store exist; nothing can be read without it", key)})
				break
			}
		}
		return rep, "", nil
	}
	if err != nil {
		return rep, "", err
	}
	rep.Exists = true
	m, err := decodeManifest(data)
	if err != nil {
		add(Problem{Object: o.manifestKey(), Kind: ProblemDamaged, Detail: err.Error() + "; nothing can be read without it"})
		return rep, info.ETag, nil
	}
	rep.Epoch, rep.CheckpointID, rep.Chunks, rep.FirstLiveWAL = m.epoch, m.checkpointID, len(m.chunks), m.firstLiveWAL
	for i := 1; i < len(m.chunks); i++ {
		if bytes.Compare(m.chunks[i-1].first, m.chunks[i].first) >= 0 {
			add(Problem{Object: o.manifestKey(), Kind: ProblemDamaged,
				Detail: fmt.Sprintf("chunks %q and %q are out of key order", m.chunks[i-1].name, m.chunks[i].name)})
		}
	}

	// Large values are listed before the WAL is read: the writer deletes
	// a large value only after the commit that dropped it is durable, so
	// that commit is then in the WAL listed later, and a live writer
	// cannot make a reference Check follows look dangling.
	larges := map[string]int64{}
	infos, err := o.list(ctx, o.pfx+"large/", "")
	if err != nil {
		return rep, "", err
	}
	for _, in := range infos {
		larges[in.Key] = in.Size
	}

	tree := checkChunks(ctx, o, m, add)
	if err := checkWAL(ctx, o, m, tree, &rep, add); err != nil {
		return rep, "", err
	}

	rep.Keys = tree.Len()
	tree.Scan(func(e *entry) bool {
		if e.large == nil {
			return true
		}
		rep.LargeValues++
		key := o.largeKey(e.large.name)
		size, ok := larges[key]
		switch {
		case !ok:
			add(Problem{Object: key, Kind: ProblemMissing, Detail: fmt.Sprintf("large value of key %q is missing; reads of the key fail", e.key)})
		case size != e.large.size:
			add(Problem{Object: key, Kind: ProblemMismatch, Detail: fmt.Sprintf("large value of key %q is %d bytes, %d expected", e.key, size, e.large.size)})
		}
		return true
	})
	return rep, info.ETag, nil
}

// checkChunks verifies every chunk of m and returns a tree of the entries
// of the good ones.
func checkChunks(ctx context.Context, o *objects, m *manifest, add func(Problem)) *btree.BTreeG[*entry] {
	decoded := make([][]entry, len(m.chunks))
	problems := make([][]Problem, len(m.chunks))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, c := range m.chunks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key := o.chunkKey(c.name)
			bad := func(kind ProblemKind, format string, args ...any) {
				problems[i] = append(problems[i], Problem{Object: key, Kind: kind, Detail: fmt.Sprintf(format, args...)})
			}
			data, _, err := o.get(ctx, key)
			if errors.Is(err, objstore.ErrNotExist) {
				bad(ProblemMissing, "checkpoint chunk %d of %d listed by the manifest is missing", i+1, len(m.chunks))
				return
			}
			if err != nil {
				bad(ProblemMissing, "cannot be read: %v", err)
				return
			}
			es, err := decodeChunk(data)
			if err != nil {
				bad(ProblemDamaged, "%v", err)
				return
			}
			if len(es) != c.count {
				bad(ProblemMismatch, "holds %d entries, the manifest says %d", len(es), c.count)
			}
			if int64(len(data)) != c.size {
				bad(ProblemMismatch, "is %d bytes, the manifest says %d", len(data), c.size)
			}
			if len(es) > 0 && !bytes.Equal(es[0].key, c.first) {
				bad(ProblemMismatch, "first key %q, the manifest says %q", es[0].key, c.first)
			}
			if i+1 < len(m.chunks) && len(es) > 0 && bytes.Compare(es[len(es)-1].key, m.chunks[i+1].first) >= 0 {
				bad(ProblemMismatch, "key %q overlaps the next chunk, which starts at %q", es[len(es)-1].key, m.chunks[i+1].first)
			}
			decoded[i] = es
		}()
	}
	wg.Wait()
	tree := newTree()
	for i := range m.chunks {
		for _, p := range problems[i] {
			add(p)
		}
		for j := range decoded[i] {
			tree.Set(&decoded[i][j])
		}
	}
	return tree
}

// checkWAL verifies the WAL from m's first live sequence on, applying the
// readable log to tree, and fills the WAL fields of rep.
func checkWAL(ctx context.Context, o *objects, m *manifest, tree *btree.BTreeG[*entry], rep *Report, add func(Problem)) error {
	infos, err := o.list(ctx, o.pfx+"wal/", o.walKey(m.firstLiveWAL-1))
	if err != nil {
		return err
	}
	var seqs []uint64
	for _, in := range infos {
		if seq, ok := o.walSeqOf(in.Key); ok {
			seqs = append(seqs, seq)
			rep.WALObjects++
			rep.WALBytes += in.Size
		}
	}
	r := &replayer{o: o, tree: tree, base: m.firstLiveWAL, next: m.firstLiveWAL}
	var maxEpoch uint64
	broken := false
	breakAt := func(seq uint64) {
		if !broken {
			broken, rep.BreakAt = true, seq
		}
	}
	// verify checks one fetched object, the one after every object
	// verified so far.
	verify := func(d decodedWAL) error {
		key := o.walKey(d.seq)
		switch {
		case errors.Is(d.err, objstore.ErrNotExist):
			add(Problem{Object: key, Kind: ProblemMissing, WAL: d.seq, Detail: "listed, then missing when read"})
			breakAt(d.seq)
			return nil
		case d.err != nil && !errors.Is(d.err, errDecode):
			return fmt.Errorf("kv: check: read %s: %w", key, d.err)
		case d.misplaced:
			add(Problem{Object: key, Kind: ProblemMisplaced, WAL: d.seq, Detail: d.err.Error()})
			breakAt(d.seq)
			return nil
		case d.err != nil:
			add(Problem{Object: key, Kind: ProblemDamaged, WAL: d.seq, Detail: d.err.Error()})
			breakAt(d.seq)
			return nil
		}
		ok := true
		if d.h.epoch < maxEpoch {
			add(Problem{Object: key, Kind: ProblemEpoch, WAL: d.seq,
				Detail: fmt.Sprintf("written by epoch %d after an object of epoch %d: reordered, restored from an older copy, or a fenced writer wrote past a fence", d.h.epoch, maxEpoch)})
			ok = false
		}
		if d.h.epoch > m.epoch {
			add(Problem{Object: key, Kind: ProblemEpoch, WAL: d.seq,
				Detail: fmt.Sprintf("written by epoch %d, newer than the manifest's epoch %d: the manifest is older than the log (restored from an older copy?)", d.h.epoch, m.epoch)})
			ok = false
		}
		maxEpoch = max(maxEpoch, d.h.epoch)
		if !ok {
			breakAt(d.seq)
		}
		if broken {
			return nil
		}
		r.applyRecords(d)
		if d.h.fence {
			rep.Fences++
		}
		rep.Commits += d.h.nrec
		return nil
	}
	expected := m.firstLiveWAL
	for i := 0; i < len(seqs); i += walWindow {
		for _, d := range o.fetchWAL(ctx, seqs[i:min(i+walWindow, len(seqs))]) {
			for expected < d.seq {
				// A listing can miss an object a writer created while it
				// ran, never one that was there throughout: read a
				// sequence before calling it missing.
				data, info, err := o.get(ctx, o.walKey(expected))
				if err == nil {
					rep.WALObjects++
					rep.WALBytes += info.Size
					if err := verify(decodeWALAt(expected, data)); err != nil {
						return err
					}
					expected++
					continue
				}
				if !errors.Is(err, objstore.ErrNotExist) {
					return err
				}
				detail := fmt.Sprintf("missing while %q exists: a gap in the WAL", o.walKey(d.seq))
				switch n := d.seq - expected; {
				case n == 2:
					detail = fmt.Sprintf("missing, as is the next object, while %q exists: a gap in the WAL", o.walKey(d.seq))
				case n > 2:
					detail = fmt.Sprintf("missing, as are the next %d objects up to %q, while %q exists: a gap in the WAL", n-1, o.walKey(d.seq-1), o.walKey(d.seq))
				}
				if !broken {
					detail += fmt.Sprintf("; the log is good up to %s", r.lastGood())
				}
				add(Problem{Object: o.walKey(expected), Kind: ProblemMissing, WAL: expected, Detail: detail})
				breakAt(expected)
				expected = d.seq
			}
			if err := verify(d); err != nil {
				return err
			}
			expected = d.seq + 1
		}
	}
	rep.LastGoodWAL = r.next - 1
	return nil
}
