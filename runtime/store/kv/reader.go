package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tidwall/btree"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Reader is a read-only view of a store for a process other than the
// writer. It reads the manifest, chunks and WAL and never writes, so it
// never disturbs the writer. Its state is a prefix of the writer's durable
// commit history; Refresh moves it forward. It is safe for concurrent use.
type Reader struct {
	o    *objects
	opts Options

	refreshMu sync.Mutex // one Refresh at a time
	mu        sync.RWMutex
	tree      *btree.BTreeG[*entry] // immutable once published
	etag      string
	next      uint64 // next WAL sequence to apply
	maxEpoch  uint64
	closed    bool
}

// OpenReader opens a read-only view of the store at its latest durable
// state. A store that does not exist yet reads as empty.
func OpenReader(ctx context.Context, store objstore.Store, opts Options) (*Reader, error) {
	opts = opts.withDefaults()
	o, err := newObjects(store, opts)
	if err != nil {
		return nil, err
	}
	r := &Reader{o: o, opts: opts, tree: newTree(), next: 1}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Refresh catches up with the writer: a new checkpoint is loaded if the WAL
// the Reader would need was deleted, and new WAL objects are replayed.
func (r *Reader) Refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	tree, etag, next, maxEpoch := r.tree.Copy(), r.etag, r.next, r.maxEpoch
	r.mu.Unlock()

	// A checkpoint may delete the WAL objects we are about to read, and an
	// empty listing cannot tell "nothing new" from "deleted". So after the
	// replay the manifest is read again: if a checkpoint moved past what
	// we replayed, start over from it.
	m, newEtag, err := r.o.readManifest(ctx)
	if err != nil {
		return err
	}
	var rp *replayer
	for attempt := 1; ; attempt++ {
		t, n, me := tree, next, maxEpoch
		if m != nil && newEtag != etag && m.firstLiveWAL > next {
			t, err = r.o.loadCheckpoint(ctx, m)
			if errors.Is(err, objstore.ErrNotExist) && attempt < 10 {
				if m, newEtag, err = r.o.readManifest(ctx); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			n, me = m.firstLiveWAL, 0
		}
		if t == tree {
			t = tree.Copy()
		}
		rp = &replayer{o: r.o, tree: t, next: n, maxEpoch: me}
		if err := rp.replayAll(ctx); err != nil {
			return err
		}
		m2, etag2, err := r.o.readManifest(ctx)
		if err != nil {
			return err
		}
		if attempt >= 10 || m2 == nil || (!rp.vanished && (etag2 == newEtag || m2.firstLiveWAL <= rp.next)) {
			break
		}
		m, newEtag = m2, etag2
	}
	tree = rp.tree
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tree, r.etag, r.next, r.maxEpoch = tree, newEtag, rp.next, rp.maxEpoch
	return nil
}

func (r *Reader) snap() (snapshot, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return snapshot{}, ErrClosed
	}
	return snapshot{tree: r.tree, o: r.o}, nil
}

// Get returns key's value in the Reader's state, or ErrNotFound. A large
// value the writer has since dropped fails with an error wrapping
// objstore.ErrNotExist; Refresh and retry.
func (r *Reader) Get(ctx context.Context, key []byte) ([]byte, error) {
	s, err := r.snap()
	if err != nil {
		return nil, err
	}
	return s.get(ctx, key)
}

// Scan calls fn for each key in rg of the Reader's state, in rg's order,
// until fn returns false or an error (which Scan returns).
func (r *Reader) Scan(ctx context.Context, rg Range, fn func(key, value []byte) (bool, error)) error {
	s, err := r.snap()
	if err != nil {
		return err
	}
	return s.scan(ctx, rg, fn)
}

// Close releases the Reader.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("kv: reader: %w", ErrClosed)
	}
	r.closed = true
	r.tree = nil
	return nil
}
