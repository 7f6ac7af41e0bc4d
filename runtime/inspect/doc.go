// Package inspect is the read model of runs: the one rule by which a
// listing, a count and a status read decide which copy of a run id is
// the run. A run id can be held in several tiers at once (an id reused
// after its run ended): the live run records, the ended runs' results
// retained in the KV, and sealed segments, newest tier first. Of the
// copies of an id, the copy in the newest tier holding it is the run;
// every filter (state, label, cursor, page) is applied to that copy
// alone, after it is resolved, so an older copy is never listed, counted
// or reported in its place.
//
// Merge walks the tiers' cursors side by side in id order (or its
// reverse) and yields each id once, with its newest copy. A tier may skip
// reads the caller's filter makes useless: its cursor may leave out the
// copies the filter rejects (Tier.Partial; a label index), or it is not
// walked at all when the filter rejects every copy it holds. Such a tier
// may still hold a newer copy of an id an older tier gives, so it is
// asked by a point read (Tier.Probe) then, and an id whose newest copy it
// holds is not yielded. A tier counted by a tally (Tier.Counted) is not
// walked either: each yielded id reports the copy of it the tally
// counted (Resolved.Hidden), which the caller takes back. Lookup resolves
// one id by point reads alone.
//
// The package holds the rule alone; the tiers (their cursors, point reads
// and copies) are the runtime's, which is where its object-store request
// costs are stated. Merge adds none: per id it costs one Peek of each
// cursor and the point reads named above.
package inspect
