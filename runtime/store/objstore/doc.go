// Package objstore is the object-store seam of tqw: every durable byte of every
// run goes through the Store interface defined here.
//
// Guarantees every backend keeps (checked by one contract suite, objstoretest):
//   - Put is atomic: a reader sees the old object, the new one, or none, never
//     a partial one, also across a process kill.
//   - Conditional Puts are linearizable: of N racing create-only writers of one
//     key exactly one wins; If-Match makes compare-and-swap on the ETag.
//   - List is ordered by key bytes and paged with startAfter.
//   - A failed precondition is ErrPrecondition, a missing object ErrNotExist,
//     a bad key ErrInvalidKey; keys are never rewritten.
//
// Cost: each method is one request to the backing service (one S3 request on
// s3, a few syscalls on file, none on mem), plus retries the s3 backend makes
// on transient failures.
//
// One store holds the objects of several components (the queue's kv, the
// runtime's memo, the writer lease, the inbox, the interpreter), each under
// its own prefix: a Namespace names one component's share, and
// CheckNamespaces (no request) refuses two that overlap
// (ErrNamespaceOverlap), so a misconfigured component cannot read,
// overwrite or delete another's objects. docs/STORE-LAYOUT.md lists them.
//
// Backends live in subpackages named after what they wrap: mem, file, s3.
// storeurl opens one from a URL. Wrappers for tests and benchmarks inject
// faults and count requests.
package objstore
