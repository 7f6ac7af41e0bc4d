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
// # Guarantees
//
//   - One commit per transition: a step's acknowledgement enqueues the next
//     step (dedup key "run:<id>:<n>"), moves the run's current-step pointer
//     and applies the effects the runner staged, atomically. A run is in
//     exactly one state; a crash between two commits loses nothing.
//   - At-least-once steps: a step can run again after a crash or an expired
//     lease (extend it with Step.Lease). Runners must be idempotent per
//     (run id, step number); Step.Memo and Step.RunMemo cache expensive side
//     effects, and WithStepOutputReplay replays a recorded outcome instead
//     of invoking the runner again. The queue makes a commit visible before
//     it is durable, and a worker frees its slot as soon as a runner
//     returned, so step n+1 may start while step n's commit is still on its
//     way to the store: commits of consecutive steps share WAL PUTs. After a
//     crash that loses that commit, step n runs again (then n+1): ordinary
//     at-least-once, made exact by step-output replay, whose record is
//     durable before the settlement. Terminal hooks, in contrast, run only
//     once the terminating commit is durable.
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
//     next waiter.
//   - Terminations are notified at least once through a notification job
//     enqueued in the terminating commit (TerminalHook). Steps the queue
//     dead-letters on its own (expired lease on the last attempt, crash
//     recovery) are reconciled to Failed by the worker, also in one commit
//     guarded on the run's records, so a crash never repeats it.
//   - A store that stops accepting commits (kv.ErrFenced, or kv.ErrStopped
//     after a failed WAL write) ends Run at once with that error.
//   - With WithLeaseGate (the CLI passes its writer lease, runtime/lease),
//     a writer that has not renewed its lease within the TTL stops starting
//     steps and applying inbox commands before anyone else may take over:
//     the worker claims nothing while the lease is not valid, and invokes a
//     runner only while the lease stays valid for the margin (TTL/3) more,
//     which bounds the time from that check to the step's first side
//     effect (CPU work and at most one or two small reads in the
//     interpreter). A lost lease ends Run at once with lease.ErrLost and
//     cancels the running steps. The lease's default TTL is 15 s, renewed
//     every 5 s: 12 conditional PUTs a minute, 17,280 a day, about $0.086
//     a day on S3 at $0.005 per 1,000 PUTs, the only request an idle
//     writer makes besides the inbox poll. A shorter TTL would suspend
//     healthy writers on S3's slow PUTs (each renewal must ride out a
//     failed attempt within TTL/3) and cost more; a longer one keeps a
//     store blocked that long after a writer on another machine died (a
//     dead one on the same machine is replaced at once).
//   - Status and ListRuns read durable records only, so a process with a
//     queue.Reader on the store follows runs (Inspector).
//
// # Cost in object-store requests
//
// All run state lives in the queue's caller-KV namespace under "workflow/"
// and in its jobs, so it costs what queue commits cost: each durable commit
// is a share of one WAL PUT (group commit). Per operation:
//
//   - Submit: one durable commit.
//   - A step transition: its claim (not durable on its own) and its
//     settlement (one durable commit) ride the same WAL PUT stream; with
//     the pipelining above, about half a PUT per step for a lone run and
//     a few hundredths under load (docs/BENCHMARKS.md, "runtime").
//   - Memo.Get: one GET; Memo.Put: one PUT. Step-output replay adds one GET
//     per delivery and one PUT per recorded outcome.
//   - Signal: one durable commit to buffer it, plus, when a waiter exists,
//     one to wake it and up to two small ones to clear the buffer and index.
//   - Cancel: one durable commit to record the request, one to cancel.
//   - Reconcile of a run whose step the queue dead-lettered: one durable
//     commit.
//   - Status, ListRuns: no request on the writer (memory reads); on a Reader
//     the cost of its Refresh.
//   - The lease gate: none (the lease computes validity from its clock).
//   - The retention sweep: per expired run one LIST plus one DELETE per memo
//     or replay object; result records and markers are KV deletes.
//   - NoopTerminalHook: nothing; another hook: one notification job per
//     termination (it rides the terminating commit) and its acknowledgement.
//
// # What it does not do
//
// It is an imperative step orchestrator, not a DAG executor nor an
// event-sourced engine: there is no history replay and no per-side-effect
// record beyond the memo. Step payloads and results ride in queue jobs and
// KV values, so keep them small (results over MaxRetainedResult are not
// retained in status records); put large data in objects and pass keys.
// One process owns a queue (the single writer); other processes read
// through queue.Reader.
package runtime
