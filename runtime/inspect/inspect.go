package inspect

import (
	"context"
	"fmt"
)

// Cursor walks one tier's ids in a Merge's order, from past its start.
type Cursor[C any] interface {
	// Peek returns the next id and the tier's copy of it, ok false at the
	// end. Peek again, before Next, returns the same.
	Peek(ctx context.Context) (id string, copy C, ok bool, err error)
	// Next moves past the id Peek returned.
	Next()
}

// Tier is one place holding copies of runs.
type Tier[C any] struct {
	// Cursor walks the tier; nil when it is not walked: a tally counts
	// it, or the caller's filter rejects every copy it holds (Probe then
	// reads it for the ids older tiers give).
	Cursor Cursor[C]
	// Partial says Cursor leaves out some of the tier's ids, only ones
	// whose copy there the caller's filter rejects: an id it does not
	// give may still be held there.
	Partial bool
	// Counted says the tier is counted by the caller's tally, not walked
	// (Cursor is nil): see Resolved.Hidden.
	Counted bool
	// Probe returns the tier's copy of id, ok false when it holds none.
	// Needed by Lookup, and by Merge for a tier whose Cursor is nil or
	// Partial when an older tier gives an id; Merge calls it in its id
	// order.
	Probe func(ctx context.Context, id string) (copy C, ok bool, err error)
}

// Resolved is an id and its newest copy.
type Resolved[C any] struct {
	ID   string
	Copy C
	// Tier is the index of the tier Copy is from.
	Tier int
	// Hidden are the copies of the id in Counted tiers older than Tier,
	// the newest first: a tally counted them, and they are not the run.
	Hidden []C
}

// Merge yields every id its walked tiers hold, once, in id order
// (descending with Desc), with its newest copy: the copy of the first
// tier, in Tiers order (newest first), holding the id. An id whose newest
// copy is in a tier not walked is not yielded: a tally counted it, or the
// caller's filter rejects it.
type Merge[C any] struct {
	// Tiers are the tiers, the newest first; their cursors walk in
	// Merge's order.
	Tiers []Tier[C]
	Desc  bool
}

// Before reports whether id a comes before id b in ascending order, or
// descending with desc (newest first for ULIDs).
func Before(desc bool, a, b string) bool {
	if desc {
		return a > b
	}
	return a < b
}

// Next returns the next id and its newest copy, ok false at the end. The
// caller filters what Next returns: every filter applies to the newest
// copy, never to an older one.
func (m *Merge[C]) Next(ctx context.Context) (Resolved[C], bool, error) {
	for {
		first, found := "", false
		for _, t := range m.Tiers {
			if t.Cursor == nil {
				continue
			}
			id, _, ok, err := t.Cursor.Peek(ctx)
			if err != nil {
				return Resolved[C]{}, false, err
			}
			if ok && (!found || Before(m.Desc, id, first)) {
				first, found = id, true
			}
		}
		if !found {
			return Resolved[C]{}, false, nil
		}
		r, ok, err := m.resolve(ctx, first)
		if err != nil || ok {
			return r, ok, err
		}
	}
}

// resolve moves every cursor standing at id past it and returns id's
// newest copy; ok is false when a tier not walked holds it.
func (m *Merge[C]) resolve(ctx context.Context, id string) (Resolved[C], bool, error) {
	r := Resolved[C]{ID: id}
	found, unwalked := false, false
	for i, t := range m.Tiers {
		var c C
		held := false
		if t.Cursor != nil {
			cid, cc, ok, err := t.Cursor.Peek(ctx)
			if err != nil {
				return r, false, err
			}
			if ok && cid == id {
				c, held = cc, true
				t.Cursor.Next()
			}
		}
		// A tier not walked whole is read for the id while it may hold
		// the newest copy, or a copy a tally counted.
		if !held && (t.Cursor == nil || t.Partial) && !unwalked && (!found || t.Counted) {
			if t.Probe == nil {
				return r, false, fmt.Errorf("inspect: tier %d is not walked whole and has no point read", i)
			}
			var err error
			if c, held, err = t.Probe(ctx, id); err != nil {
				return r, false, err
			}
		}
		switch {
		case !held:
		case !found:
			r.Copy, r.Tier, found, unwalked = c, i, true, t.Cursor == nil
		case t.Counted && !unwalked:
			r.Hidden = append(r.Hidden, c)
		}
	}
	return r, found && !unwalked, nil
}

// Lookup returns id's newest copy in tiers (newest first) by their point
// reads, and the index of its tier; ok is false when none holds it.
func Lookup[C any](ctx context.Context, tiers []Tier[C], id string) (copy C, tier int, ok bool, err error) {
	for i, t := range tiers {
		if t.Probe == nil {
			return copy, 0, false, fmt.Errorf("inspect: tier %d has no point read", i)
		}
		if copy, ok, err = t.Probe(ctx, id); err != nil || ok {
			return copy, i, ok, err
		}
	}
	return copy, 0, false, nil
}
