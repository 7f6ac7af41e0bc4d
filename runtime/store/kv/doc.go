// Package kv is an ordered, transactional key-value store whose only durable
// home is object storage. It is a focused Go take on SlateDB's design: an
// in-memory sorted table in front of a write-ahead log (WAL) of immutable
// objects and periodic checkpoints, all in one objstore.Store.
//
// # Guarantees
//
//   - One writer per store (Open); any number of Readers (OpenReader).
//   - Transactions read a snapshot, buffer writes and commit optimistically:
//     Commit fails with ErrConflict, applying nothing, when a key the
//     transaction read or a range it scanned was written by a commit after
//     its snapshot. Committed transactions are serializable in commit order.
//     Tx.Add is a commutative counter add that records no read and never
//     conflicts. The snapshot is taken at the first read; point reads look
//     keys up in the live state and fail with ErrConflict at once when a
//     commit after the snapshot changed the key (the commit would fail
//     anyway), so only scans clone the tree. Update retries both.
//   - A commit is visible to every later Get, Scan and Begin at once. Commit
//     returns after the WAL object holding it is in the store (durable);
//     CommitNonDurable returns at once and the commit rides the next WAL
//     object; CommitAsync returns at once with a handle that waits for
//     exactly that WAL object. WAL order equals commit order, so after any crash the store
//     reopens at a prefix of the commit history that holds every commit
//     acknowledged durable.
//   - A missing, corrupt, undecodable or misplaced object stops Open and
//     OpenReader with ErrCorrupt naming it (and, in the WAL, the last good
//     object); nothing is ever skipped silently, and a refused Open writes
//     nothing but its epoch bump. See "Damage" for exactly what is
//     detected and what cannot be.
//   - Transient store errors (a stopped server, a network partition, 5xx)
//     are retried with backoff, as long as the store stays away: commits
//     wait, in order, and none is lost or applied twice; Health reports
//     the outage (since when, the last error) until the store answers
//     again. A Commit that fails
//     with ErrCommitUncertain was applied and may or may not become durable
//     (the usual "unknown outcome" of a lost response or an abandoned
//     wait); one that fails otherwise was not applied. Never half applied.
//   - A WAL write that fails for good (a permanent store error, an
//     unreadable object in its slot) stops the DB: no later commit is
//     accepted, since a gap in the WAL would hide every later object from
//     replay. Every later call returns ErrStopped wrapped with the cause,
//     and Stopped is closed, so waiters end promptly; reopen to continue.
//
// # Layout
//
// Under Options.Prefix:
//
//	manifest               epoch, checkpoint id and chunk list, first live WAL sequence
//	wal/<seq, 20 digits>   one group of commits each, written create-only
//	chunk/<epoch>-<ckpt>-<n>  sorted key/value runs of a checkpoint
//	large/<epoch>-<n>      one value over Options.LargeValueThreshold each
//	discarded/<epoch>/     copies TruncateAt keeps of what it discarded; never read
//
// On a store that packs folders (objstore.Packer; the file store), Open
// packs wal/ before it writes anything: the WAL objects are the same
// objects, with the same keys, create-only slots and bytes, kept in an
// append-only log of the store instead of one file each, so a WAL PUT is
// made durable by one fdatasync instead of two fsyncs and a new file
// (see package file, "Packed folders"). Replay, Readers, Check and
// TruncateAt read and write them through the same objstore calls and
// see no difference; WAL objects written as files before (a store made
// by an earlier build) keep replaying, and the first checkpoint deletes
// them. Packing is recorded in the manifest (format version 2), so a
// build from before packed folders, which would not see the packed WAL
// and take the log for shorter than it is, refuses the store instead (it
// reports the manifest as damaged: "unknown format version 2 (this build
// reads 1)"; docs/OPERATIONS.md says what that means).
//
// # Costs in object-store requests
//
//   - Open: 1 GET + 1 conditional PUT of the manifest, 1 GET per chunk
//     (parallel), 1 + ⌊n/1000⌋ LISTs and n GETs (parallel) for the n WAL
//     objects written since the checkpoint, 1 create-only
//     PUT for the fence, and, in the background, one such paged LIST of
//     each of wal/, chunk/ and large/ to collect objects of crashed writers. A gap
//     costs 1 more GET (to confirm it) and 1 GET of the manifest.
//   - Reader Refresh: 2 GETs of the manifest, 1 LIST per 1000 new WAL
//     objects and 1 GET per new WAL object; a new checkpoint adds 1 GET per
//     chunk.
//   - Commit: no request of its own; all commits that arrive while a WAL PUT
//     is in flight share the next one (group commit, one PUT in flight). At
//     low load a durable commit costs one PUT round trip: an idle writer
//     flushes a lone durable commit at once. On a packed file store that
//     PUT is one pwrite and one fdatasync. With registered committers
//     (Committer) a ready batch may wait up to Options.CommitDelay for
//     the ones that have not joined it ("Group commit with company"):
//     fewer PUTs, no extra request. A batch holding only
//     non-durable commits lingers up to Options.Linger (10 ms) for a durable
//     commit to share its PUT, so a non-durable commit followed by a durable
//     one costs one PUT. In memory, a commit records its keys for conflict
//     detection only while an older transaction snapshot is open.
//   - Sync: nothing when no commit is pending; else it ends the linger
//     and waits for the PUT holding the last commit, which may wait for
//     company as a durable commit's does (at most CommitDelay): a read
//     barrier never splits the PUT the committers were about to share.
//   - Health: no request; it reports what the last requests met.
//   - Get/Scan/Tx reads: none, except 1 GET per large value read.
//   - Large value: 1 PUT before its commit and 1 DELETE after the commit
//     that drops it is durable and no snapshot can read it any more.
//   - Checkpoint (after Options.CheckpointWALBytes or CheckpointWALObjects):
//     1 PUT per changed chunk (chunks whose key range saw no write are
//     reused), 1 conditional PUT of the manifest, then 1 DELETE per obsolete
//     chunk and WAL object.
//
// # Group commit with company
//
// The flusher keeps one WAL PUT in flight; the commits that arrive
// meanwhile go out together in the next one. That alone shares a PUT only
// among the commits that arrive within one PUT's duration: on a packed file
// store (one pwrite and one fdatasync) that is only a few settlements when
// each step costs more CPU than the PUT takes. A client that commits again and
// again (the runtime: each worker goroutine for the run it carries from
// step to step) registers a Committer and commits with WithCommitter; a
// batch a durable commit made ready is then held while
//
//   - a registered committer has not joined it (joiners are counted
//     exactly, PostgreSQL's commit_siblings without the guess),
//   - less than Options.CommitDelay (5 ms) passed since it could have
//     gone, and
//   - less than the last WAL PUT's duration passed since the last durable
//     commit joined it: a sibling that takes longer than a PUT costs less
//     in the next PUT than everyone waiting for it.
//
// So a lone committer, or one whose siblings all joined, never waits: a
// lone run's latency does not move (TestLoneDurableCommitIsNotDelayed).
// N committers that commit at once share one PUT
// (TestConcurrentCommittersShareOnePut), and a missing one costs the
// others at most CommitDelay (TestCommitDelayIsBounded, with the PUT-gap
// rule in TestCommitDelayEndsAfterAPutWithoutCompany; both on synctest's
// clock). Close and checkpoints never wait. Sync waits with the company
// (TestSyncWaitsWithTheCompany, bounded as a commit is:
// TestSyncWaitForCompanyIsBounded): it is a reader's barrier (a status
// read after a submission), and hurrying the batch out split the
// settlements of every run under way into a PUT of their own. A Sync
// whose ctx carries a registered committer counts it as joined, so a
// committer never waits for itself (TestSyncOfACommitterDoesNotWaitForItself).
// Nothing about
// durability changes: a commit is still acknowledged only once its WAL
// object is in the store, and the wait only decides which PUT carries it.
// The cost is latency (at most CommitDelay per step while a sibling is
// slow, e.g. in an HTTP call) and, when the CPU is the bottleneck,
// throughput: the disk idles while the batch fills instead of overlapping
// with the next steps' CPU work (figures:
// docs/BENCHMARKS.md#interpreter-request-counts).
//
// # Fencing
//
// The manifest holds the writer epoch and is only ever replaced with
// If-Match. Open raises the epoch, replays the WAL up to the first missing
// sequence f and writes a fence object at f create-only; if f appears first
// (an older writer got there), Open replays it and tries f+1.
//
// Why an older writer can never commit after the fence: a writer writes WAL
// sequences one at a time, in order, each create-only, and moves to s+1 only
// after s is in the store (or read back as its own). The newer writer's
// fence takes the first sequence missing when it looked, so the older
// writer's next write is exactly the fence's sequence: its create-only PUT
// fails, it reads the object back, finds another batch id and turns
// ErrFenced for good. Its commits after that point were never acknowledged
// durable, so losing them breaks no promise. A checkpoint deletes WAL
// objects below its first live sequence, which would reopen that slot; so
// fence objects are never deleted (one small object per Open). A lost
// response to the older writer's write just before the fence is resolved by
// the same read-back: the object is either its own (the commit counts, and
// the newer writer replayed it) or the fence.
//
// In a packed WAL folder the same holds across processes: the file store
// decides a create-only PUT under an exclusive lock of the folder after
// reading every record written before, so a slot is taken once; and the
// fences it keeps forever are moved, unchanged, when the segment holding
// them is retired, never dropped.
//
// Hence epochs never decrease along the WAL; replay checks it and reports a
// decrease as ErrCorrupt. An older writer's checkpoint fails its If-Match
// manifest write and deletes nothing, since deletion only follows a
// successful manifest switch.
//
// # Checkpoints
//
// A checkpoint writes the state after exactly the WAL objects below its
// first live sequence: the snapshot is taken while sealing the last queued
// WAL batch, and the manifest switches only after that batch is durable.
// Obsolete WAL and chunk objects are deleted after the switch, never
// before. A Reader that loses the race with a deletion sees a missing
// object, reads the manifest again and starts over from the new
// checkpoint (after 10 such races in one Refresh it keeps the consistent
// prefix it has and catches up on the next Refresh).
//
// # Damage
//
// The log is the checkpoint plus every WAL object from the manifest's
// first live sequence F on, with no sequence missing. What Open and
// OpenReader detect, each as ErrCorrupt naming the object:
//
//   - A gap: a WAL sequence at or above F missing while a later one
//     exists, or an object listed and then gone when read. For the writer,
//     after its epoch bump, nobody deletes such an object (an older
//     writer's checkpoint fails its If-Match and deletes nothing, leftover
//     collection only deletes below the F it opened with, fences are never
//     deleted), so any gap is damage, unless the manifest shows a newer
//     epoch by then (a newer writer's checkpoint deleted what this opener
//     was reading): ErrFenced. A Reader can race the writer's checkpoint,
//     which deletes WAL below its new F after switching the manifest; it
//     reads the manifest again and starts over from the new checkpoint if
//     F moved past the gap, and reports ErrCorrupt if it did not. A
//     listing may miss an object created while it ran, never one that was
//     there throughout, so a sequence is called missing only after a GET
//     of it says so. A refused writer never writes a fence into a gap.
//   - A truncated, overwritten or bit-flipped object: checksums (WAL
//     header, every record, whole chunk, whole manifest) and strict
//     decoding.
//   - A renamed, copied or reordered WAL object: its header names its
//     sequence.
//   - Epoch order: an object of an older epoch after a newer one, or WAL of
//     an epoch newer than the manifest's (a manifest restored from an
//     older copy).
//   - A checkpoint chunk the manifest lists missing, or whose entry count
//     or first key disagrees with it, or chunks whose keys overlap.
//   - A missing manifest while WAL or chunk objects exist: Open refuses to
//     start a fresh store over them (1 LIST per folder, only when the
//     manifest is missing).
//
// In a packed WAL folder a torn or damaged record is no object: damage in
// the middle of the log shows as the missing WAL objects it hit, a gap,
// reported as above; a record torn at the end by a crash belongs to a PUT
// that never returned, whose commits were never acknowledged, so the log
// rightly ends before it.
//
// What cannot be detected: deleting the newest WAL objects, the tail of
// the log, looks exactly like those commits never having been written,
// because nothing else in the store records how far the log went. Every
// durable record of the end is the WAL itself; keeping one elsewhere
// would cost a second write per commit (or per group commit), doubling
// the only request a commit makes, so kv does not. Tail loss shows only
// as commits missing that were acknowledged; bucket versioning (deletes
// keep the old version) is the defense. Likewise a large value deleted
// under a live key is found only when read (or by Check), and objects
// below F are not verified (only fences and leftovers live there).
//
// # Checking and repair
//
// Check verifies a store read-only and reports every problem object by
// object; Report.BreakAt is where the log breaks. It makes only GET, LIST
// and HEAD requests: 1 GET of the manifest, 1 GET per chunk (8 in
// parallel), 1 LIST per 1000 large values, 1 LIST per 1000 WAL objects
// from F on and 1 GET per WAL object (16 in parallel), plus 1 GET per gap
// and 1 HEAD of the manifest when it finds a problem (to tell a racing
// checkpoint, which makes it check again, at most 3 times). Memory: the
// whole state, as Open.
//
// TruncateAt(at) is the explicit repair when the missing or damaged
// object cannot be restored: it keeps the checkpoint and the log before
// at, discards every WAL object from at on (Truncation says which: count,
// sequences, bytes, epochs, commits), copies them under
// discarded/<epoch>/, fences the end of the log and the empty slots
// against older writers, and switches the manifest to a checkpoint of the
// kept state whose F lies past everything discarded, so no writer ever
// replays a discarded object. PlanTruncate says the same without
// changing anything. Cost: what Check reads for the kept log and the
// discarded slots, then 1 conditional PUT of the manifest (epoch bump),
// 1 create-only PUT per fence, 1 GET + 1 PUT per discarded object and per
// large value it references, 1 PUT per chunk of the kept state, 1
// conditional PUT of the manifest, 1 PUT of the report; no DELETE (the
// next Open collects what lies below F). docs/OPERATIONS.md is the
// operator's side.
//
// # What it does not do
//
// No multi-writer operation, no range deletes, no compression, no
// encryption, no TTLs. The whole live key set lives in memory (large values
// excepted): a reopened writer copies the replayed keys and values out of
// the chunk and WAL objects they were decoded from, so memory holds the
// live state (its keys, values and about 64 bytes of tree and entry per
// key) and not the deleted records around it (TestReopenKeepsOnlyLiveBytes);
// the keys written since the last checkpoint are also kept, up to the
// checkpoint interval (CheckpointWALBytes). Snapshots are memory-only: a long-lived Tx pins old versions
// and conflict history until it ends, so always Commit or Rollback.
package kv
