// Package runtime runs durable multi-step runs on a runtime/store/queue: the Go
// counterpart of taquba-workflow.
//
// A run is a chain of step jobs. A StepRunner executes one step and returns
// a StepOutcome: ContinueNow, ContinueAfter or ContinueOnSignal enqueue the
// next step with the returned payload; Succeed, Fail and CancelRun end the
// run. A returned error is a step error: Permanent dead-letters the step
// and fails the run, anything else is transient and retried with the
// queue's backoff until the step's attempts run out. The runtime persists
// everything between steps, so a process killed at any point resumes every
// run at the step it had reached.
//
// # Where it sits
//
// Imports point down only (TestImportsPointDown in cmd/tqw-dsl holds the
// table):
//
//	interpreter, runtime/remote, runtime/addons/*   (above: they drive runs)
//	        │
//	        ▼
//	runtime, runtime/storage, runtime/repair
//	        │
//	        ▼
//	runtime/runstate, runtime/signal, runtime/memo, runtime/archive, runtime/lease
//	        │
//	        ▼
//	runtime/store/queue ──► runtime/store/kv ──► runtime/store/objstore
//	        all of them ──► runtime/clock
//
// The package is the step runtime and nothing else: New takes the queue,
// the store, the runner and one Options value whose zero fields are the
// defaults. What callers only name or pass on lives in small packages
// below it, so a reader of this one sees the runtime's behaviour, not its
// vocabulary: runtime/runstate (a run's State, Status, Totals, Outcome,
// and the checks of run ids and labels),
// runtime/signal (what sending a signal did, its options, validator and
// limits), runtime/memo (the step and run memo). Those import nothing of
// the runtime, so the inbox, the interpreter and the server use them
// without a cycle. The layers above reach the storage stack through
// runtime/storage (open the queue or a read-only view of it; the storage
// types they pass on, as aliases) and runtime/repair (check a store, cut
// a broken log), never through queue or kv, so the stack under the
// runtime can change behind one door. runtime/clock is the one clock of
// the stack. The writer lease (runtime/lease) is handed in as a
// lease.Gate.
//
// # Guarantees
//
//   - One commit per transition: a step's acknowledgement enqueues the next
//     step (dedup key "run:<id>:<n>"), moves the run's current-step pointer
//     and applies the effects the runner staged, atomically. A run is in
//     exactly one state; a crash between two commits loses nothing.
//   - A step is complete only when its settlement is durable, and only
//     then: step n+1 starts only after step n's settlement is in the store
//     (the queue does not hand out a job before the commit that enqueued
//     it is durable), Step.OnDurable callbacks, terminal hooks, Status and
//     ListRuns report nothing that is not durable: on the writer's queue a
//     report waits, after its last read, for the WAL PUT holding what it
//     read (AwaitDurable, the one read barrier every reader calls: free
//     when nothing is pending, else that PUT, bounded by
//     kv.Options.CommitDelay more). A caller that reads more after an
//     answer calls it after that read too. So a step reported
//     complete never runs again, whatever crashes. While the store cannot
//     be written no new step starts; settlements wait and retry.
//     Throughput comes from group commit across runs (a worker frees its
//     slot as soon as a runner returned, so many runs' settlements share
//     one WAL PUT), never from running ahead inside a run.
//   - At-least-once steps: a step not yet complete can run again after a
//     crash or an expired lease (extend it with Step.Lease). Runners must
//     be idempotent per (run id, step number); Step.Memo and Step.RunMemo
//     cache expensive side effects, and Options.StepOutputReplay replays a
//     recorded outcome instead of invoking the runner again.
//   - Idempotent submission on (run id, input), also across restarts
//     (ErrInputMismatch for a different input under an active id).
//   - Cancellation from any process that owns the queue, for any run in the
//     store: pending and scheduled steps are removed at once; a running
//     step's context is cancelled and its outcome discarded, also when the
//     runner returned before the request (the settlement checks it in its
//     own commit). The request is durable.
//   - Durable signals: buffered when no waiter is registered (one per key,
//     latest wins), consumed at registration, delivered to a registered
//     waiter by waking its scheduled step; a redelivered step observes the
//     same signal; the timeout yields Step.Signal == nil. Consuming a
//     buffered signal removes exactly the signal read (a compare-delete in
//     the registering settlement), so one buffered meanwhile stays for the
//     next waiter. Before its first write a signal passes the
//     signal.Validator (by default the StepRunner, when it implements it)
//     and, with signal.Options.RequireWaiting, the check that a step waits
//     on its key: a refusal (signal.ErrRejected, signal.ErrNoWaiter) writes
//     nothing, whether the signal came through Signal, SendSignal or the
//     inbox (runtime/remote, through AdmitSignal). A buffered signal is kept for the signal retention
//     (Options.SignalRetention, default 7 days, counted from its buffering),
//     then the retention sweep drops it; SendSignal reports the expiry and
//     ListSignals lists what is buffered (key, size, buffering time).
//     What a step does with a payload it cannot use is the runner's
//     business: the signal is consumed either way, so a runner that sets
//     it aside and waits again receives the next one.
//   - Terminations are notified at least once through a notification job
//     enqueued in the terminating commit (TerminalHook). Steps the queue
//     dead-letters on its own (expired lease on the last attempt, crash
//     recovery) are reconciled to Failed by the worker, also in one commit
//     guarded on the run's records, so a crash never repeats it.
//   - A store that stops accepting commits (kv.ErrFenced, or kv.ErrStopped
//     after a failed WAL write) ends Run at once with that error.
//   - With Options.LeaseGate (the CLI passes its writer lease, runtime/lease),
//     a writer that has not renewed its lease within the TTL stops starting
//     steps and applying inbox commands (runtime/remote, through
//     AwaitLease) before anyone else may take over:
//     the worker claims nothing while the lease is not valid, and invokes a
//     runner only while the lease stays valid for the margin (TTL/3) more,
//     which bounds the time from that check to the step's first side
//     effect (CPU work and at most one or two small reads in the
//     interpreter). A lost lease ends Run at once with lease.ErrLost and
//     cancels the running steps. The lease's default TTL is 15 s, renewed
//     every 5 s: 12 conditional PUTs a minute, 17,280 a day, about $0.086
//     a day on S3 at $0.005 per 1,000 PUTs, the only request an idle
//     writer makes besides the inbox poll (runtime/remote). A shorter TTL
//     would suspend healthy writers on S3's slow PUTs (each renewal must
//     ride out a failed attempt within TTL/3) and cost more; a longer one
//     keeps a store blocked that long after a writer on another machine
//     died (a dead one on the same machine is replaced at once).
//   - Status and ListRuns read durable records only, so a process with a
//     read-only view of the store (runtime/storage.OpenReader) follows
//     runs (Inspector).
//
// # Control surface
//
// Processes that do not own the store control runs through runtime/remote
// (a Client whose commands the writer's inbox applies exactly once). A
// control plane applies commands with Submit, Cancel and SendSignal, and
// replays one after its own crash with what follows, which writes nothing
// of the runtime's beyond what those do: Incarnation (which run carries
// an id now, and which ended last), AdmitSignal (a signal's checks,
// writing nothing), SignalValue, BufferSignal, SignalBuffered,
// DeliverSignal and ClearSignalWith (a signal's writes, each committed
// with the control plane's own record), SignalExpiry, and AwaitLease (the
// lease gate). Its records live in the caller KV under a ControlKVPrefix
// ("workflow/inbox/" for the inbox), which the runtime never touches; its
// objects under a prefix checked against StoreNamespaces
// (objstore.CheckNamespaces; docs/STORE-LAYOUT.md lists every component's).
// New checks the runtime's own namespaces (queue, memo, writer lease,
// Options.StoreNamespaces), refusing an overlap with
// objstore.ErrNamespaceOverlap naming both.
//
// # Cost in object-store requests
//
// All run state lives in the queue's caller-KV namespace under "workflow/"
// and in its jobs, so it costs what queue commits cost: each durable commit
// is a share of one WAL PUT (group commit). Per operation:
//
//   - Submit: one durable commit.
//   - A step transition: one durable commit, one WAL PUT for a lone run
//     (the physical limit of per-step durability) and a few hundredths
//     under load, when many runs' settlements share a PUT
//     (docs/BENCHMARKS.md, "runtime"). The settlement of step n claims
//     step n+1 for the same worker in the same commit when it is due at
//     once and a worker slot is free, so the claim costs nothing more and
//     its attempt is counted durably before the step runs; otherwise step
//     n+1 is claimed by a non-durable commit that lingers (kv's 10 ms) for
//     the next durable one. Each worker goroutine registers the run it
//     carries from step to step as a kv Committer, so a WAL batch that is
//     ready waits for the settlements of the other runs still in the
//     worker, bounded by kv.Options.CommitDelay (5 ms) and by one PUT's
//     duration without a new settlement, and never when the run is alone
//     (kv's "Group commit with company"): the YAML loop benchmark went
//     from about 0.08-0.11 to about 0.04 PUT per step at 32 runs on the
//     file store, and 10-step no-op action runs through the engine to
//     0.044-0.049 once status reads (their read barrier) stopped
//     hurrying held batches out (a lone run: unchanged, one PUT per
//     step plus the submission); the cost is
//     throughput when the CPU is the bottleneck, since the disk then idles
//     while the batch fills (docs/BENCHMARKS.md, "interpreter request
//     counts (issue 14)"). A runner's own durable commits and status
//     reads (their read barrier) count as its worker's committer having
//     joined the batch they wait for, since the run commits nothing else
//     until they return: a lone run never waits for itself
//     (TestARunnersOwnCommitsDoNotWaitForItsWorker).
//   - Memo.Get: one GET; Memo.Put: one PUT. Step-output replay adds one GET
//     per delivery and one PUT per recorded outcome.
//   - Signal: one durable commit to buffer it, plus, when a waiter exists,
//     one to wake it and up to two small ones to clear the buffer and index;
//     the validator's and RequireWaiting's reads are memory reads (the
//     interpreter's validator reads a pinned definition once per process).
//     ListSignals: memory reads.
//   - Cancel: one durable commit to record the request, one to cancel.
//   - Reconcile of a run whose step the queue dead-lettered: one durable
//     commit.
//   - Status, ListRuns: no request on the writer (memory reads) for active
//     runs and runs not sealed yet; on a Reader the cost of its Refresh. A
//     sealed run is found through the catalog (each segment's id range and
//     run-id hashes, in memory) and costs one GET of its segment's index on
//     a cache miss (SealOptions.CacheSegments indexes are kept). A page of
//     ListRuns merges the segments lazily and reads only those its runs
//     lie in, usually one or two, since run ids (ULIDs) sort by submission
//     time; a segment with no run in a wanted state (its state counts) or
//     without a wanted label (its label Bloom filter) is never read,
//     unless it is newer than a segment with a listed run and holds that
//     run's id (its in-memory hashes say so): an id run again after
//     sealing is listed, or filtered out, by its newest copy.
//     ListOptions.Labels walks the KV index of one label for runs not
//     sealed: the cost is the runs carrying it, not all runs.
//     ListOptions.Descending lists the same runs from the greatest id
//     down (newest first for ULIDs), at the same cost: the KV is scanned
//     backwards and the segments merged from their greatest ids.
//   - Inspector.CountRuns: memory reads. Sealed runs are counted from the
//     catalog's per-segment state counts, so only the runs in the KV are
//     visited (active runs and runs not sealed yet): run records, step
//     pointers and cancels scanned side by side, and per active run one
//     read of its job decoding only its state and signal header: a third
//     of the CPU of decoding those records whole ("GET /v1/runs through
//     the index" in docs/BENCHMARKS.md). An id two segments
//     share (reused after sealing) is found by merging the run-id hashes of
//     segments whose id ranges overlap, once per catalog change, and costs
//     both indexes (cached, else a GET each) only when a hash is shared.
//   - Sealing (Options.Sealing), as runs end (batched by
//     SealOptions.BatchRuns or Delay), per segment of up to BatchRuns
//     runs: two create-only PUTs and one durable commit (so at a slow
//     trickle of ends, one segment per Delay); the first pass of
//     a process adds one LIST per 1,000 objects under the seal prefix (and
//     a DELETE per orphan). Expiry of a segment: one GET (its index, unless
//     cached), one durable commit, two DELETEs; under a memo retention
//     longer than the result retention, one more durable commit when its
//     results expire and, when its memo entries do, one LIST per run plus
//     one DELETE per memo object.
//     Inspector.SealedRecords: one GET of the segment's data object.
//   - Incarnation, AdmitSignal, SignalBuffered, SignalExpiry: memory reads.
//     BufferSignal and ClearSignalWith: one durable commit; DeliverSignal:
//     one to wake a waiter plus a small one to drop its index entry.
//   - An inbox command (runtime/remote): about four requests on the writer
//     plus the command's commits, three on the Client.
//   - The lease gate: none (the lease computes validity from its clock).
//   - The retention sweep: a run's records expire together. Its result,
//     label entries, totals and the runner's records (RunRecordOwner) go
//     in one durable commit, and what the runner keeps outside the KV
//     (RunRecordExpirer: the interpreter's large outputs) just before it;
//     so status, history and the run id's reuse agree: all shown, or all
//     gone. With sealing the sweep seals first: a run handed to the sealer
//     but already past the result retention is expired whole in that
//     pass, not sealed, and a sealed run's records go with its segment. A
//     result that expired before the run's end was handled (its hook kept
//     failing) takes the runner's records with the seal marker the
//     handling writes. Cost: per expired run one LIST plus one DELETE per
//     memo or replay object, and one durable commit per result expired
//     outside a seal pass; the buffered signals are scanned in memory at
//     every pass, and each expired one costs one durable commit.
//   - No terminal hook: nothing; a hook: one notification job per
//     termination (it rides the terminating commit) and its acknowledgement.
//
// # Sealed runs
//
// With Options.Sealing, a finished run leaves the KV store once its end is
// handled: the terminating commit (or, when the terminal hook observes
// the run, the acknowledgement of its notification) writes a seal marker;
// Run seals as runs end, a pass once SealOptions.BatchRuns markers wait
// or SealOptions.Delay (2 s by default) after the first of them became
// durable, so the KV holds only the runs of the last seconds and the
// writer's memory follows the work in flight, not the throughput; the
// retention sweep also seals (markers left by an earlier process), and
// so does Seal. A pass gathers marked runs into a segment
// (runtime/archive): their result, totals, labels and the records a
// RunRecordOwner runner declares (the interpreter's history, outputs and
// child index), in an index and a data object, both written create-only
// before one durable commit deletes every KV record of the runs (result,
// totals, expiry and memo markers, label index entries, the runner's
// records) and adds the segment's catalog row. The commit is guarded on
// every result record it removes, so a run changed meanwhile aborts the
// pass (Seal reports the race) and nothing is sealed. Exactly once, whatever
// crashes: before the commit the run is read from the KV and the
// segment's objects are orphans no row names (deleted at the next
// process's first pass); after it the run is read from the segment only.
// TestSealInterruptedAnywhereLeavesEveryRunOnce fails each write and kills
// the process before the commit; TestSealKill SIGKILLs a sealing process
// at random moments.
//
// What a sealed run keeps in memory: nothing of its own in the KV, and 8
// bytes in its segment's catalog row (the run id's 64-bit hash; with the
// label Bloom filter, state counts and id range, about 10 bytes a run in
// the KV, and as much again in the decoded catalog each Inspector
// caches). Finding a run id is a binary search of the hashes of the
// segments whose id range holds it, newest first, and a read of one
// index (cached). Its result, history and outputs live in objects, read
// through the bounded index cache. Measured by tqw-bench scale
// (docs/BENCHMARKS.md, "scale (issue 14)", file store, 10,000 waiting
// runs beside): a reopened writer holding 1,000,000 sealed runs has a
// live heap of 31 MB and an RSS of 103 MB, against 14 MB and 41 MB
// holding none, about 17 bytes of heap per sealed run; CPU per step of
// new runs stays that of an empty store (no step reads the catalog), and
// a reopen replays at most the kv's checkpoint interval of WAL (0.5 s at
// 1,000,000). Before sealing left nothing per run and before the kv
// copied its replayed state out of the WAL objects, the heap grew about
// 1.1 KB per retained run. A segment's runs disappear when its newest
// run leaves the result retention, so a sealed run stays visible up to one
// sweep interval longer than an unsealed one; under a longer memo retention
// the segment then turns slim (its hashes and label filter dropped) until
// the memo retention passes, when its runs' memo entries are cleared and
// it goes. Segments sealed by earlier builds, which kept a row and label
// entries per run in the KV, read the same (their catalog rows carry the
// same hashes); their expiry deletes those rows and entries.
//
// # Waiting runs
//
// A run waiting on a signal or a timer is a scheduled job and a few KV
// records in memory: no request is made for it until its signal comes or
// its time is due. TestWaitingRunsAddNoRequests counts every request of an
// idle writer (mock clock, one minute) holding 10,000 waiting runs and
// none: both make exactly zero (no lease or inbox in that test; with them
// an idle writer makes 12 lease PUTs a minute and its inbox polls, the
// same with or without waiting runs). Memory (BenchmarkWaitingRuns,
// 100,000 waiting runs, docs/BENCHMARKS.md "waiting runs"): about 1.5 KB
// of heap per waiting run on a file store and 2.2 KB on the mem store
// (whose heap also holds the WAL's bytes), so 100,000 waiting runs cost
// about 150 MB on a file store. Unlike a sealed run, a waiting run's job,
// run record, step pointer and wait index stay in the KV while it waits.
//
// # What it does not do
//
// It is an imperative step orchestrator, not a DAG executor nor an
// event-sourced engine: there is no history replay and no per-side-effect
// record beyond the memo. Step payloads and results ride in queue jobs and
// KV values, so keep them small (results over MaxRetainedResult are not
// retained in status records); put large data in objects and pass keys.
// One process owns a queue (the single writer); other processes read
// through a read-only view (runtime/storage.OpenReader).
package runtime
