package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/runtime/objstore"
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

// Tx is a transaction: reads see a snapshot taken at Begin plus the
// transaction's own writes; writes are buffered until Commit, which fails
// with ErrConflict if a key read or a range scanned changed since the
// snapshot (optimistic, serializable). A Tx is not safe for concurrent use.
type Tx struct {
	db       *DB
	snap     snapshot
	snapSeq  uint64
	writes   *btree.BTreeG[*write]
	reads    map[string]struct{}
	ranges   []Range
	done     bool
	readOnly bool
	err      error // why the Tx is unusable from the start
	// pinned reports that snap is taken and registered. Begin pins at
	// once; Update's transactions pin at their first read, so write-only
	// ones never copy the tree.
	pinned bool
}

// ensureSnap takes the snapshot of a lazily started transaction.
func (tx *Tx) ensureSnap() error {
	if tx.pinned {
		return nil
	}
	s, seq, err := tx.db.acquire()
	if err != nil {
		return err
	}
	tx.snap, tx.snapSeq, tx.pinned = s, seq, true
	return nil
}

// unpin releases the snapshot, if any.
func (tx *Tx) unpin() {
	if tx.pinned {
		tx.pinned = false
		tx.db.release(tx.snapSeq)
	}
}

func writeLess(a, b *write) bool { return bytes.Compare(a.key, b.key) < 0 }

func (tx *Tx) check() error {
	if tx.err != nil {
		return tx.err
	}
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
	if tx.reads == nil {
		tx.reads = map[string]struct{}{}
	}
	tx.reads[string(key)] = struct{}{}
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
	if err := tx.check(); err != nil {
		return nil, err
	}
	if err := tx.ensureSnap(); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if w := tx.buffered(key); w != nil {
		switch w.kind {
		case writePut:
			return w.value, nil
		case writeDelete:
			return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
		case writeAdd:
			tx.recordRead(key)
			return tx.applyAdd(ctx, w, tx.snap.lookup(key))
		}
	}
	tx.recordRead(key)
	return tx.snap.get(ctx, key)
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
	tx.setWrite(&write{key: bytes.Clone(key), kind: writePut, value: append(make([]byte, 0, len(value)), value...)})
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
// commit is in the store. ErrConflict means nothing was applied; another
// error after the commit was applied says so, and the commit may still
// become durable.
func (tx *Tx) Commit(ctx context.Context) error { return tx.commit(ctx, true) }

// CommitNonDurable commits and returns at once: the writes are visible to
// every later reader and become durable with the next WAL object; only a
// crash before that loses them (and every later commit with them).
func (tx *Tx) CommitNonDurable(ctx context.Context) error { return tx.commit(ctx, false) }

// Rollback discards the transaction. It is safe to call after Commit.
func (tx *Tx) Rollback() {
	if tx.done {
		return
	}
	tx.done = true
	tx.unpin()
}

func (tx *Tx) commit(ctx context.Context, durable bool) error {
	if err := tx.check(); err != nil {
		return err
	}
	tx.done = true
	db := tx.db
	if tx.writes == nil || tx.writes.Len() == 0 {
		tx.unpin()
		return nil
	}
	larges, err := tx.writeLarges(ctx)
	if err != nil {
		tx.unpin()
		return err
	}
	db.mu.Lock()
	b, err := db.commitLocked(tx, larges)
	db.mu.Unlock()
	tx.unpin()
	if err != nil {
		db.dropLarges(larges)
		return err
	}
	if !durable {
		return nil
	}
	return waitBatch(ctx, b)
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
