// Package memo is the runtime's durable memo: a key-value cache scoped to
// one step of a run (Step.Memo) or to the whole run (Step.RunMemo), so a
// retried step observes the result of an expensive side effect instead
// of paying for it twice, and the addresses of every memo and replay
// entry of a store (Store), for cleanup.
//
// Guarantees: Put returns once the value is durable; Get returns what the
// last Put of the key stored. It is a cache: retention (the runtime's
// Options.MemoRetention) may remove entries, so every reader must
// tolerate absence by recomputing. Keys of [A-Za-z0-9._-] map to object
// keys as they are, others to "~" and their hex encoding, so no two keys
// collide. ContentKey derives a key from a value (SHA-256 of its
// MessagePack encoding, the keys of string-keyed maps in order, so equal
// inputs get equal keys).
//
// Cost in object-store requests: Get one GET, Put one PUT, Memoized one
// GET plus one PUT on a miss; Store.ClearRun one LIST per 1,000 entries
// plus one DELETE each; Store.RunEntries one LIST per 1,000 entries plus
// one GET each. The package imports only objstore below it.
package memo
