package kv

import "github.com/tidwall/btree"

// compactGroup is how many consecutive entries (in key order) share one
// allocation in a compacted tree.
const compactGroup = 1024

// compactTree returns a tree holding tree's entries with their keys and
// values copied out of the objects they were decoded from.
//
// Why: a decoded entry's key and value are slices of the checkpoint chunk
// or WAL object it came from, and replay allocates the entries of one
// WAL object together. One surviving entry therefore keeps its whole WAL
// object (every later-deleted record in it) and its object's entry slab
// alive: on a store whose history was mostly deleted since the
// checkpoint (sealed runs), that is about a kilobyte of heap per live
// key. After compaction a live entry costs its key, its value and the
// entry itself. Consecutive entries share an allocation per
// compactGroup, so a deleted key range (an expired segment's rows, which
// sort together) frees its memory once the whole group is gone.
func compactTree(tree *btree.BTreeG[*entry]) *btree.BTreeG[*entry] {
	out := newTree()
	group := make([]*entry, 0, compactGroup)
	flush := func() {
		size := 0
		for _, e := range group {
			size += len(e.key) + len(e.val)
		}
		arena := make([]byte, 0, size)
		slab := make([]entry, len(group))
		for i, e := range group {
			n := &slab[i]
			arena, n.key = appendOwned(arena, e.key)
			if e.val != nil {
				arena, n.val = appendOwned(arena, e.val)
			}
			if e.large != nil {
				ref := *e.large
				n.large = &ref
			}
			out.Load(n) // in key order: appends to the last leaf
		}
		group = group[:0]
	}
	tree.Scan(func(e *entry) bool {
		group = append(group, e)
		if len(group) == compactGroup {
			flush()
		}
		return true
	})
	flush()
	return out
}

// appendOwned appends b to arena (which has room for it) and returns the
// arena and the appended bytes, capacity-capped so an append to them
// never writes into the next entry's bytes.
func appendOwned(arena, b []byte) ([]byte, []byte) {
	start := len(arena)
	arena = append(arena, b...)
	return arena, arena[start:len(arena):len(arena)]
}
