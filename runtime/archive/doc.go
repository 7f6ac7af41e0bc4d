// Package archive is the format of sealed runs: the immutable objects in
// which the runtime keeps finished runs once they leave its key-value
// store, and the small catalog entry that indexes each of them.
//
// A segment holds up to a few thousand finished runs, sorted by run id,
// in two objects:
//
//	<key>.idx   "tqwidx1\n", a MessagePack index, its CRC-32C (4 bytes, big endian)
//	<key>.dat   "tqwdat1\n", then per run one MessagePack array of records
//
// The index has one entry per run: everything a status or a listing
// shows (state, step, result, error, times, headers, labels, totals) and
// where the run's records lie in the data object (offset, length,
// CRC-32C). A record is a caller-KV key and value as the runner stored it
// (an interpreter's history records and step outputs), so a run reads
// back exactly as it was while active. Status and listings read only the
// index; a run's records cost one read of the data object.
//
// A Meta is the catalog entry of one segment, small enough to keep in
// memory for every segment of a store: the objects' keys and sizes, the
// run count per terminal state, the range of run ids, the sorted 64-bit
// xxhash of every run id (8 bytes a run: whether a segment holds a run id
// is a binary search, never a read), a Bloom filter of the labels (16
// bits a distinct label, about 0.05% false positives), and the
// retentions the segment was sealed under.
//
// Every decoder checks magic, checksum, MessagePack structure
// (internal/msgpackcheck) and the invariants a reader relies on (sorted,
// unique run ids; records inside the data object), and returns an error
// wrapping ErrCorrupt for anything else: bad bytes cost an error, never a
// panic or an allocation beyond their own size. The package makes no
// object-store requests: the runtime reads and writes the objects.
package archive
