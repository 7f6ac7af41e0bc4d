package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// maybeCheckpointLocked starts a background checkpoint when the WAL since
// the last one passed a threshold.
func (db *DB) maybeCheckpointLocked() {
	if db.opts.DisableAutoCheckpoint || db.ckptRunning || db.err != nil || db.closing {
		return
	}
	objs := db.walObjsTotal - db.ckptObjsBase
	size := db.walBytesTotal - db.ckptBytesBase
	if objs < int64(db.opts.CheckpointWALObjects) && size < db.opts.CheckpointWALBytes {
		return
	}
	db.ckptRunning = true
	db.wg.Add(1)
	go func() {
		defer db.wg.Done()
		if err := db.checkpoint(db.ckptCtx); err != nil && !errors.Is(err, context.Canceled) {
			db.opts.Logger.Warn("kv: background checkpoint failed; retried after more WAL", "err", err)
		}
		db.mu.Lock()
		db.ckptRunning = false
		db.mu.Unlock()
	}()
}

// Checkpoint writes the current state as chunk objects and a new manifest,
// then deletes the WAL and chunk objects the new manifest no longer needs.
// Chunks whose key range saw no write since the last checkpoint are reused.
func (db *DB) Checkpoint(ctx context.Context) error {
	db.mu.Lock()
	err := db.usableLocked()
	db.mu.Unlock()
	if err != nil {
		return err
	}
	return db.checkpoint(ctx)
}

// checkpoint implements Checkpoint.
//
// Invariant: the snapshot it writes equals the state after exactly the WAL
// objects below firstLive. It is taken under mu while sealing the last
// queued batch, so every commit in the snapshot is in that batch or an
// earlier one and no later commit can join them. The manifest switches only
// after that batch is durable, and nothing is deleted before the switch.
func (db *DB) checkpoint(ctx context.Context) error {
	db.ckptMu.Lock()
	defer db.ckptMu.Unlock()
	start := db.opts.Clock.Now()

	db.mu.Lock()
	if db.err != nil || db.closed {
		err := db.err
		db.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return err
	}
	snap := db.snapshotLocked()
	dirty, full := db.dirty, db.fullRewrite
	db.dirty, db.fullRewrite = newDirtySet(db.manifest.chunks), false
	target := db.lastBatchLocked()
	if target != nil {
		target.sealed = true
		db.hurryLocked(target)
	}
	firstLive := db.nextWAL
	baseObjs, baseBytes := db.walObjsTotal, db.walBytesTotal
	old, etag := db.manifest, db.etag
	db.mu.Unlock()

	fail := func(err error) error {
		db.mu.Lock()
		db.fullRewrite = true // the dirty set is gone; rewrite everything next time
		if errors.Is(err, ErrFenced) {
			db.failLocked(err)
		}
		db.mu.Unlock()
		return err
	}
	if target != nil {
		if err := waitBatch(ctx, target); err != nil {
			return fail(err)
		}
		firstLive = target.seq + 1
		baseObjs, baseBytes = target.totObjs, target.totBytes
	}
	if !dirty.any && !full && firstLive == old.firstLiveWAL && (len(old.chunks) > 0 || snap.Len() == 0) {
		return nil // nothing changed
	}

	nm := &manifest{epoch: db.epoch, firstLiveWAL: firstLive, checkpointID: old.checkpointID + 1, packedWAL: old.packedWAL}
	db.o.rmu.Lock()
	binary.LittleEndian.PutUint64(nm.writer[:8], db.o.rnd.Uint64())
	binary.LittleEndian.PutUint64(nm.writer[8:], db.o.rnd.Uint64())
	db.o.rmu.Unlock()

	cw := newChunkUploader(ctx, db, nm.checkpointID)
	reused := 0
	if full || len(old.chunks) == 0 {
		cw.writeRange(snap, nil, nil)
	} else {
		d := dirty.withSmallNeighbors(db.opts.ChunkBytes)
		for i := 0; i < len(old.chunks); {
			if !d[i] {
				cw.reuse(old.chunks[i])
				reused++
				i++
				continue
			}
			j := i
			for j < len(old.chunks) && d[j] {
				j++
			}
			var lo, hi []byte
			if i > 0 {
				lo = old.chunks[i].first
			}
			if j < len(old.chunks) {
				hi = old.chunks[j].first
			}
			cw.writeRange(snap, lo, hi)
			i = j
		}
	}
	chunks, written, err := cw.finish()
	if err != nil {
		return fail(err)
	}
	nm.chunks = chunks
	newEtag, err := putManifest(ctx, db.o, nm, objstore.IfMatch(etag))
	if errors.Is(err, objstore.ErrPrecondition) {
		err = fmt.Errorf("%w: the manifest changed under checkpoint %d (a newer writer opened the store)", ErrFenced, nm.checkpointID)
	}
	if err != nil {
		return fail(err)
	}

	// The switch is done: everything below is cleanup.
	db.mu.Lock()
	// The writes since the snapshot marked the old manifest's chunks.
	db.dirty = db.dirty.remap(nm.chunks)
	db.manifest, db.etag = nm, newEtag
	db.ckptObjsBase, db.ckptBytesBase = baseObjs, baseBytes
	fences := map[uint64]bool{}
	var keep []uint64
	for _, f := range db.fences {
		fences[f] = true
		if f >= firstLive {
			keep = append(keep, f)
		}
	}
	db.fences = keep
	db.mu.Unlock()
	db.checkpoints.Add(1)
	db.chunksWritten.Add(int64(written))
	db.chunksReused.Add(int64(reused))

	var garbage []string
	live := map[string]bool{}
	for _, c := range nm.chunks {
		live[c.name] = true
	}
	for _, c := range old.chunks {
		if !live[c.name] {
			garbage = append(garbage, db.o.chunkKey(c.name))
		}
	}
	for s := old.firstLiveWAL; s < firstLive; s++ {
		if !fences[s] { // fences stay forever: see doc.go, "Fencing"
			garbage = append(garbage, db.o.walKey(s))
		}
	}
	db.deleteAll(ctx, garbage)
	db.opts.Logger.Info("kv: checkpoint", "prefix", db.opts.Prefix, "id", nm.checkpointID, "keys", snap.Len(),
		"chunks_written", written, "chunks_reused", reused, "first_live_wal", firstLive,
		"deleted", len(garbage), "took", db.opts.Clock.Now().Sub(start))
	return nil
}

// chunkUploader cuts a key-ordered stream of entries into chunks and writes
// them with bounded parallelism.
type chunkUploader struct {
	ctx    context.Context
	db     *DB
	id     uint64
	target int
	chunks []chunkInfo
	n      int
	jobs   chan func() error
	wg     sync.WaitGroup
	errMu  sync.Mutex
	err    error
}

func newChunkUploader(ctx context.Context, db *DB, id uint64) *chunkUploader {
	u := &chunkUploader{ctx: ctx, db: db, id: id, target: db.opts.ChunkBytes, jobs: make(chan func() error)}
	for range 4 {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			for job := range u.jobs {
				if err := job(); err != nil {
					u.errMu.Lock()
					u.err = errors.Join(u.err, err)
					u.errMu.Unlock()
				}
			}
		}()
	}
	return u
}

func (u *chunkUploader) reuse(c chunkInfo) { u.chunks = append(u.chunks, c) }

func (u *chunkUploader) cut(w *chunkWriter) {
	data := w.finish()
	name := fmt.Sprintf("%020d-%020d-%06d", u.db.epoch, u.id, u.n)
	u.n++
	u.chunks = append(u.chunks, chunkInfo{name: name, first: bytes.Clone(w.first), count: w.count, size: int64(len(data))})
	key := u.db.o.chunkKey(name)
	u.jobs <- func() error {
		if _, err := u.db.o.put(u.ctx, key, data, objstore.PutOptions{}); err != nil {
			return fmt.Errorf("kv: write checkpoint chunk: %w", err)
		}
		return nil
	}
}

// writeRange writes the entries of snap in [lo, hi) as new chunks.
func (u *chunkUploader) writeRange(snap *btree.BTreeG[*entry], lo, hi []byte) {
	var w chunkWriter
	snapshot{tree: snap}.each(Range{Start: lo, End: hi}, func(e *entry) bool {
		w.add(e)
		if len(w.body) >= u.target {
			u.cut(&w)
			w = chunkWriter{}
		}
		return true
	})
	if w.count > 0 {
		u.cut(&w)
	}
}

// finish waits for the uploads and returns the chunk list and how many
// chunks were written.
func (u *chunkUploader) finish() ([]chunkInfo, int, error) {
	close(u.jobs)
	u.wg.Wait()
	return u.chunks, u.n, u.err
}

// deleteAll deletes keys with bounded parallelism, logging failures (the
// objects are collected at the next open).
func (db *DB) deleteAll(ctx context.Context, keys []string) {
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := db.o.del(ctx, k); err != nil {
				db.opts.Logger.Warn("kv: delete obsolete object failed; collected at the next open", "object", k, "err", err)
			}
		}()
	}
	wg.Wait()
}

// collectGarbage deletes, once after Open, what earlier writers left behind
// when they crashed: large objects no key references, chunks no manifest
// lists, and WAL objects below the checkpoint that cannot be fences. It
// only touches names of older epochs and WAL below the manifest it opened
// with, so it never races this writer's own work.
func (db *DB) collectGarbage(m *manifest, snap *btree.BTreeG[*entry]) {
	defer db.wg.Done()
	ctx := db.bgCtx
	var garbage []string
	refs := map[string]bool{}
	snap.Scan(func(e *entry) bool {
		if e.large != nil {
			refs[e.large.name] = true
		}
		return true
	})
	larges, err := db.o.list(ctx, db.o.pfx+"large/", "")
	if err != nil {
		db.gcListFailed("large/", err)
		return
	}
	for _, in := range larges {
		name := in.Key[len(db.o.pfx+"large/"):]
		if ep, ok := epochOfName(name); ok && ep < db.epoch && !refs[name] {
			garbage = append(garbage, in.Key)
		}
	}
	inManifest := map[string]bool{}
	for _, c := range m.chunks {
		inManifest[c.name] = true
	}
	chunks, err := db.o.list(ctx, db.o.pfx+"chunk/", "")
	if err != nil {
		db.gcListFailed("chunk/", err)
		return
	}
	for _, in := range chunks {
		name := in.Key[len(db.o.pfx+"chunk/"):]
		if ep, ok := epochOfName(name); ok && ep < db.epoch && !inManifest[name] {
			garbage = append(garbage, in.Key)
		}
	}
	wals, err := db.o.list(ctx, db.o.pfx+"wal/", "")
	if err != nil {
		db.gcListFailed("wal/", err)
		return
	}
	for _, in := range wals {
		seq, ok := db.o.walSeqOf(in.Key)
		if !ok || seq >= m.firstLiveWAL {
			continue
		}
		if in.Size <= maxFenceSize {
			// Possibly a fence, which must stay (doc.go, "Fencing"). Not
			// read to find out: that would cost a GET per Open ever made.
			// A commit object this small (a few bytes of data) leaks.
			continue
		}
		garbage = append(garbage, in.Key)
	}
	if len(garbage) > 0 {
		db.opts.Logger.Info("kv: collecting objects left by earlier writers", "prefix", db.opts.Prefix, "objects", len(garbage))
		db.deleteAll(ctx, garbage)
	}
}

// gcListFailed logs a LIST that stopped collectGarbage: what it left is
// collected by the next Open (nothing else depends on it), unless the
// store is closing.
func (db *DB) gcListFailed(folder string, err error) {
	if db.bgCtx.Err() != nil {
		return
	}
	db.opts.Logger.Warn("kv: listing objects left by earlier writers failed; the next Open collects them",
		"prefix", db.opts.Prefix, "folder", folder, "err", err)
}

// maxFenceSize bounds the size of a fence object (header only, varints at
// their longest).
const maxFenceSize = 4 + 1 + 1 + 10 + 10 + batchIDLen + 1 + 4
