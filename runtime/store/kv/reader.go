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
	base      uint64 // first live WAL sequence of the checkpoint tree came from
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
	r := &Reader{o: o, opts: opts, tree: newTree(), base: 1, next: 1}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Refresh catches up with the writer: a new checkpoint is loaded if the WAL
// the Reader would need was deleted, and new WAL objects are replayed.
//
// A checkpoint deletes the WAL objects below its first live sequence after
// its manifest switch, so a Reader can find an object missing under it. It
// tells that race from a damaged store by reading the manifest again: if
// the first live sequence moved past the missing object, it starts over
// from the new checkpoint; if not, nobody may delete that object and
// Refresh fails with ErrCorrupt naming it and the last good one. A chunk
// of the manifest it read missing is judged the same way.
func (r *Reader) Refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	tree, etag, base, next, maxEpoch := r.tree.Copy(), r.etag, r.base, r.next, r.maxEpoch
	r.mu.Unlock()

	// An empty listing cannot tell "nothing new" from "deleted" either, so
	// after the replay the manifest is read again: if a checkpoint moved
	// past what we replayed, start over from it.
	m, newEtag, err := r.o.readManifest(ctx)
	if err != nil {
		return err
	}
	const attempts = 10 // checkpoints racing one Refresh; then publish the consistent prefix
	var rp *replayer
	for attempt := 1; ; attempt++ {
		t, b, n, me := tree, base, next, maxEpoch
		if m != nil && newEtag != etag && m.firstLiveWAL > next {
			t, err = r.o.loadCheckpoint(ctx, m)
			if errors.Is(err, objstore.ErrNotExist) {
				m2, etag2, rerr := r.o.readManifest(ctx)
				if rerr != nil {
					return rerr
				}
				if etag2 == newEtag || attempt >= attempts {
					return err // a chunk of the current manifest is gone: ErrCorrupt
				}
				m, newEtag = m2, etag2
				continue
			}
			if err != nil {
				return err
			}
			b, n, me = m.firstLiveWAL, m.firstLiveWAL, 0
		}
		if t == tree {
			t = tree.Copy()
		}
		rp = &replayer{o: r.o, tree: t, base: b, next: n, maxEpoch: me}
		rerr := rp.replayAll(ctx)
		var gap *gapError
		if rerr != nil && !errors.As(rerr, &gap) {
			return rerr
		}
		m2, etag2, err := r.o.readManifest(ctx)
		if err != nil {
			return err
		}
		if gap != nil && (m2 == nil || m2.firstLiveWAL <= gap.missing) {
			return rp.gapCorrupt(gap)
		}
		if attempt >= attempts || m2 == nil || (gap == nil && (etag2 == newEtag || m2.firstLiveWAL <= rp.next)) {
			break
		}
		m, newEtag = m2, etag2
	}
	tree = rp.tree
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tree, r.etag, r.base, r.next, r.maxEpoch = tree, newEtag, rp.base, rp.next, rp.maxEpoch
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
