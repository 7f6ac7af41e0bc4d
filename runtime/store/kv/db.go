package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/internal/invariants"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// DB is the single writer of one store. It is safe for concurrent use.
type DB struct {
	o     *objects
	opts  Options
	epoch uint64

	// bgCtx governs background store requests (WAL writes, checkpoints,
	// deletions); Close cancels it.
	bgCtx      context.Context
	bgCancel   context.CancelFunc
	ckptCtx    context.Context // background checkpoints; cancelled first by Close
	ckptCancel context.CancelFunc
	wg         sync.WaitGroup
	ckptMu     sync.Mutex // serializes checkpoints

	mu   sync.Mutex
	cond *sync.Cond // on mu: queue changes, batches finish, closing

	tree      *btree.BTreeG[*entry]
	snapCache *btree.BTreeG[*entry] // COW clone of tree at snapSeq
	snapSeq   uint64
	commitSeq uint64         // commits applied so far
	live      map[uint64]int // snapshot seq -> open snapshots at it
	minLive   uint64         // smallest key of live, when minValid
	minValid  bool

	// recent maps each key written by a commit after the oldest live
	// snapshot to the sequence of its last write; recentLog lists those
	// commits in order so recent can be trimmed as snapshots close.
	recent    *btree.BTreeG[recentWrite]
	recentLog []recentCommit

	dirty       dirtySet // chunks of manifest written since the last checkpoint snapshot
	fullRewrite bool     // a failed checkpoint lost its dirty set

	queue       []*batch // batches not yet written, in order; the last may be open
	inflight    *batch
	lingerArmed bool // a linger timer will wake the flusher
	// Group commit with company (siblings.go): registered committers, the
	// last WAL PUT's duration, and the pending wake-up of a held batch.
	committers  int
	lastPut     time.Duration
	delayArmed  bool
	delayAt     time.Time
	flushedLast uint64 // last commit sequence handed to the flusher (invariants)
	nextWAL     uint64

	manifest *manifest
	etag     string
	fences   []uint64 // fence sequences >= manifest.firstLiveWAL (never deleted)

	rec            recordEncoder // scratch WAL record of the commit being applied (under mu)
	lastBatchBytes int           // record bytes of the last batch the flusher took

	drops     []largeDrop // large objects to delete once durable and unseen
	largeNext uint64

	walObjsTotal, walBytesTotal int64 // since Open
	ckptObjsBase, ckptBytesBase int64 // totals covered by the last checkpoint
	memBytes                    int64
	ckptRunning                 bool

	err      error         // sticky: ErrFenced, ErrStopped or ErrClosed; set with failLocked
	stopped  chan struct{} // closed when err is first set
	closing  bool
	closed   bool
	stopping bool

	commits, durable, walPuts, walBytes atomic.Int64
	heldBatches                         atomic.Int64
	checkpoints, conflicts              atomic.Int64
	chunksWritten, chunksReused, larges atomic.Int64
	flushLat                            lockedHist
}

type recentWrite struct {
	key string
	seq uint64
}

type recentCommit struct {
	seq  uint64
	keys []string
}

type largeDrop struct {
	seq uint64 // commit that dropped it
	ref largeRef
}

// walHeaderRoom is the space reserved at the start of a batch's buffer for
// its WAL header (at most 56 bytes: magic, version, flags, two uvarints,
// batch id, record count, checksum).
const walHeaderRoom = 64

// batch is the group of commits that goes into one WAL object.
type batch struct {
	id     [batchIDLen]byte
	buf    []byte // walHeaderRoom bytes, then the encoded records
	n      int
	sealed bool // no more commits join
	// urgent says someone waits for this batch (a durable commit joined
	// it, or Sync, Close or a checkpoint asked): the flusher writes it
	// without lingering, holding it only for registered committers that
	// have not joined yet (siblings.go). hurried says Close or a
	// checkpoint asked: it goes at once.
	urgent, hurried bool
	// joiners counts registered committers whose durable commit joined;
	// readyAt is when it first could have gone, lastJoin when the last
	// durable commit joined; held says it waited for company.
	joiners           int
	readyAt, lastJoin time.Time
	held              bool
	born              time.Time // when its first commit joined, for the linger
	seq               uint64    // WAL sequence, set when the flusher takes it
	// first and last are the commit sequences it holds (for the
	// invariant that WAL order is commit order).
	first, last uint64
	drops       []largeDrop
	done        chan struct{}
	err         error // set before done is closed
	// WAL totals after this batch was written, for checkpoint accounting.
	totObjs, totBytes int64
}

// Open opens the store as its only writer: it bumps the writer epoch in the
// manifest, loads the checkpoint, replays the WAL and writes a fence at the
// next WAL sequence, so an older writer's next write fails with ErrFenced.
func Open(ctx context.Context, store objstore.Store, opts Options) (*DB, error) {
	opts = opts.withDefaults()
	o, err := newObjects(store, opts)
	if err != nil {
		return nil, err
	}
	start := opts.Clock.Now()
	// A store that can keeps the WAL in a packed folder, where a WAL PUT
	// is made durable by one data flush (see doc.go, "Layout"). Before
	// the epoch bump, so no WAL object of this writer is ever a file.
	packed, err := objstore.Pack(ctx, store, o.pfx+"wal/")
	if err != nil {
		return nil, fmt.Errorf("kv: pack the WAL folder %q: %w", o.pfx+"wal/", err)
	}
	m, etag, err := bumpEpoch(ctx, o, packed)
	if err != nil {
		return nil, err
	}
	dirty := newDirtySet(m.chunks)
	r, err := o.openState(ctx, m, dirty.mark)
	if err != nil {
		return nil, err
	}
	if err := writeFence(ctx, o, opts, r, m.epoch); err != nil {
		return nil, err
	}
	// Copy the replayed state out of the objects it was decoded from, so
	// what stays in memory is the live keys and values only (compactTree).
	tree := compactTree(r.tree)
	db := &DB{
		o: o, opts: opts, epoch: m.epoch,
		tree: tree, live: map[uint64]int{},
		recent:   btree.NewBTreeGOptions(func(a, b recentWrite) bool { return a.key < b.key }, btree.Options{NoLocks: true}),
		dirty:    dirty,
		nextWAL:  r.next,
		manifest: m, etag: etag,
		fences:    r.fences,
		largeNext: 1,
	}
	db.cond = sync.NewCond(&db.mu)
	db.stopped = make(chan struct{})
	db.bgCtx, db.bgCancel = context.WithCancel(context.Background())
	db.ckptCtx, db.ckptCancel = context.WithCancel(db.bgCtx)
	// The replayed WAL counts toward the next checkpoint.
	db.walObjsTotal, db.walBytesTotal = int64(r.objects), r.bytes
	tree.Scan(func(e *entry) bool { db.memBytes += int64(e.size()); return true })
	openSnap := tree.Copy()
	db.wg.Add(2)
	go db.flusher()
	go db.collectGarbage(m, openSnap)
	opts.Logger.Info("kv: opened as writer", "prefix", opts.Prefix, "epoch", db.epoch, "keys", tree.Len(),
		"chunks", len(m.chunks), "wal_replayed", r.objects, "wal_bytes", r.bytes, "took", opts.Clock.Now().Sub(start))
	db.mu.Lock()
	db.maybeCheckpointLocked()
	db.mu.Unlock()
	return db, nil
}

// bumpEpoch creates the manifest or raises its epoch with If-Match; packed
// marks it as the manifest of a store whose WAL folder is packed.
func bumpEpoch(ctx context.Context, o *objects, packed bool) (*manifest, string, error) {
	for {
		m, etag, err := o.readManifest(ctx)
		if err != nil {
			return nil, "", err
		}
		var nm manifest
		var popts objstore.PutOptions
		if m == nil {
			if created, err := o.refuseManifestless(ctx); err != nil || created {
				if err != nil {
					return nil, "", err
				}
				continue // another opener created it meanwhile
			}
			nm = manifest{epoch: 1, firstLiveWAL: 1}
			popts = objstore.CreateOnly()
		} else {
			nm = *m
			nm.epoch++
			popts = objstore.IfMatch(etag)
		}
		nm.packedWAL = nm.packedWAL || packed
		o.rmu.Lock()
		binary.LittleEndian.PutUint64(nm.writer[:8], o.rnd.Uint64())
		binary.LittleEndian.PutUint64(nm.writer[8:], o.rnd.Uint64())
		o.rmu.Unlock()
		newEtag, err := putManifest(ctx, o, &nm, popts)
		if errors.Is(err, objstore.ErrPrecondition) {
			continue // another opener won the race; read again
		}
		if err != nil {
			return nil, "", err
		}
		return &nm, newEtag, nil
	}
}

// putManifest writes m conditionally. A lost response is resolved by
// reading the manifest back: the writer id makes every manifest unique.
func putManifest(ctx context.Context, o *objects, m *manifest, popts objstore.PutOptions) (string, error) {
	data := m.encode()
	info, err := o.putVerified(ctx, o.manifestKey(), data, popts, func(got []byte) bool { return bytes.Equal(got, data) })
	return info.ETag, err
}

// writeFence claims the next free WAL sequence for epoch with an empty fence
// object, replaying any object an older writer managed to write first.
func writeFence(ctx context.Context, o *objects, opts Options, r *replayer, epoch uint64) error {
	var id [batchIDLen]byte
	o.rmu.Lock()
	binary.LittleEndian.PutUint64(id[:8], o.rnd.Uint64())
	binary.LittleEndian.PutUint64(id[8:], o.rnd.Uint64())
	o.rmu.Unlock()
	for {
		key := o.walKey(r.next)
		data := encodeWALHeader(true, epoch, r.next, id, 0)
		var got []byte
		_, err := o.putVerified(ctx, key, data, objstore.CreateOnly(), func(b []byte) bool {
			got = b
			h, _, herr := decodeWALHeader(b)
			return herr == nil && h.fence && h.batchID == id
		})
		if err == nil {
			r.fences = append(r.fences, r.next)
			r.next++
			return nil
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			return fmt.Errorf("kv: write fence %s: %w", key, err)
		}
		// An older writer got there first: replay its object, try the next.
		if err := r.apply(r.next, got); err != nil {
			return err
		}
		if r.maxEpoch > epoch {
			return fmt.Errorf("%w: %s holds epoch %d, newer than ours (%d)", ErrFenced, key, r.maxEpoch, epoch)
		}
		opts.Logger.Info("kv: older writer wrote past our replay; replayed it", "object", key)
	}
}

// Epoch returns this writer's epoch.
func (db *DB) Epoch() uint64 { return db.epoch }

// failLocked makes err the DB's sticky error unless one is set, and
// signals Stopped.
func (db *DB) failLocked(err error) {
	if db.err != nil {
		return
	}
	db.err = err
	select {
	case <-db.stopped:
	default:
		close(db.stopped)
	}
}

// Stopped is closed once the DB accepts no more commits for good: a WAL
// write failed (ErrStopped), a newer writer fenced it (ErrFenced) or it
// closed. Err then says which. Long waits select on it to end promptly
// instead of waiting for work that can no longer commit.
func (db *DB) Stopped() <-chan struct{} { return db.stopped }

// Err returns the error that stopped the DB, or nil while it is usable.
func (db *DB) Err() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.err != nil {
		return db.err
	}
	if db.closed || db.closing {
		return ErrClosed
	}
	return nil
}

// usableLocked returns the error that makes the DB unusable, if any.
func (db *DB) usableLocked() error {
	if db.err != nil {
		return db.err
	}
	if db.closed || db.closing {
		return ErrClosed
	}
	return nil
}

// snapshotLocked returns a COW clone of the tree at commitSeq, shared by
// everyone who asks before the next commit.
func (db *DB) snapshotLocked() *btree.BTreeG[*entry] {
	if db.snapCache == nil || db.snapSeq != db.commitSeq {
		db.snapCache = db.tree.Copy()
		db.snapSeq = db.commitSeq
	}
	return db.snapCache
}

// acquire pins a snapshot; release must follow.
func (db *DB) acquire() (snapshot, uint64, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.usableLocked(); err != nil {
		return snapshot{}, 0, err
	}
	db.pinLocked(db.commitSeq)
	return snapshot{tree: db.snapshotLocked(), o: db.o}, db.commitSeq, nil
}

// pinLocked registers a live snapshot at seq (always the newest sequence,
// so the cached minimum stays valid).
func (db *DB) pinLocked(seq uint64) {
	if len(db.live) == 0 {
		db.minLive, db.minValid = seq, true
	}
	db.live[seq]++
}

func (db *DB) release(seq uint64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.unpinLocked(seq)
	db.trimLocked()
}

// unpinLocked drops one registration of a live snapshot at seq.
func (db *DB) unpinLocked(seq uint64) {
	if db.live[seq]--; db.live[seq] <= 0 {
		delete(db.live, seq)
		if seq == db.minLive {
			db.minValid = false
		}
	}
}

// minLiveLocked is the oldest sequence a live snapshot can see.
func (db *DB) minLiveLocked() uint64 {
	if len(db.live) == 0 {
		return db.commitSeq
	}
	if !db.minValid {
		m := db.commitSeq
		for s := range db.live {
			m = min(m, s)
		}
		db.minLive, db.minValid = m, true
	}
	return db.minLive
}

// trimLocked forgets recent writes no live snapshot can conflict with and
// deletes large objects no snapshot can read.
func (db *DB) trimLocked() {
	ml := db.minLiveLocked()
	if invariants.Enabled {
		for seq := range db.live {
			invariants.Check(seq >= ml, "kv: snapshot at commit %d is older than minLive %d: trimming would drop what it may read", seq, ml)
		}
	}
	i := 0
	for ; i < len(db.recentLog) && db.recentLog[i].seq <= ml; i++ {
		c := db.recentLog[i]
		for _, k := range c.keys {
			if w, ok := db.recent.Get(recentWrite{key: k}); ok && w.seq == c.seq {
				db.recent.Delete(w)
			}
		}
	}
	if i > 0 {
		db.recentLog = append(db.recentLog[:0], db.recentLog[i:]...)
	}
	var del []largeRef
	j := 0
	for ; j < len(db.drops) && db.drops[j].seq <= ml; j++ {
		del = append(del, db.drops[j].ref)
	}
	if j > 0 && !db.stopping { // once stopping, the next Open collects them
		db.drops = append(db.drops[:0], db.drops[j:]...)
		db.wg.Add(1)
		go func() {
			defer db.wg.Done()
			for _, ref := range del {
				if err := db.o.del(db.bgCtx, db.o.largeKey(ref.name)); err != nil {
					db.opts.Logger.Warn("kv: delete dropped large value failed; it is collected at the next open", "object", ref.name, "err", err)
				}
			}
		}()
	}
}

// Get returns the latest committed value of key (durable or not), or
// ErrNotFound. The caller must not modify the returned slice.
func (db *DB) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	db.mu.Lock()
	if err := db.usableLocked(); err != nil {
		db.mu.Unlock()
		return nil, err
	}
	e, ok := db.tree.Get(&entry{key: key})
	if !ok {
		db.mu.Unlock()
		return nil, notFound(key)
	}
	if e.large == nil {
		db.mu.Unlock()
		return e.val, nil
	}
	seq := db.commitSeq
	db.pinLocked(seq) // keep the large object from being deleted while we read it
	db.mu.Unlock()
	defer db.release(seq)
	return db.o.fetchLarge(ctx, e.large)
}

// Scan calls fn for each key in r of the latest committed state, in r's
// order, until fn returns false or an error (which Scan returns).
func (db *DB) Scan(ctx context.Context, r Range, fn func(key, value []byte) (more bool, err error)) error {
	s, seq, err := db.acquire()
	if err != nil {
		return err
	}
	defer db.release(seq)
	return s.scan(ctx, r, fn)
}

// Begin starts a transaction on a snapshot of the latest committed state,
// taken at its first read (a write-only transaction takes none). A read of
// a key that a commit changed after the snapshot fails with ErrConflict at
// once, as the commit would. End it with Commit, CommitNonDurable or
// Rollback.
func (db *DB) Begin() *Tx { return &Tx{db: db} }

// Update runs fn in a transaction and commits it durably, retrying fn on
// ErrConflict (from the commit or from a read inside fn) up to
// Options.ConflictRetries times. Any other error from fn rolls back and is
// returned as is. The transaction's snapshot is taken at its
// first read, so a write-only fn costs no snapshot.
func (db *DB) Update(ctx context.Context, fn func(tx *Tx) error) error {
	return db.update(ctx, fn, true)
}

// UpdateNonDurable is Update with CommitNonDurable: the writes are visible
// at once and become durable with the next WAL object.
func (db *DB) UpdateNonDurable(ctx context.Context, fn func(tx *Tx) error) error {
	return db.update(ctx, fn, false)
}

func (db *DB) update(ctx context.Context, fn func(tx *Tx) error, durable bool) error {
	var err error
	for attempt := 0; attempt <= db.opts.ConflictRetries; attempt++ {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		tx := &Tx{db: db} // snapshot taken at the first read
		if err = fn(tx); err != nil {
			tx.Rollback()
			if errors.Is(err, ErrConflict) {
				continue // a read saw a key changed after the snapshot
			}
			return err
		}
		if durable {
			err = tx.Commit(ctx)
		} else {
			err = tx.CommitNonDurable(ctx)
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("kv: Update gave up after %d retries: %w", db.opts.ConflictRetries, err)
}

// View runs fn on a read-only snapshot.
func (db *DB) View(ctx context.Context, fn func(tx *Tx) error) error {
	tx := db.Begin()
	defer tx.Rollback()
	if err := tx.ensureSnap(); err != nil { // a read-only view never conflicts
		return err
	}
	tx.readOnly = true
	return fn(tx)
}

// Sync returns when every commit made before the call is durable. It ends
// the linger but waits with the company like a durable commit (at most
// CommitDelay): ending that wait would split the PUT the registered
// committers were about to share. A committer ctx carries (WithCommitter)
// counts as joined, since it commits nothing until Sync returns. An error
// from waiting wraps ErrCommitUncertain; an error from a DB that already
// stopped (ErrStopped, ErrFenced, ErrClosed) does not, although commits
// applied before the stop were not all made durable.
func (db *DB) Sync(ctx context.Context) error {
	db.mu.Lock()
	if err := db.usableLocked(); err != nil {
		db.mu.Unlock()
		return err
	}
	b := db.lastBatchLocked()
	if b != nil && !b.sealed {
		b.urgent = true
		if c := committerFrom(ctx); c != nil {
			db.joinLocked(b, c, db.opts.Clock.Now())
		}
		db.cond.Broadcast()
	}
	db.mu.Unlock()
	return waitBatch(ctx, b)
}

// hurryLocked makes b (and so every batch before it) flush without
// lingering.
func (db *DB) hurryLocked(b *batch) {
	if b != nil && !b.hurried {
		b.urgent, b.hurried = true, true
		db.cond.Broadcast()
	}
}

// armLingerLocked wakes the flusher once the linger of the batch just
// opened has passed, so a lone non-durable commit still reaches the store.
func (db *DB) armLingerLocked(d time.Duration) {
	if db.opts.Linger <= 0 || db.lingerArmed {
		return
	}
	db.lingerArmed = true
	db.opts.Clock.AfterFunc(d, func() {
		db.mu.Lock()
		db.lingerArmed = false
		db.cond.Broadcast()
		db.mu.Unlock()
	})
}

// flushableLocked reports whether the flusher should write the first
// queued batch now: something waits for it or for a later batch, its
// linger has passed, or the DB is stopping.
func (db *DB) flushableLocked() bool {
	if len(db.queue) == 0 {
		return false
	}
	if db.stopping || db.err != nil || db.opts.Linger <= 0 {
		return true
	}
	urgent := false
	for _, b := range db.queue {
		if b.hurried {
			return true
		}
		urgent = urgent || b.urgent
	}
	if urgent {
		// A full batch goes at once; the open one may wait for company.
		return len(db.queue) > 1 || !db.holdForCompanyLocked(db.queue[0])
	}
	waited := db.opts.Clock.Now().Sub(db.queue[0].born)
	if waited >= db.opts.Linger {
		return true
	}
	db.armLingerLocked(db.opts.Linger - waited)
	return false
}

func (db *DB) lastBatchLocked() *batch {
	if len(db.queue) > 0 {
		return db.queue[len(db.queue)-1]
	}
	return db.inflight
}

// waitBatch waits for b's WAL write. Its commits are applied already, so
// every error wraps ErrCommitUncertain.
func waitBatch(ctx context.Context, b *batch) error {
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
		if b.err != nil {
			return fmt.Errorf("%w: %w", ErrCommitUncertain, b.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: stopped waiting for the WAL write: %w (the commit may still become durable)", ErrCommitUncertain, ctx.Err())
	}
}

// commitLocked applies tx's writes as the next commit and queues them for
// the WAL. larges maps keys to already written large objects.
func (db *DB) commitLocked(tx *Tx, larges map[string]largeRef, urgent bool) (*batch, error) {
	if err := db.usableLocked(); err != nil {
		return nil, err
	}
	if tx.pinned && tx.snapSeq < db.commitSeq {
		if k, ok := db.conflictLocked(tx); ok {
			db.conflicts.Add(1)
			return nil, fmt.Errorf("%w: %s changed after the transaction's snapshot", ErrConflict, k)
		}
	}
	// The transaction's own snapshot is done with; dropping it here, under
	// the lock the commit holds anyway, also tells whether any snapshot
	// older than this commit remains.
	if tx.pinned {
		tx.pinned, tx.hasTree, tx.snap.tree = false, false, nil
		db.unpinLocked(tx.snapSeq)
	}
	// Only a transaction whose snapshot predates this commit can conflict
	// with it: with none live, its keys need no conflict tracking.
	track := len(db.live) > 0
	// First pass: resolve counter adds against the latest state, so a bad
	// counter aborts the commit before anything changes.
	type final struct {
		key []byte
		e   *entry // nil = delete
	}
	finals := make([]final, 0, tx.writes.Len())
	rec := &db.rec // commits are serialized under mu: one scratch encoder
	rec.reset()
	var ferr error
	tx.writes.Scan(func(w *write) bool {
		f := final{key: w.key}
		switch w.kind {
		case writePut:
			if ref, ok := larges[string(w.key)]; ok {
				f.e = &entry{key: w.key, large: &ref}
				rec.putLarge(w.key, ref)
			} else {
				f.e = &entry{key: w.key, val: w.value}
				rec.put(w.key, w.value)
			}
		case writeDelete:
			rec.del(w.key)
		case writeAdd:
			var base int64
			if cur, ok := db.tree.Get(&entry{key: w.key}); ok {
				if cur.large != nil || len(cur.val) != 8 {
					ferr = fmt.Errorf("kv: Add to key %q: its value is not an 8-byte counter", w.key)
					return false
				}
				base = int64(binary.BigEndian.Uint64(cur.val))
			}
			v := binary.BigEndian.AppendUint64(nil, uint64(base+w.delta))
			f.e = &entry{key: w.key, val: v}
			rec.put(w.key, v)
		}
		finals = append(finals, f)
		return true
	})
	if ferr != nil {
		return nil, ferr
	}
	seq := db.commitSeq + 1
	b := db.openBatchLocked()
	b.buf = rec.appendTo(b.buf)
	b.n++
	if b.n == 1 {
		b.first = seq
	}
	b.last = seq
	if urgent {
		b.urgent = true
		db.joinLocked(b, tx.committer, db.opts.Clock.Now())
	} else if b.n == 1 && !b.urgent {
		db.armLingerLocked(db.opts.Linger)
	}
	var keys []string
	if track {
		keys = make([]string, len(finals))
	}
	for i, f := range finals {
		var old *entry
		if f.e != nil {
			old, _ = db.tree.Set(f.e)
			db.memBytes += int64(f.e.size())
		} else {
			old, _ = db.tree.Delete(&entry{key: f.key})
		}
		if old != nil {
			db.memBytes -= int64(old.size())
			if old.large != nil {
				b.drops = append(b.drops, largeDrop{seq: seq, ref: *old.large})
			}
		}
		if track {
			k := string(f.key)
			keys[i] = k
			db.recent.Set(recentWrite{key: k, seq: seq})
		}
		db.dirty.mark(f.key)
	}
	if track {
		db.recentLog = append(db.recentLog, recentCommit{seq: seq, keys: keys})
	}
	db.commitSeq = seq
	db.commits.Add(1)
	db.trimLocked()
	db.cond.Broadcast()
	return b, nil
}

// conflictLocked reports the first read key or scanned range of tx written
// by a commit after tx's snapshot.
func (db *DB) conflictLocked(tx *Tx) (string, bool) {
	for _, k := range tx.reads {
		if w, ok := db.recent.Get(recentWrite{key: k}); ok && w.seq > tx.snapSeq {
			return fmt.Sprintf("key %q", k), true
		}
	}
	for _, r := range tx.ranges {
		var hit *recentWrite
		db.recent.Ascend(recentWrite{key: string(r.Start)}, func(w recentWrite) bool {
			if r.End != nil && w.key >= string(r.End) {
				return false
			}
			if w.seq > tx.snapSeq {
				hit = &w
				return false
			}
			return true
		})
		if hit != nil {
			return fmt.Sprintf("key %q in a scanned range", hit.key), true
		}
	}
	return "", false
}

// openBatchLocked returns the batch new commits join.
func (db *DB) openBatchLocked() *batch {
	if n := len(db.queue); n > 0 {
		if b := db.queue[n-1]; !b.sealed && len(b.buf)-walHeaderRoom < db.opts.MaxBatchBytes {
			return b
		}
	}
	// Size the buffer like the last batch, so a busy writer does not
	// regrow (and copy) it commit by commit.
	size := min(max(db.lastBatchBytes+db.lastBatchBytes/4, 1<<10), db.opts.MaxBatchBytes)
	b := &batch{done: make(chan struct{}), buf: make([]byte, walHeaderRoom, walHeaderRoom+size), born: db.opts.Clock.Now()}
	db.o.rmu.Lock()
	binary.LittleEndian.PutUint64(b.id[:8], db.o.rnd.Uint64())
	binary.LittleEndian.PutUint64(b.id[8:], db.o.rnd.Uint64())
	db.o.rmu.Unlock()
	db.queue = append(db.queue, b)
	return b
}

// flusher writes queued batches one at a time, in order.
//
// Invariant: WAL sequence order equals commit order. Commits join batches in
// commit order under mu, batches are taken in queue order, and each takes
// the next sequence; the next PUT starts only after the previous one
// succeeded. Any failure is fatal to the DB (never skip a sequence: a gap
// would hide every later object from replay).
func (db *DB) flusher() {
	defer db.wg.Done()
	db.mu.Lock()
	defer db.mu.Unlock()
	for {
		for !db.flushableLocked() && !(db.stopping && len(db.queue) == 0) {
			db.cond.Wait()
		}
		if len(db.queue) == 0 {
			return
		}
		b := db.queue[0]
		db.queue = db.queue[1:]
		if db.err != nil {
			b.err = db.err
			close(b.done)
			continue
		}
		b.sealed = true
		db.lastBatchBytes = len(b.buf) - walHeaderRoom
		b.seq = db.nextWAL
		db.nextWAL++
		db.checkFlushOrderLocked(b)
		db.inflight = b
		db.mu.Unlock()
		start := db.opts.Clock.Now()
		n, err := db.writeWAL(b)
		took := db.opts.Clock.Now().Sub(start)
		db.flushLat.add(took)
		db.mu.Lock()
		db.lastPut = took
		db.inflight = nil
		if err != nil {
			if db.err == nil {
				if !errors.Is(err, ErrFenced) {
					err = fmt.Errorf("%w; reopen the store to continue: %w", ErrStopped, err)
				}
				db.failLocked(err)
				if errors.Is(err, ErrFenced) {
					db.opts.Logger.Warn("kv: fenced by a newer writer; this DB stops", "prefix", db.opts.Prefix, "epoch", db.epoch, "err", err)
				} else {
					db.opts.Logger.Error("kv: WAL write failed; the DB stops accepting commits", "object", db.o.walKey(b.seq), "err", err)
				}
			}
			b.err = db.err
		} else {
			db.walPuts.Add(1)
			db.walBytes.Add(int64(n))
			db.durable.Add(int64(b.n))
			db.walObjsTotal++
			db.walBytesTotal += int64(n)
			b.totObjs, b.totBytes = db.walObjsTotal, db.walBytesTotal
			db.drops = append(db.drops, b.drops...)
			db.trimLocked()
			db.maybeCheckpointLocked()
		}
		close(b.done)
		db.cond.Broadcast()
	}
}

// writeWAL writes b as wal/<b.seq> create-only, resolving lost responses
// by reading the object back.
func (db *DB) writeWAL(b *batch) (int, error) {
	key := db.o.walKey(b.seq)
	hdr := encodeWALHeader(false, db.epoch, b.seq, b.id, b.n)
	// The header goes in the room reserved before the records: no copy of
	// the whole batch.
	off := walHeaderRoom - len(hdr)
	copy(b.buf[off:], hdr)
	data := b.buf[off:]
	var other walHeader
	var herr error
	_, err := db.o.putVerified(db.bgCtx, key, data, objstore.CreateOnly(), func(got []byte) bool {
		other, _, herr = decodeWALHeader(got)
		return herr == nil && other.batchID == b.id
	})
	switch {
	case err == nil:
		return len(data), nil
	case !errors.Is(err, objstore.ErrPrecondition):
		return 0, fmt.Errorf("kv: write %s: %w", key, err)
	case herr != nil:
		return 0, corrupt(key, herr)
	default:
		// A newer writer's fence took the slot: see doc.go, "Fencing".
		return 0, fmt.Errorf("%w: %s holds epoch %d's object (we are epoch %d)", ErrFenced, key, other.epoch, db.epoch)
	}
}

// Close makes non-durable commits durable, stops background work and
// releases the DB. It retries an unreachable store for up to
// Options.CloseTimeout.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed || db.closing {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closing = true
	last := db.lastBatchLocked()
	db.hurryLocked(last)
	db.mu.Unlock()
	db.ckptCancel() // a checkpoint in progress is abandoned, not waited for
	deadline, cancel := context.WithTimeout(context.Background(), db.opts.CloseTimeout)
	defer cancel()
	var err error
	if last != nil {
		select {
		case <-last.done:
			err = last.err
		case <-deadline.Done():
			err = fmt.Errorf("kv: close: pending commits not durable after %v", db.opts.CloseTimeout)
		}
	}
	db.mu.Lock()
	db.stopping = true
	db.cond.Broadcast()
	db.mu.Unlock()
	// Let pending deletions finish within the same deadline.
	idle := make(chan struct{})
	go func() { db.wg.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-deadline.Done():
	}
	db.bgCancel()
	<-idle
	db.mu.Lock()
	db.closed = true
	if db.err == nil || errors.Is(db.err, context.Canceled) {
		db.err = nil
		db.failLocked(ErrClosed)
	}
	db.mu.Unlock()
	if err != nil && !errors.Is(err, ErrFenced) {
		return err
	}
	db.opts.Logger.Info("kv: closed", "prefix", db.opts.Prefix, "epoch", db.epoch)
	return err
}

// abandon stops the DB like a crash would: no flush, background work
// cancelled, requests in flight may still land. Tests use it as the
// in-process equivalent of SIGKILL.
func (db *DB) abandon() {
	db.mu.Lock()
	db.closed, db.stopping = true, true
	db.failLocked(ErrClosed)
	db.cond.Broadcast()
	db.mu.Unlock()
	db.bgCancel()
}

// Stats returns the counters.
func (db *DB) Stats() Stats {
	db.mu.Lock()
	s := Stats{
		Keys:                      db.tree.Len(),
		MemtableBytes:             db.memBytes,
		WALObjectsSinceCheckpoint: int(db.walObjsTotal - db.ckptObjsBase),
		WALBytesSinceCheckpoint:   db.walBytesTotal - db.ckptBytesBase,
	}
	db.mu.Unlock()
	s.Commits = db.commits.Load()
	s.DurableCommits = db.durable.Load()
	s.WALPuts = db.walPuts.Load()
	s.WALBytes = db.walBytes.Load()
	s.Checkpoints = db.checkpoints.Load()
	s.Conflicts = db.conflicts.Load()
	s.ChunksWritten = db.chunksWritten.Load()
	s.ChunksReused = db.chunksReused.Load()
	s.LargeValuesWritten = db.larges.Load()
	s.HeldBatches = db.heldBatches.Load()
	s.FlushLatency = db.flushLat.get()
	s.Taken = db.opts.Clock.Now()
	return s
}

// newLargeName returns a fresh large-object name; the epoch prefix keeps
// names unique across writers and lets open-time collection skip ours.
func (db *DB) newLargeName() string {
	db.mu.Lock()
	defer db.mu.Unlock()
	n := db.largeNext
	db.largeNext++
	return fmt.Sprintf("%020d-%020d", db.epoch, n)
}

// epochOfName parses the epoch prefix of a chunk or large-object name.
func epochOfName(name string) (uint64, bool) {
	e, _, ok := strings.Cut(name, "-")
	if !ok || len(e) != 20 {
		return 0, false
	}
	var n uint64
	for _, c := range e {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// checkFlushOrderLocked asserts (invariants builds) that batches reach
// the WAL in commit order, each right after the previous one's commits,
// and never at or below a fence: WAL sequence order is commit order.
func (db *DB) checkFlushOrderLocked(b *batch) {
	if !invariants.Enabled {
		return
	}
	invariants.Check(db.flushedLast == 0 || b.first == db.flushedLast+1,
		"kv: WAL %d holds commits %d..%d but the previous WAL object ended at commit %d", b.seq, b.first, b.last, db.flushedLast)
	db.flushedLast = b.last
	for _, f := range db.fences {
		invariants.Check(b.seq > f, "kv: WAL write at sequence %d, at or below the fence at %d", b.seq, f)
	}
}
