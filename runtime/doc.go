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
// Imports point down only: README's Layers table says what each layer
// may import, and TestImportsPointDown in cmd/tqw-dsl checks the module
// against it. The interpreter, runtime/remote and runtime/addons sit
// above the runtime; runtime/runstate, signal, memo, archive and lease
// below it, then runtime/store/queue, kv and objstore.
//
// The package is the step runtime and nothing else: New takes the queue,
// the store, the runner and one Options value whose zero fields are the
// defaults. The vocabulary callers only name or pass on lives below it
// (runtime/runstate: a run's state, status and id checks; runtime/signal;
// runtime/memo), so the inbox, the interpreter and the server use it
// without a cycle. The layers above reach the storage stack only through
// runtime/storage and runtime/repair, never through queue or kv. The
// writer lease (runtime/lease) is handed in as a lease.Gate.
//
// # Guarantees
//
//   - One commit per transition: a step's acknowledgement enqueues the next
//     step (dedup key "run:<id>:<n>"), moves the run's current-step pointer
//     and applies the effects the runner staged, atomically. A run is in
//     exactly one state; a crash between two commits loses nothing.
//   - A step is complete only when its settlement is durable, and only
//     then: step n+1 starts only after step n's settlement is in the store
//     (the queue hands out no job before the commit that enqueued it is
//     durable), and Step.OnDurable callbacks, terminal hooks, Status and
//     ListRuns report nothing that is not durable (AwaitDurable, the one
//     read barrier every reader calls: free when nothing is pending, else
//     the WAL PUT holding what was read, bounded by kv.Options.CommitDelay
//     more). So a step reported complete never runs again, whatever
//     crashes. While the store cannot be written no new step starts;
//     settlements wait and retry. Throughput comes from group commit across
//     runs, never from running ahead inside a run.
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
//   - Cancel handlers (RunSpec.CancelHandlers): a run's first Cancel does
//     not end it; it discards the run's step as any cancel does and, in
//     the same commit that removes or settles that step, enqueues the
//     next step with the discarded step's payload and records the
//     hand-over (the cancel record), so a crash on either side of it
//     resumes in exactly one of the two states. Every later delivery says
//     Step.Cancelled; the runner ends the run. A Cancel after the
//     hand-over ends the run at once, as without the flag.
//   - Durable signals: buffered when no waiter is registered (one per key,
//     latest wins), consumed at registration, delivered to a registered
//     waiter by waking its scheduled step; a redelivered step observes the
//     same signal; the timeout yields Step.Signal == nil. Consuming a
//     buffered signal removes exactly the signal read (a compare-delete in
//     the registering settlement). Before its first write a signal passes
//     the signal.Validator (by default the StepRunner, when it implements
//     it) and, with signal.Options.RequireWaiting, the check that a step
//     waits on its key: a refusal (signal.ErrRejected, signal.ErrNoWaiter)
//     writes nothing, whichever way the signal came (Signal, SendSignal,
//     the inbox through AdmitSignal). A buffered signal is kept for
//     Options.SignalRetention (default 7 days from its buffering), then the
//     retention sweep drops it. A payload the runner cannot use is still
//     consumed.
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
//     AwaitLease) before anyone else may take over: the worker claims
//     nothing while the lease is not valid, and invokes a runner only while
//     the lease stays valid for the margin (TTL/3) more, which bounds the
//     time from that check to the step's first side effect. A lost lease
//     ends Run at once with lease.ErrLost and cancels the running steps.
//     The lease's renewals (runtime/lease has their cost and the choice of
//     TTL) and the inbox poll (runtime/remote) are the only requests an
//     idle writer makes.
//   - Status and ListRuns read durable records only, so a process with a
//     read-only view of the store (runtime/storage.OpenReader) follows
//     runs (Inspector).
//   - A run id may be held in three places at once (an id reused after
//     its run ended): its live run record, its result retained in the KV,
//     and sealed segments. Status, ListRuns (by state, label or workflow,
//     from a cursor, in either order) and CountRuns take the same copy for
//     the run, by one rule (runtime/inspect): the copy of the newest place
//     holding the id (live, then the KV's result, then the newest segment),
//     resolved before any filter applies, so an older copy is never
//     listed, counted or reported in its place.
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
//   - A step transition: one durable commit; one WAL PUT for a lone run
//     (the floor of per-step durability), a share of one when many runs'
//     settlements go in the same PUT. The settlement of step n claims step
//     n+1 for the same worker in the same commit when it is due at once
//     and a slot is free, so the claim costs nothing more and its attempt
//     is counted durably before the step runs; otherwise step n+1 is
//     claimed by a non-durable commit that lingers (kv.Options.Linger) for
//     the next durable one. Each worker goroutine registers the run it
//     carries as a kv Committer, so a ready WAL batch waits for the other
//     runs still in the workers, bounded by kv.Options.CommitDelay and by
//     one PUT's duration without a new settlement, and never when the run
//     is alone (kv's "Group commit with company"): fewer PUTs under load,
//     paid in throughput when the CPU is the bottleneck. A runner's own
//     durable commits and status reads count as its worker having joined,
//     so a lone run never waits for itself
//     (TestARunnersOwnCommitsDoNotWaitForItsWorker). Figures:
//     docs/BENCHMARKS.md#runtime and
//     docs/BENCHMARKS.md#interpreter-request-counts.
//   - Memo.Get: one GET; Memo.Put: one PUT. Step-output replay adds one GET
//     per delivery and one PUT per recorded outcome.
//   - Signal: one durable commit to buffer it, plus, when a waiter exists,
//     one to wake it and up to two small ones to clear the buffer and index;
//     the validator's and RequireWaiting's reads are memory reads (the
//     interpreter's validator reads a pinned definition once per process).
//     ListSignals: memory reads.
//   - Cancel: one durable commit to record the request, one to cancel
//     (for a run with CancelHandlers, the second hands the run over).
//   - Redrive: memory reads (a sealed run: its segment's index, cached,
//     and one GET of its data object), one LIST of the notification
//     queue per waiting state (memory reads on the writer), and one
//     durable commit. A failed or cancelled run's resume record rides its
//     terminating commit. Redrive of an active run (a WaitSkipper runner
//     skipping the step it waits at): memory reads and one durable commit.
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
//     sealing is listed, or filtered out, by its newest copy. Likewise a
//     listing that skips the active runs (no active state wanted) reads,
//     per ended run it meets, that id's run record (a memory read), and a
//     listing by label reads the KV records of each sealed run it lists.
//     ListOptions.Labels walks the KV index of one label for runs not
//     sealed: the cost is the runs carrying it, not all runs.
//     ListOptions.Descending lists the same runs from the greatest id
//     down (newest first for ULIDs), at the same cost: the KV is scanned
//     backwards and the segments merged from their greatest ids.
//   - Inspector.CountRuns: memory reads. Sealed runs are counted from the
//     catalog's per-segment state counts; only the runs in the KV are
//     visited (run records, step pointers and cancels scanned side by
//     side, and per active run one read of its job decoding only its state
//     and signal header). An id two segments share (reused after sealing)
//     costs both indexes (cached, else a GET each), and only when a hash is
//     shared.
//   - Sealing (Options.Sealing), per segment of up to SealOptions.BatchRuns
//     runs: two create-only PUTs and one durable commit (at a slow trickle
//     of ends, one segment per SealOptions.Delay); the first pass of a
//     process adds one LIST per 1,000 objects under the seal prefix (and a
//     DELETE per orphan). Expiry of a segment: one GET (its index, unless
//     cached), one durable commit, two DELETEs; under a memo retention
//     longer than the result retention, one more durable commit when its
//     results expire and, when its memo entries do, one LIST per run plus
//     one DELETE per memo object. Inspector.SealedRecords: one GET of the
//     segment's data object.
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
//   - A waiting run (on a signal or a timer): no request until its signal
//     comes or its time is due (TestWaitingRunsAddNoRequests: an idle
//     writer holding 10,000 waiting runs makes the requests one holding
//     none does).
//
// # Sealed runs
//
// With Options.Sealing, a finished run leaves the KV once its end is
// handled: the terminating commit (or, when the terminal hook observes the
// run, its notification's acknowledgement) writes a seal marker, and Run
// seals a pass once SealOptions.BatchRuns markers wait or SealOptions.Delay
// after the first became durable, so the KV, and the writer's memory, hold
// the runs in flight, not the throughput. The retention sweep and Seal seal
// too. A pass writes the marked runs (result, totals, labels and the
// records a RunRecordOwner runner declares: the interpreter's history,
// outputs and child index) into a segment (runtime/archive: an index and a
// data object, both create-only), then one durable commit, guarded on
// every result record it removes, deletes the runs' KV records and adds the
// segment's catalog row. Exactly once, whatever crashes: before the commit
// the run is read from the KV and the objects are orphans (deleted at the
// next process's first pass); after it, from the segment only
// (TestSealInterruptedAnywhereLeavesEveryRunOnce, TestSealKill).
//
// A sealed run keeps nothing in the KV but its share of its segment's
// catalog row (its id's 64-bit hash, with the segment's label Bloom filter,
// state counts and id range), so the writer's heap, its reopen and the
// CPU per step of new runs do not grow with the runs retained; its result,
// history and outputs are read through the bounded index cache. A
// segment's runs disappear when its newest run leaves the result
// retention, so a sealed run stays visible up to one sweep interval longer
// than an unsealed one; under a longer memo retention the segment turns
// slim (hashes and label filter dropped) until the memo retention passes.
// Segments sealed by earlier builds, with a row and label entries per run
// in the KV, read the same; their expiry deletes those. A waiting run, by
// contrast, keeps its job, run record, step pointer and wait index in the
// KV while it waits. Figures: docs/BENCHMARKS.md#scale and
// docs/BENCHMARKS.md#waiting-runs.
//
// # Redrive
//
// Redrive continues a run that ended Failed or Cancelled under the same
// id, from the state it ended in: the terminating commit keeps that state
// (workflow/resume/<id>: the ending step's input, or the payload the
// runner returned with Fail or CancelRun) for as long as the result, and
// the sealer moves it into the run's segment with the rest. The runner (a
// Redriver: the interpreter) turns it into the resumed step's input, and
// one durable commit makes the run active again at the ending step + 1,
// guarded on the copy it read, so a crash leaves the run either ended or
// redriven, never both, and a repeat finds it active and refuses. What a
// redrive does to what the old end left:
//
//   - A sealed run is superseded, not unsealed: the segment stays as it
//     is (immutable), the redrive writes a live copy (run record, step
//     pointer, label entries, totals, and the runner's records read back
//     from the segment), and the read model (runtime/inspect: live, then
//     the KV's result, then the newest segment) makes every reader take
//     it: Status, ListRuns, CountRuns and SealedRecords, which returns
//     nothing for an id the KV holds. The new end is sealed again into a
//     newer segment, which wins over the old. The old segment's expiry
//     leaves alone what a superseded run's newer copy still uses (its memo
//     entries, RunRecordExpirer's objects).
//   - The id's reservation holds throughout: the id names the same run
//     (one history), and a Submit under it is the active run's again.
//   - Totals carry on: the new incarnation starts from the old one's
//     counts, so a run's totals are what all its incarnations cost.
//   - The terminal notification of the old end is not sent again (its
//     dedup key names the old incarnation's nonce); Redrive handles a
//     pending one itself (the hook runs as the worker would run it), waits
//     up to 10s for one running elsewhere or waiting for its retry, and is
//     refused while one is, so
//     the hook never handles the old end after the run went on (and a
//     Watch registered after Redrive returns sees the new end only). The
//     new end is notified as any end is.
//   - A parent: the runtime knows none; the interpreter refuses to redrive
//     a child run (its parent already received its end) and redrives the
//     parent instead, whose call step starts a new child.
//
// A runner that is a WaitSkipper also takes Redrive of an active run
// whose step is scheduled (waits on a timer or a signal): one commit
// removes that job, enqueues the next step number with PrepareSkip's
// payload, moves the step pointer, drops the job's signals/wait entry
// (only while it names the job) and writes the runner's effects, guarded
// on the run record, the step pointer and the cancel record as read. A
// running or due step is refused with ErrNotRedrivable; the signal buffer
// is left alone, so a later signal to the old key is only buffered.
//
// A succeeded or active run, a run whose last state was over
// queue.MaxKVValueSize (not kept), or one that ended before this version
// kept one, is refused with ErrNotRedrivable.
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
