package kv

import (
	"bytes"
	"sort"
)

// dirtySet records which chunks of the current manifest hold a key written
// since the last checkpoint snapshot, one flag per chunk, so the next
// checkpoint rewrites those and reuses the rest.
//
// Why flags and not the written keys: a key written by Tx.Put shares its
// allocation with the value, so a list of written keys kept every value
// written since the last checkpoint alive (overwritten and deleted ones
// too: up to CheckpointWALBytes of dead values, plus the list itself),
// which is most of the writer's heap when runs are written and sealed
// away between checkpoints. The flags cost one bool per chunk and no
// allocation per write.
type dirtySet struct {
	// chunks are the manifest's chunks the flags index; chunk i covers
	// [chunks[i].first, chunks[i+1].first), the first reaching down to
	// the smallest key and the last up to the largest.
	chunks []chunkInfo
	// flags has one entry per chunk (one for the whole key space when
	// there are no chunks).
	flags []bool
	any   bool
}

func newDirtySet(chunks []chunkInfo) dirtySet {
	return dirtySet{chunks: chunks, flags: make([]bool, max(len(chunks), 1))}
}

// chunkOf is the index of the chunk whose range holds key.
func chunkOf(chunks []chunkInfo, key []byte) int {
	return max(sort.Search(len(chunks), func(i int) bool { return bytes.Compare(chunks[i].first, key) > 0 })-1, 0)
}

// mark records a write of key. It keeps no reference to key.
func (d *dirtySet) mark(key []byte) {
	d.flags[chunkOf(d.chunks, key)] = true
	d.any = true
}

// remap returns the set over next (the chunks of the manifest that
// replaces d's) in which every chunk whose range overlaps a dirty chunk of
// d is dirty: a superset of the chunks of next holding a key d saw
// written, which is what a checkpoint needs (rewriting a clean chunk only
// costs its PUT).
func (d dirtySet) remap(next []chunkInfo) dirtySet {
	out := newDirtySet(next)
	for i, dirty := range d.flags {
		if !dirty {
			continue
		}
		lo := 0
		if i > 0 {
			lo = chunkOf(next, d.chunks[i].first)
		}
		hi := len(out.flags) - 1
		if i+1 < len(d.chunks) {
			// The last chunk of next starting below the end of chunk i.
			end := d.chunks[i+1].first
			hi = max(sort.Search(len(next), func(j int) bool { return bytes.Compare(next[j].first, end) >= 0 })-1, 0)
		}
		for j := lo; j <= hi; j++ {
			out.flags[j] = true
		}
		out.any = true
	}
	return out
}

// withSmallNeighbors returns the chunks a checkpoint rewrites: the dirty
// ones plus small clean neighbors of dirty ones, so small chunks merge
// over time. d must index chunks.
func (d dirtySet) withSmallNeighbors(target int) []bool {
	out := make([]bool, len(d.chunks))
	copy(out, d.flags)
	for i := range d.chunks {
		if !out[i] && d.chunks[i].size < int64(target/4) &&
			((i > 0 && out[i-1]) || (i+1 < len(d.chunks) && out[i+1])) {
			out[i] = true
		}
	}
	return out
}
