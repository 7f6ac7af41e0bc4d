package kv

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// ErrTruncatePoint reports a WAL sequence the log cannot be cut at: below
// the checkpoint's first live sequence, past a place where the log already
// breaks, or past its last object.
var ErrTruncatePoint = errors.New("kv: cannot truncate the log there")

// DiscardedWAL is one WAL slot a truncation discards.
type DiscardedWAL struct {
	Object string `json:"object"`
	Seq    uint64 `json:"seq"`
	// Missing: the slot holds no object (a gap).
	Missing bool `json:"missing,omitempty"`
	// Damaged says why the object does not decode; its commits are unknown.
	Damaged string `json:"damaged,omitempty"`
	// Fence: the object is a writer's fence, which holds no commit.
	Fence   bool   `json:"fence,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	Commits int    `json:"commits"`
	Bytes   int64  `json:"bytes"`
}

// Truncation describes cutting the log at a WAL sequence: what
// PlanTruncate would discard, or what TruncateAt discarded.
type Truncation struct {
	Prefix string `json:"prefix"`
	// At is the first WAL sequence discarded. The store keeps its
	// checkpoint and the log before At.
	At uint64 `json:"at"`
	// Discarded lists every WAL slot from At to the last object, in order.
	Discarded []DiscardedWAL `json:"discarded"`
	// Commits and Bytes total the discarded objects. Missing counts the
	// empty slots, Unreadable the damaged objects (whose commits are not
	// counted). Epochs lists the epochs of the writers of the readable ones.
	Commits    int      `json:"commits"`
	Bytes      int64    `json:"bytes"`
	Missing    int      `json:"missing"`
	Unreadable int      `json:"unreadable"`
	Epochs     []uint64 `json:"epochs"`
	// Keys is the number of keys the truncated store holds.
	Keys int `json:"keys"`
	// DroppedKeys are keys of the kept state whose large value is gone: a
	// discarded commit replaced or deleted it and its writer then deleted
	// the object. The truncated store drops them rather than keep keys
	// that cannot be read.
	DroppedKeys []string `json:"dropped_keys,omitempty"`

	// Applied reports that TruncateAt made the change; the fields below
	// are set only then.
	Applied bool `json:"applied"`
	// Epoch is the writer epoch the truncation took.
	Epoch uint64 `json:"epoch,omitempty"`
	// FirstLiveWAL is where the truncated store's log starts: past the
	// discarded slots and the fence TruncateAt wrote after them.
	FirstLiveWAL uint64 `json:"first_live_wal,omitempty"`
	// Copies is the prefix TruncateAt copied the discarded objects to
	// (wal/<seq>), with the large values they reference (large/<name>)
	// and this report (report.json).
	Copies string `json:"copies,omitempty"`
}

// truncPlan is a Truncation with the state it keeps.
type truncPlan struct {
	Truncation
	tree   *btree.BTreeG[*entry]
	last   uint64          // last WAL sequence listed
	larges map[string]bool // large values the discarded commits reference
}

// PlanTruncate reports what TruncateAt(at) would discard, changing
// nothing: it makes only GET and LIST requests.
func PlanTruncate(ctx context.Context, store objstore.Store, opts Options, at uint64) (Truncation, error) {
	opts = opts.withDefaults()
	o, err := newObjects(store, opts)
	if err != nil {
		return Truncation{}, err
	}
	m, _, err := readManifestForTruncate(ctx, o)
	if err != nil {
		return Truncation{}, err
	}
	p, err := planTruncate(ctx, o, m, at)
	if err != nil {
		return Truncation{}, err
	}
	p.Prefix = opts.Prefix
	return p.Truncation, nil
}

// TruncateAt cuts the log at WAL sequence at: it discards every WAL
// object from at on, so a store whose log breaks there (see Check,
// Report.BreakAt) opens again, holding its checkpoint and the commits
// before at. Every commit from at on is lost; the Truncation says which.
// It is the explicit repair for a log that cannot be restored; never call
// it while a writer that must keep running holds the store.
//
// Soundness, step by step:
//
//  1. It reads the checkpoint and the log before at (which must be
//     whole), and every slot from at to the last WAL object. A refusal
//     (ErrTruncatePoint, a damaged checkpoint) stops here, having
//     changed nothing.
//  2. It raises the manifest's epoch with If-Match, as Open does, so no
//     older writer's checkpoint can switch the manifest any more, and
//     the manifest is the one step 1 read.
//  3. It writes a fence at the first free sequence after them, so an
//     older writer still running cannot append past the cut (its next
//     write meets the fence and it turns ErrFenced, as after an Open).
//  4. It copies the discarded objects and the large values they
//     reference under Truncation.Copies, for inspection.
//  5. It writes the kept state as a new checkpoint whose first live WAL
//     sequence is past the fence, and switches the manifest to it with
//     If-Match: one atomic step. Before it the store still refuses to
//     open; after it no replay reads a discarded object.
//  6. It writes a fence into every empty slot it discarded: a paused
//     older writer whose next slot was there meets it instead of
//     committing into a log nobody replays.
//
// It deletes nothing: the discarded WAL objects now lie below the first
// live sequence, where the next Open collects them with the old chunks
// and unreferenced large values, as after any checkpoint (fences stay).
// A crash before step 5 leaves the store as it was plus a higher epoch,
// a fence past the last object and copies; running TruncateAt again
// cuts it then.
func TruncateAt(ctx context.Context, store objstore.Store, opts Options, at uint64) (Truncation, error) {
	opts = opts.withDefaults()
	o, err := newObjects(store, opts)
	if err != nil {
		return Truncation{}, err
	}
	m, etag, err := readManifestForTruncate(ctx, o)
	if err != nil {
		return Truncation{}, err
	}
	// 2 before 1, so a refused truncation changes nothing: the bump's
	// If-Match proves the manifest did not change since the plan read
	// it, and from then on the log only grows at its end, which step 3
	// picks up.
	p, err := planTruncate(ctx, o, m, at)
	if err != nil {
		return Truncation{}, err
	}
	p.Prefix = opts.Prefix
	bumped := *m
	bumped.epoch++
	o.randomID(bumped.writer[:])
	if etag, err = putManifest(ctx, o, &bumped, objstore.IfMatch(etag)); err != nil {
		return Truncation{}, truncateFenced(err)
	}
	epoch := bumped.epoch

	// 3. Fence the end of the log.
	fence := p.last + 1
	for {
		got, err := o.writeFenceAt(ctx, fence, epoch)
		if err == nil {
			break
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			return Truncation{}, fmt.Errorf("kv: truncate: write fence %s: %w", o.walKey(fence), err)
		}
		// A writer appended after the listing: discard that too.
		p.addDiscarded(o, decodeWALAt(fence, got), int64(len(got)))
		fence++
	}

	// 4. Copies for inspection.
	copies := o.pfx + fmt.Sprintf("discarded/%020d/", epoch)
	for _, d := range p.Discarded {
		if d.Missing {
			continue
		}
		if err := o.copyObject(ctx, d.Object, copies+fmt.Sprintf("wal/%020d", d.Seq)); err != nil {
			return Truncation{}, fmt.Errorf("kv: truncate: copy the discarded %s: %w", d.Object, err)
		}
	}
	for name := range p.larges {
		err := o.copyObject(ctx, o.largeKey(name), copies+"large/"+name)
		if err != nil && !errors.Is(err, objstore.ErrNotExist) {
			return Truncation{}, fmt.Errorf("kv: truncate: copy large value %s: %w", name, err)
		}
	}

	// 5. The kept state as a checkpoint, then the switch.
	nm := &manifest{epoch: epoch, firstLiveWAL: fence + 1, checkpointID: m.checkpointID + 1, packedWAL: m.packedWAL}
	o.randomID(nm.writer[:])
	if at == m.firstLiveWAL && len(p.DroppedKeys) == 0 {
		nm.chunks = m.chunks // the state is the checkpoint's
	} else if nm.chunks, err = o.writeChunks(ctx, p.tree, epoch, nm.checkpointID, opts.ChunkBytes); err != nil {
		return Truncation{}, fmt.Errorf("kv: truncate: %w", err)
	}
	if _, err := putManifest(ctx, o, nm, objstore.IfMatch(etag)); err != nil {
		return Truncation{}, truncateFenced(err)
	}
	p.Applied, p.Epoch, p.FirstLiveWAL, p.Copies = true, epoch, nm.firstLiveWAL, copies

	// 6. Fence the empty slots.
	for _, d := range p.Discarded {
		if !d.Missing {
			continue
		}
		if _, err := o.writeFenceAt(ctx, d.Seq, epoch); err != nil {
			o.log.Warn("kv: truncate: could not fence an empty discarded slot; an older writer still running may commit into it and lose that commit",
				"object", d.Object, "err", err)
		}
	}
	report, err := json.MarshalIndent(p.Truncation, "", "  ")
	if err == nil {
		_, err = o.put(ctx, copies+"report.json", report, objstore.PutOptions{})
	}
	if err != nil {
		o.log.Warn("kv: truncate: could not store the report next to the copies", "object", copies+"report.json", "err", err)
	}
	o.log.Info("kv: truncated the log", "prefix", opts.Prefix, "at", at, "discarded_objects", len(p.Discarded),
		"discarded_commits", p.Commits, "epoch", epoch, "first_live_wal", nm.firstLiveWAL, "copies", copies)
	return p.Truncation, nil
}

func readManifestForTruncate(ctx context.Context, o *objects) (*manifest, string, error) {
	m, etag, err := o.readManifest(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("kv: truncate: the manifest cannot be read, and cutting the WAL does not repair it (restore it from a backup or bucket versioning): %w", err)
	}
	if m == nil {
		if _, err := o.refuseManifestless(ctx); err != nil {
			return nil, "", fmt.Errorf("kv: truncate: cutting the WAL does not repair a missing manifest: %w", err)
		}
		return nil, "", fmt.Errorf("kv: truncate: no store under prefix %q: %q does not exist", o.pfx, o.manifestKey())
	}
	return m, etag, nil
}

func truncateFenced(err error) error {
	if errors.Is(err, objstore.ErrPrecondition) {
		return fmt.Errorf("%w: a writer opened the store during the truncation, which changed nothing the store reads; stop every writer and run it again", ErrFenced)
	}
	return fmt.Errorf("kv: truncate: write the manifest: %w", err)
}

// planTruncate reads the state the log keeps before at and every slot
// from at to the last WAL object.
func planTruncate(ctx context.Context, o *objects, m *manifest, at uint64) (*truncPlan, error) {
	if at < m.firstLiveWAL {
		return nil, fmt.Errorf("%w: WAL sequence %d is below the checkpoint's first live sequence %d, whose commits are in the checkpoint", ErrTruncatePoint, at, m.firstLiveWAL)
	}
	tree, err := o.loadCheckpoint(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("kv: truncate: the checkpoint cannot be read, and cutting the WAL does not repair it (restore it from a backup or bucket versioning): %w", err)
	}
	infos, err := o.list(ctx, o.pfx+"wal/", o.walKey(m.firstLiveWAL-1))
	if err != nil {
		return nil, err
	}
	p := &truncPlan{tree: tree, larges: map[string]bool{}}
	p.At = at
	for _, in := range infos {
		if seq, ok := o.walSeqOf(in.Key); ok {
			p.last = max(p.last, seq)
		}
	}
	if p.last < at {
		return nil, fmt.Errorf("%w: no WAL object at or after %q, so nothing to discard", ErrTruncatePoint, o.walKey(at))
	}

	// The kept log is read by sequence, not from the listing: every
	// object before at must be there and good.
	r := &replayer{o: o, tree: tree, base: m.firstLiveWAL, next: m.firstLiveWAL}
	for s := m.firstLiveWAL; s < at; s += walWindow {
		for _, d := range o.fetchWAL(ctx, seqRange(s, min(s+walWindow, at))) {
			err := d.err
			if errors.Is(err, objstore.ErrNotExist) {
				err = r.walCorrupt(d.seq, "missing")
			} else if err != nil && !errors.Is(err, errDecode) {
				return nil, fmt.Errorf("kv: truncate: read %s: %w", o.walKey(d.seq), err)
			} else if err = r.applyDecoded(d); err == nil && d.h.epoch > m.epoch {
				err = r.walCorrupt(d.seq, fmt.Sprintf("written by epoch %d, newer than the manifest's epoch %d", d.h.epoch, m.epoch))
			}
			if err != nil {
				return nil, fmt.Errorf("%w: the log already breaks at WAL sequence %d, before %d; truncate at %d or earlier: %w", ErrTruncatePoint, d.seq, at, d.seq, err)
			}
		}
	}

	for s := at; s <= p.last; s += walWindow {
		for _, d := range o.fetchWAL(ctx, seqRange(s, min(s+walWindow, p.last+1))) {
			if d.err != nil && !errors.Is(d.err, objstore.ErrNotExist) && !errors.Is(d.err, errDecode) {
				return nil, fmt.Errorf("kv: truncate: read %s: %w", o.walKey(d.seq), d.err)
			}
			p.addDiscarded(o, d, int64(d.size))
		}
	}

	// Keys whose large value a discarded commit dropped (and its writer
	// then deleted) cannot be read: drop them.
	larges, err := o.list(ctx, o.pfx+"large/", "")
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, in := range larges {
		sizes[in.Key] = in.Size
	}
	var dangling []*entry
	tree.Scan(func(e *entry) bool {
		if e.large != nil {
			if size, ok := sizes[o.largeKey(e.large.name)]; !ok || size != e.large.size {
				dangling = append(dangling, e)
			}
		}
		return true
	})
	for _, e := range dangling {
		tree.Delete(e)
		p.DroppedKeys = append(p.DroppedKeys, string(e.key))
	}
	p.Keys = tree.Len()
	return p, nil
}

// addDiscarded records the WAL slot of d (its fetch and decoding, size
// bytes) as discarded.
func (p *truncPlan) addDiscarded(o *objects, d decodedWAL, size int64) {
	w := DiscardedWAL{Object: o.walKey(d.seq), Seq: d.seq, Bytes: size}
	switch {
	case errors.Is(d.err, objstore.ErrNotExist):
		w.Missing = true
		p.Missing++
	case d.err != nil:
		w.Damaged = d.err.Error()
		p.Unreadable++
	default:
		w.Fence, w.Epoch, w.Commits = d.h.fence, d.h.epoch, d.h.nrec
		if !slices.Contains(p.Epochs, d.h.epoch) {
			p.Epochs = append(p.Epochs, d.h.epoch)
			slices.Sort(p.Epochs)
		}
		for _, ops := range d.recs {
			for _, op := range ops {
				if op.kind == opPutLarge {
					p.larges[op.large.name] = true
				}
			}
		}
	}
	p.Discarded = append(p.Discarded, w)
	p.Commits += w.Commits
	p.Bytes += size
}

func seqRange(from, to uint64) []uint64 {
	out := make([]uint64, 0, to-from)
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// randomID fills id from the store's random source.
func (o *objects) randomID(id []byte) {
	o.rmu.Lock()
	defer o.rmu.Unlock()
	for i := 0; i+8 <= len(id); i += 8 {
		binary.LittleEndian.PutUint64(id[i:], o.rnd.Uint64())
	}
}

// writeFenceAt writes a fence of epoch at WAL sequence seq, create-only.
// When another object holds the slot it returns that object's bytes and
// an error wrapping objstore.ErrPrecondition.
func (o *objects) writeFenceAt(ctx context.Context, seq, epoch uint64) ([]byte, error) {
	var id [batchIDLen]byte
	o.randomID(id[:])
	data := encodeWALHeader(true, epoch, seq, id, 0)
	var got []byte
	_, err := o.putVerified(ctx, o.walKey(seq), data, objstore.CreateOnly(), func(b []byte) bool {
		got = b
		h, _, herr := decodeWALHeader(b)
		return herr == nil && h.fence && h.batchID == id
	})
	return got, err
}

// copyObject copies the object at from to to.
func (o *objects) copyObject(ctx context.Context, from, to string) error {
	data, _, err := o.get(ctx, from)
	if err != nil {
		return err
	}
	_, err = o.put(ctx, to, data, objstore.PutOptions{})
	return err
}

// writeChunks writes tree as the chunks of checkpoint id of epoch and
// returns their descriptions.
func (o *objects) writeChunks(ctx context.Context, tree *btree.BTreeG[*entry], epoch, id uint64, target int) ([]chunkInfo, error) {
	var chunks []chunkInfo
	var w chunkWriter
	var err error
	cut := func() {
		data := w.finish()
		name := fmt.Sprintf("%020d-%020d-%06d", epoch, id, len(chunks))
		chunks = append(chunks, chunkInfo{name: name, first: append([]byte(nil), w.first...), count: w.count, size: int64(len(data))})
		if _, perr := o.put(ctx, o.chunkKey(name), data, objstore.PutOptions{}); perr != nil {
			err = fmt.Errorf("write checkpoint chunk: %w", perr)
		}
		w = chunkWriter{}
	}
	tree.Scan(func(e *entry) bool {
		w.add(e)
		if len(w.body) >= target {
			cut()
		}
		return err == nil
	})
	if err == nil && w.count > 0 {
		cut()
	}
	return chunks, err
}
