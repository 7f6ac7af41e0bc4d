// Package repair checks a store's storage engine and repairs a broken log,
// for the CLI's "store check" and "store truncate" and for operators'
// tools: the runtime-level door to runtime/store/kv's Check, PlanTruncate
// and TruncateAt, on the log of the queue a runtime runs on.
//
// Guarantees: Check and Plan only read (GET, LIST, HEAD), so they work on
// a read-only store and beside a live writer. Truncate discards every
// commit from the cut on, fences older writers out, copies what it
// discards for inspection and switches the manifest in one If-Match step:
// a crash leaves the store as it was or cut, never half-cut. Never run it
// while a writer that must keep running holds the store (the CLI takes
// the writer lease first).
//
// Cost in object-store requests: kv's, stated in runtime/store/kv's
// doc.go under "Checking and repair"; this package adds none.
package repair
