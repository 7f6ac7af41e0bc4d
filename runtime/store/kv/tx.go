package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

type writeKind uint8

const (
	writePut writeKind = iota + 1
	writeDelete
	writeAdd
)

// write is one buffered write of a transaction.
type write struct {
	key   []byte
	kind  writeKind
	value []byte // writePut
	delta int64  // writeAdd
}

// errReadOnly reports a write in a View transaction.
var errReadOnly = errors.New("kv: write in a read-only (View) transaction")

// Tx is a transaction: reads see a snapshot taken at its first read plus
// the transaction's own writes; writes are buffered until Commit, which
// fails with ErrConflict if a key read or a range scanned changed since the
// snapshot (optimistic, serializable). A read of a key changed since the
// snapshot fails with ErrConflict at once. A Tx is not safe for concurrent
// use.
type Tx struct {
	db       *DB
	snap     snapshot
	snapSeq  uint64
	writes   *btree.BTreeG[*write]
	reads    []string // keys read (repeats allowed: transactions are small)
	ranges   []Range
	done     bool
	readOnly bool
	// committer is the registered committer a durable commit counts for
	// (from the commit's context).
	committer *Committer
	// pinned reports that the read point snapSeq is registered as a live
	// snapshot, which keeps every later write to a key tracked for
	// conflicts (and large values alive). It is set at the first read, so
	// write-only transactions register nothing.
	pinned bool
	// hasTree reports that snap.tree is a copy-on-write clone at snapSeq.
	// Only scans take one: point reads look keys up in the live tree and
	// fail with ErrConflict when a commit after snapSeq changed the key,
	// which is what the commit would report anyway. Not cloning spares the
	// next commit the copying of every tree node on its write paths.
	hasTree bool
}

// pin registers the transaction's read point at the latest commit.
func (tx *Tx) pin() error {
	if tx.pinned {
		return nil
	}
	db := tx.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.usableLocked(); err != nil {
		return err
	}
	db.pinLocked(db.commitSeq)
	tx.snapSeq, tx.pinned, tx.snap.o = db.commitSeq, true, db.o
	return nil
}

// ensureSnap gives the transaction a tree snapshot, for scans. When point
// reads came first and commits followed, the read point moves to the
// latest commit, after checking that none of those commits changed a key
// read so far: the transaction then reads as if it had started there.
func (tx *Tx) ensureSnap() error {
	if tx.hasTree {
		return nil
	}
	db := tx.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.usableLocked(); err != nil {
		return err
	}
	switch {
	case !tx.pinned:
		db.pinLocked(db.commitSeq)
		tx.pinned = true
	case tx.snapSeq != db.commitSeq:
		if k, ok := db.conflictLocked(tx); ok {
			db.conflicts.Add(1)
			return fmt.Errorf("%w: %s changed after the transaction's snapshot", ErrConflict, k)
		}
		db.pinLocked(db.commitSeq)
		db.unpinLocked(tx.snapSeq)
	}
	tx.snapSeq, tx.hasTree = db.commitSeq, true
	tx.snap = snapshot{tree: db.snapshotLocked(), o: db.o}
	return nil
}

// lookup returns key's entry as of snapSeq (nil when absent), or
// ErrConflict when a commit after snapSeq wrote key.
func (tx *Tx) lookup(key []byte) (*entry, error) {
	if tx.hasTree {
		return tx.snap.lookup(key), nil
	}
	db := tx.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if err := db.usableLocked(); err != nil {
		return nil, err
	}
	if tx.snapSeq < db.commitSeq {
		if w, ok := db.recent.Get(recentWrite{key: string(key)}); ok && w.seq > tx.snapSeq {
			db.conflicts.Add(1)
			return nil, fmt.Errorf("%w: key %q changed after the transaction's snapshot", ErrConflict, key)
		}
	}
	e, _ := db.tree.Get(&entry{key: key})
	return e, nil
}

// unpin releases the snapshot, if any.
func (tx *Tx) unpin() {
	if tx.pinned {
		tx.pinned, tx.hasTree, tx.snap.tree = false, false, nil
		tx.db.release(tx.snapSeq)
	}
}

func writeLess(a, b *write) bool { return bytes.Compare(a.key, b.key) < 0 }

func (tx *Tx) check() error {
	if tx.done {
		return ErrTxDone
	}
	return nil
}

func (tx *Tx) checkWrite(key []byte) error {
	if err := tx.check(); err != nil {
		return err
	}
	if tx.readOnly {
		return errReadOnly
	}
	return checkKey(key)
}

func (tx *Tx) buffered(key []byte) *write {
	if tx.writes == nil {
		return nil
	}
	w, _ := tx.writes.Get(&write{key: key})
	return w
}

func (tx *Tx) setWrite(w *write) {
	if tx.writes == nil {
		tx.writes = btree.NewBTreeGOptions(writeLess, btree.Options{NoLocks: true})
	}
	tx.writes.Set(w)
}

func (tx *Tx) recordRead(key []byte) {
	tx.reads = append(tx.reads, string(key))
}

func decodeCounter(key, v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("kv: key %q holds %d bytes, not an 8-byte counter", key, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// applyAdd returns the value of counter w applied to the snapshot entry e
// (nil = absent).
func (tx *Tx) applyAdd(ctx context.Context, w *write, e *entry) ([]byte, error) {
	var base int64
	if e != nil {
		v, err := tx.snap.value(ctx, e)
		if err != nil {
			return nil, err
		}
		if base, err = decodeCounter(w.key, v); err != nil {
			return nil, err
		}
	}
	return binary.BigEndian.AppendUint64(nil, uint64(base+w.delta)), nil
}

// Get returns key's value as this transaction sees it, or ErrNotFound. A
// value not written by the transaction itself is recorded as read.
func (tx *Tx) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, found, err := tx.Lookup(ctx, key)
	if err == nil && !found {
		return nil, notFound(key)
	}
	return v, err
}

// Lookup is Get reporting an absent key as found == false instead of an
// ErrNotFound error, for existence checks on hot paths.
func (tx *Tx) Lookup(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	if err := tx.check(); err != nil {
		return nil, false, err
	}
	if err := tx.pin(); err != nil {
		return nil, false, err
	}
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	if w := tx.buffered(key); w != nil {
		switch w.kind {
		case writePut:
			return w.value, true, nil
		case writeDelete:
			return nil, false, nil
		case writeAdd:
			tx.recordRead(key)
			e, err := tx.lookup(key)
			if err != nil {
				return nil, false, err
			}
			v, err := tx.applyAdd(ctx, w, e)
			return v, err == nil, err
		}
	}
	tx.recordRead(key)
	e, err := tx.lookup(key)
	if err != nil || e == nil {
		return nil, false, err
	}
	v, err := tx.snap.value(ctx, e)
	return v, err == nil, err
}

// Counter returns the counter at key (0 if absent), including this
// transaction's own adds, and records the read.
func (tx *Tx) Counter(ctx context.Context, key []byte) (int64, error) {
	v, err := tx.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return decodeCounter(key, v)
}

// Put buffers key=value; both are copied.
func (tx *Tx) Put(key, value []byte) error {
	if err := tx.checkWrite(key); err != nil {
		return err
	}
	if len(value) > tx.db.opts.MaxValueSize {
		return fmt.Errorf("%w: value of %d bytes for key %q exceeds MaxValueSize %d", ErrTooLarge, len(value), key, tx.db.opts.MaxValueSize)
	}
	// One allocation holds both copies.
	buf := make([]byte, len(key)+len(value))
	n := copy(buf, key)
	copy(buf[n:], value)
	tx.setWrite(&write{key: buf[:n:n], kind: writePut, value: buf[n:]})
	return nil
}

// Delete buffers the removal of key.
func (tx *Tx) Delete(key []byte) error {
	if err := tx.checkWrite(key); err != nil {
		return err
	}
	tx.setWrite(&write{key: bytes.Clone(key), kind: writeDelete})
	return nil
}

// Add buffers a commutative add to the counter at key. It reads nothing and
// never causes a conflict; the sum is computed at commit against the latest
// state. Counters are 8-byte big-endian int64 values.
func (tx *Tx) Add(key []byte, delta int64) error {
	if err := tx.checkWrite(key); err != nil {
		return err
	}
	w := tx.buffered(key)
	switch {
	case w == nil:
		tx.setWrite(&write{key: bytes.Clone(key), kind: writeAdd, delta: delta})
	case w.kind == writeAdd:
		w.delta += delta
	case w.kind == writeDelete:
		tx.setWrite(&write{key: w.key, kind: writePut, value: binary.BigEndian.AppendUint64(nil, uint64(delta))})
	default:
		n, err := decodeCounter(key, w.value)
		if err != nil {
			return err
		}
		tx.setWrite(&write{key: w.key, kind: writePut, value: binary.BigEndian.AppendUint64(nil, uint64(n+delta))})
	}
	return nil
}

// Scan calls fn for each key in r as this transaction sees it, in r's
// order, until fn returns false or an error (which Scan returns). It records
// the part of r actually scanned for conflict detection.
func (tx *Tx) Scan(ctx context.Context, r Range, fn func(key, value []byte) (bool, error)) error {
	if err := tx.check(); err != nil {
		return err
	}
	if err := tx.ensureSnap(); err != nil {
		return err
	}
	var ws []*write
	if tx.writes != nil {
		if r.Reverse {
			tx.writes.Reverse(func(w *write) bool {
				if r.contains(w.key) {
					ws = append(ws, w)
				}
				return true
			})
		} else {
			tx.writes.Ascend(&write{key: r.Start}, func(w *write) bool {
				if r.End != nil && bytes.Compare(w.key, r.End) >= 0 {
					return false
				}
				ws = append(ws, w)
				return true
			})
		}
	}
	var (
		n       int
		last    []byte
		stopped bool
		err     error
		i       int
	)
	emit := func(key, val []byte) bool {
		n++
		last = key
		more, ferr := fn(key, val)
		if ferr != nil {
			err = ferr
		}
		if !more || ferr != nil || (r.Limit > 0 && n >= r.Limit) {
			stopped = true
			return false
		}
		return true
	}
	emitWrite := func(w *write, base *entry) bool {
		switch w.kind {
		case writeDelete:
			return true
		case writeAdd:
			v, aerr := tx.applyAdd(ctx, w, base)
			if aerr != nil {
				err, stopped = aerr, true
				return false
			}
			return emit(w.key, v)
		default:
			return emit(w.key, w.value)
		}
	}
	before := func(a, b []byte) bool {
		if r.Reverse {
			return bytes.Compare(a, b) > 0
		}
		return bytes.Compare(a, b) < 0
	}
	tx.snap.each(r, func(e *entry) bool {
		if cerr := ctx.Err(); cerr != nil {
			err, stopped = cerr, true
			return false
		}
		for i < len(ws) && before(ws[i].key, e.key) {
			i++
			if !emitWrite(ws[i-1], nil) {
				return false
			}
		}
		if i < len(ws) && bytes.Equal(ws[i].key, e.key) {
			i++
			return emitWrite(ws[i-1], e)
		}
		v, verr := tx.snap.value(ctx, e)
		if verr != nil {
			err, stopped = verr, true
			return false
		}
		return emit(e.key, v)
	})
	for !stopped && i < len(ws) {
		i++
		if !emitWrite(ws[i-1], nil) {
			break
		}
	}
	scanned := Range{Start: r.Start, End: r.End}
	if stopped && last != nil {
		if r.Reverse {
			scanned.Start = last
		} else {
			scanned.End = append(bytes.Clone(last), 0)
		}
	}
	tx.ranges = append(tx.ranges, scanned)
	return err
}

// Commit commits durably: it returns after the WAL object holding the
// commit is in the store. An error wrapping ErrCommitUncertain means the
// commit was applied (later reads see it) but may or may not become
// durable; any other error (ErrConflict among them) means nothing was
// applied.
func (tx *Tx) Commit(ctx context.Context) error {
	d, err := tx.CommitAsync(ctx)
	if err != nil {
		return err
	}
	return d.Wait(ctx)
}

// CommitNonDurable commits and returns at once: the writes are visible to
// every later reader and become durable with the next WAL object; only a
// crash before that loses them (and every later commit with them). An
// error means nothing was applied.
func (tx *Tx) CommitNonDurable(ctx context.Context) error {
	_, err := tx.commit(ctx, false)
	return err
}

// CommitAsync applies the commit like CommitNonDurable and returns a handle
// to wait for exactly the WAL object that holds it, so a caller can act on
// the applied commit (publish it in memory) before waiting. Waiting costs
// nothing extra: the commit rides the WAL write it joined. An error means
// nothing was applied.
func (tx *Tx) CommitAsync(ctx context.Context) (Durability, error) {
	b, err := tx.commit(ctx, true)
	return Durability{b: b}, err
}

// Durability is the pending durability of one applied commit.
type Durability struct{ b *batch }

// Wait returns when the commit is durable. Every error wraps
// ErrCommitUncertain (and its cause): the commit is applied and may still
// become durable, or may be lost with the process.
func (d Durability) Wait(ctx context.Context) error { return waitBatch(ctx, d.b) }

// Done is closed once the WAL write holding the commit ended, well or
// not (Err tells); it is closed already for a commit that wrote nothing.
func (d Durability) Done() <-chan struct{} {
	if d.b == nil {
		return closedChan
	}
	return d.b.done
}

// Commits returns, once Done is closed, how many commits the WAL object
// holding this one carries (its group-commit batch), so a caller can
// charge itself 1/Commits of that PUT; 0 for a commit that wrote nothing
// or whose write is not done.
func (d Durability) Commits() int {
	if d.b == nil {
		return 0
	}
	select {
	case <-d.b.done:
		return d.b.n
	default:
		return 0
	}
}

// Err returns, once Done is closed, nil when the commit is durable, else
// the failure (wrapping ErrCommitUncertain).
func (d Durability) Err() error {
	if d.b == nil {
		return nil
	}
	select {
	case <-d.b.done:
		return waitBatch(context.Background(), d.b)
	default:
		return fmt.Errorf("%w: the WAL write is still in progress", ErrCommitUncertain)
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Rollback discards the transaction. It is safe to call after Commit.
func (tx *Tx) Rollback() {
	if tx.done {
		return
	}
	tx.done = true
	tx.unpin()
}

// commit applies tx and returns the batch its WAL record joined (nil when
// tx wrote nothing).
// urgent marks a commit someone will wait for (see batch.urgent).
func (tx *Tx) commit(ctx context.Context, urgent bool) (*batch, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	tx.done = true
	db := tx.db
	if tx.writes == nil || tx.writes.Len() == 0 {
		tx.unpin()
		return nil, nil
	}
	larges, err := tx.writeLarges(ctx)
	if err != nil {
		tx.unpin()
		return nil, err
	}
	tx.committer = committerFrom(ctx)
	db.mu.Lock()
	b, err := db.commitLocked(tx, larges, urgent)
	db.mu.Unlock()
	tx.unpin()
	if err != nil {
		db.dropLarges(larges)
		return nil, err
	}
	return b, nil
}

// writeLarges writes the values over the threshold to their own objects,
// before the commit that references them.
func (tx *Tx) writeLarges(ctx context.Context) (map[string]largeRef, error) {
	db := tx.db
	var larges map[string]largeRef
	var err error
	tx.writes.Scan(func(w *write) bool {
		if w.kind != writePut || len(w.value) <= db.opts.LargeValueThreshold {
			return true
		}
		ref := largeRef{name: db.newLargeName(), size: int64(len(w.value))}
		if _, err = db.o.put(ctx, db.o.largeKey(ref.name), w.value, objstore.PutOptions{}); err != nil {
			err = fmt.Errorf("kv: write large value of key %q: %w", w.key, err)
			return false
		}
		db.larges.Add(1)
		if larges == nil {
			larges = map[string]largeRef{}
		}
		larges[string(w.key)] = ref
		return true
	})
	if err != nil {
		db.dropLarges(larges)
		return nil, err
	}
	return larges, nil
}

// dropLarges deletes large objects no commit references.
func (db *DB) dropLarges(larges map[string]largeRef) {
	if len(larges) == 0 {
		return
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.stopping {
		return // the next Open collects them
	}
	db.wg.Add(1)
	go func() {
		defer db.wg.Done()
		for _, ref := range larges {
			if err := db.o.del(db.bgCtx, db.o.largeKey(ref.name)); err != nil {
				db.opts.Logger.Warn("kv: delete unused large value failed; it is collected at the next open", "object", ref.name, "err", err)
			}
		}
	}()
}
