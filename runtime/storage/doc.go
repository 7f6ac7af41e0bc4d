// Package storage is the one door from the layers above the runtime (the
// interpreter, the CLI, the server, examples) to the storage stack under
// it (runtime/store/queue and runtime/store/kv): it opens the queue a
// runtime runs on (Open) or a read-only view of it (OpenReader), and
// names the few storage types those layers handle, as aliases, so a
// value passes between them and the runtime unchanged.
//
// Above the runtime nothing imports queue or kv; objstore (the seam every
// durable byte crosses) stays importable. The import test of cmd/tqw-dsl
// (TestImportsPointDown) holds both rules. A new need of an upper layer
// is a name added here, not an import of a lower package.
//
// Guarantees and costs are the queue's and the kv's: this package adds
// no behaviour and no request (see runtime/store/queue and
// runtime/store/kv).
package storage
