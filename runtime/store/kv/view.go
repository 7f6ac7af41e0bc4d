package kv

import (
	"bytes"
	"context"

	"github.com/tidwall/btree"
)

// snapshot is an immutable tree (a copy-on-write clone) plus the means to
// read large values.
type snapshot struct {
	tree *btree.BTreeG[*entry]
	o    *objects
}

func (s snapshot) value(ctx context.Context, e *entry) ([]byte, error) {
	if e.large == nil {
		return e.val, nil
	}
	return s.o.fetchLarge(ctx, e.large)
}

func (s snapshot) lookup(key []byte) *entry {
	e, ok := s.tree.Get(&entry{key: key})
	if !ok {
		return nil
	}
	return e
}

func (s snapshot) get(ctx context.Context, key []byte) ([]byte, error) {
	e := s.lookup(key)
	if e == nil {
		return nil, notFound(key)
	}
	return s.value(ctx, e)
}

// each calls fn for the entries of r in r's order, honoring nothing but
// Start, End and Reverse (the caller applies Limit).
func (s snapshot) each(r Range, fn func(e *entry) bool) {
	if !r.Reverse {
		visit := func(e *entry) bool {
			if r.End != nil && bytes.Compare(e.key, r.End) >= 0 {
				return false
			}
			return fn(e)
		}
		if r.Start == nil {
			s.tree.Scan(visit)
		} else {
			s.tree.Ascend(&entry{key: r.Start}, visit)
		}
		return
	}
	visit := func(e *entry) bool {
		if r.End != nil && bytes.Compare(e.key, r.End) >= 0 {
			return true // Descend from End includes End itself
		}
		if r.Start != nil && bytes.Compare(e.key, r.Start) < 0 {
			return false
		}
		return fn(e)
	}
	if r.End == nil {
		s.tree.Reverse(visit)
	} else {
		s.tree.Descend(&entry{key: r.End}, visit)
	}
}

// scan implements Scan over the snapshot.
func (s snapshot) scan(ctx context.Context, r Range, fn func(key, value []byte) (bool, error)) error {
	var err error
	n := 0
	s.each(r, func(e *entry) bool {
		if r.Limit > 0 && n >= r.Limit {
			return false
		}
		if err = ctx.Err(); err != nil {
			return false
		}
		var v []byte
		if v, err = s.value(ctx, e); err != nil {
			return false
		}
		n++
		var more bool
		more, err = fn(e.key, v)
		return more && err == nil
	})
	return err
}
