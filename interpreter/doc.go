// Package interpreter runs parsed tqw workflows durably: Interpreter is one
// runtime.StepRunner that executes any workflow file. A durable runtime
// step runs one DSL step and then the pure steps (set, switch, succeed,
// fail) that follow it, up to 100, which commit in its one settlement.
//
// # Guarantees
//
//   - An effectful step (an action, sleep and wait_signal included,
//     foreach, call) always starts a runtime step of its own, so it never
//     starts before the settlement of what came before it is durable. A
//     pure step only computes from the run's state, and nothing of it is
//     seen outside (end events, watchers, history readers) before its
//     settlement commits: after a crash or a failed settlement the
//     redelivery runs the chain again from the last durable state, and
//     the run keeps exactly one history record and one end event per DSL
//     step that ran. Each folded step has its own history record (key
//     tqw/hist/<run>/<n>.<seq>, sorting between runtime steps n and n+1;
//     HistoryRecord.N is the runtime step, Seq the place in it), its own
//     start and end events, totals, span and StepDurations call. A step
//     reads the outputs staged earlier in its delivery. A folded step
//     that errs (a failed read; it has staged nothing) ends the chain
//     before it: what ran before settles, and the step runs again in a
//     runtime step of its own, so an action is never redone for a read
//     that came after it. At most 100 pure
//     steps follow a delivery's first, so a pure loop commits every 101
//     steps and always progresses.
//   - A run pins its definition. Submit stores the YAML of the workflow and
//     of every workflow it calls under tqw/defs/<sha256> (create-only) and
//     the run carries the hashes, so every step runs against the exact bytes
//     submitted, whatever happens to the files and whichever process
//     resumes the run. Parsed definitions are cached in memory by hash,
//     at most DefinitionCacheSize of them or DefinitionCacheBytes of YAML
//     (least recently used dropped; a dropped one costs a GET again), and
//     the hashes known stored at most 16,384 (a forgotten one costs a HEAD).
//   - Load reads only regular files (opened O_NONBLOCK and checked with
//     fstat first: never a FIFO, device, socket or /proc entry), each at
//     most dsl.Limits.MaxFileBytes, at most MaxCallTree per call tree,
//     cycles found by file identity. With InFolder every file is opened
//     through os.Root inside the folder: an absolute path, a .. out, a
//     symlink out and a missing file are one error, ErrNotInFolder.
//   - The run input is checked against the workflow's input schema before
//     anything is written; a rejected input leaves the store unchanged.
//   - The state between steps (the current step, variables, attempt and
//     wait bookkeeping) rides in the runtime's Continue payload as
//     MessagePack. A step's output, its history record and the wait index
//     are KV effects of the step's settlement, so they commit with the
//     transition or not at all. Outputs over InlineOutputLimit go to their
//     own object, written before the settlement and referenced from KV.
//   - Stored objects are verified on read. A large output's key ends in
//     the SHA-256 of its bytes (tqw/outputs/<run>/<n>.<sha256>), so the
//     output and history records that reference it carry the checksum
//     without a new field; keys written before (ending in <n>) still read,
//     checked only by decoding. A definition's bytes must hash to its name.
//     An object that fails is ErrDamagedObject (also ErrCorruptState)
//     naming its key: history and the API report it, never serve the bytes.
//     CheckObjects (tqw-dsl store check) reads every definition and large
//     output and walks every run's records, naming each damaged or missing
//     object.
//   - retry is a durable delay back to the same step (ContinueAfter); sleep
//     and wait_signal park the run in the runtime (ContinueAfter,
//     ContinueOnSignal), holding no worker; call submits a child run whose
//     termination signals the parent through the terminal hook.
//   - Expensive actions see a memo that survives crashes and DSL retries of
//     one visit of a step (the run memo under "v<visit>."), so the llm
//     action never pays twice for an answer it already received; foreach
//     items that finished are memoized the same way and not redone.
//   - Secrets are read from the environment when an action runs and never
//     stored: their values, and their URL-escaped, JSON-escaped, base64
//     and hex forms (encodedForms lists them), are replaced by *** in outputs,
//     variables, errors (also those returned to the runtime), history,
//     results, memo entries and the logs this package writes; so are the
//     forms of values an action reports through Call.Derive (HTTP Basic
//     user:password) that carry a secret. A secret shorter than
//     MinSecretLength is refused (Workflow.CheckSecrets at submit; a run
//     whose worker holds one fails) rather than redacted out of unrelated
//     data. Redaction scans each text once per form: 8 forms for an
//     alphanumeric secret, up to about 100 for one full of characters that
//     encodings escape (figures: docs/BENCHMARKS.md#secret-redaction).
//   - The values of one set are all evaluated against the variables before
//     it, then assigned together, so a set means the same in any key order.
//   - A run that ends ends its children: the terminal hook cancels every
//     child run the run started that is still active (cascading down the
//     call tree), however the run ended (cancelled, failed, reconciled).
//     Children are found through tqw/child/<parent>/<child>, written in the
//     child's submission commit, so a child submitted by a step whose
//     outcome was then discarded is found too.
//   - One run id, one history: Submit refuses (ErrRunIDReused) the id of a
//     finished run while its result or its history is retained, and a run
//     submitted under such an id by another path fails at its first step
//     before writing anything. Once retention removed both, the id is free.
//   - With Options.Retention, the records of a run that terminated more
//     than Retention ago (step outputs, history, wait and child index
//     entries, large-output objects) are deleted by Sweep / SweepLoop. The
//     terminal hook writes a retention marker tqw/expire/<time>/<run> in
//     the commit that acknowledges the run's termination notification, so
//     deletion is driven by durable state; a sweep reads markers oldest
//     first, deletes objects, then the KV records with the marker last, so
//     a crash mid-sweep is finished by the next pass. A run the runtime
//     still shows (its result retained, or a segment listing it) keeps
//     its records, so status, history and reuse agree; a sealed run's
//     large outputs and rerun claim go as the runtime expires it
//     (runtime.RunRecordExpirer). The hook also drops at once the wait
//     entry of a run that ended while waiting.
//   - Sealed runs (runtime.Options.Sealing; the engine and the CLI seal by
//     default): the Interpreter is a runtime.RunRecordOwner, so a run's
//     history, step outputs and child index move into its sealed segment
//     with its result and leave the KV store; History reads them back
//     through a Reader from WithSealed (the CLI's status and history and
//     the server do), and they expire with the segment.
//   - History reports durable records only: on the writer's queue it
//     returns, after its last read, once what it read is durable
//     (runtime.AwaitDurable): free when nothing is pending, else the wait
//     for the WAL PUT holding the latest settlement, bounded by the kv's
//     commit delay more. Position needs no barrier: a step job's payload
//     never changes, so the job of a durable status is durable. A sealed run then
//     needs a retention marker only for what lives outside the KV (a
//     rerun claim, large-output objects), so a plain run leaves nothing
//     of the interpreter's in memory.
//   - A run deadline (the workflow's timeout) is fixed once, at the run's
//     first step, as the runtime's durable submission time plus the
//     timeout, and rides in the state: no crash, restart or redelivery
//     moves it. Past it the current step is cancelled (an action's
//     context ends at the deadline; sleep, wait_signal, call and retry
//     delays are scheduled to wake at it at the latest and, woken by
//     their timer, tell the deadline from their own timeout; a step
//     delivered later does not run; a wait_signal's record is dropped, a
//     call's child cancelled) and the run fails with run.timeout, which
//     retry, catch and on_timeout never see (deadline.go).
//   - on_error and finally (handlers.go) run in the run, as its next
//     durable steps, before the run ends: before the runtime commits its
//     end, so before its end is reported, sealed, or its children
//     cancelled. The state carries how the run is to end (outcome,
//     error, result); the run ends so once the handlers ended, whatever
//     they did: a handler block's failure is recorded in the history and
//     appended to the end's text, never replacing the outcome. Each
//     handler block is bounded by HandlerTimeout from its first step, the
//     run deadline does not apply to it. A run whose workflow has handlers
//     is submitted with runtime.RunSpec.CancelHandlers: its first cancel
//     discards the current step (a history record says cancelled) and
//     enters on_error; a cancel while handlers run ends the run at once
//     and never re-enters them.
//   - A run that failed or was cancelled can be continued in place
//     (Redrive, through runtime.Runtime.Redrive): a failing step returns
//     the state at that step with its Fail, so the run resumes at it (in a
//     delivery that folded several steps, not at the delivery's first),
//     with every completed step's output and the variables as they were,
//     attempt 1 and a new visit (memo entries of the failed visit are not
//     reused). A new definition is taken only when every completed step
//     and the resumed one exist in it with the same kind (IncompatibleError
//     lists the differences); Skip records the step as done
//     (OutcomeSkipped) and routes on. An OutcomeRedriven history record
//     commits with the redrive. A child run is refused: its parent
//     already received its end. Cost: the runtime's redrive, plus, with a
//     new definition, the run's history read (memory reads; a sealed
//     run's segment data object, one GET) and the definition's pinning.
//     Skip also takes an active run that waits at the named step (sleep,
//     wait_signal; PrepareSkip): one commit replaces the waiting step by
//     the same step with its wait ended and Skip set, and drops its wait
//     record; no OutcomeRedriven record (the run never ended). A signal to
//     the old key is then only buffered. Cost: the runtime's skip.
//   - A bad signal never fails a run. The Interpreter is the runtime's
//     SignalValidator: a signal whose receiving step is known (one waiting
//     on its key, or one predicted at submission: a wait_signal whose
//     with reads only input and run, under a key containing the run id,
//     whose wait record rides the submission commit) is refused with
//     signal.ErrRejected when it is not JSON or breaks the step's
//     schema, before anything is written, whoever sends it. A payload that
//     reaches the step anyway is set aside: an OutcomeSignalRejected
//     history record (key, size, reason; never the payload), and the step
//     waits on until its original deadline. A redelivery of that step sets
//     the same signal aside again under the same history record, and a
//     signal sent meanwhile stays buffered for the renewed wait.
//   - Definitions (tqw/defs/<sha256>) are never deleted: they are small,
//     content-addressed and shared by every run of the same file, so their
//     number grows with workflow versions, not runs; and a definition is
//     pinned before its run exists (PrepareRun writes it from another
//     process before the writer applies the submission), so no
//     reference count read by the writer can prove it unused.
//   - A workflow's labels: are evaluated when a run is submitted, on its
//     input and run only, before anything is written: a label that is
//     not a string or breaks the label rules (runstate.ValidateLabels)
//     refuses the submission (runstate.ErrInvalidLabel) with nothing
//     pinned; WithLabels wins on a key. They ride in the run's
//     submission commit into the runtime's label index. A child run
//     carries its own workflow's labels, never its parent's. outputs:
//     is a succeeding run's result, evaluated as it succeeds (with the
//     value it would have ended with as output); an outputs expression
//     that fails fails the run with an expression error.
//   - Long loops: a run's history keeps the records of the latest
//     Options.HistoryVisits visits of each step (visits.go; default 100)
//     and counts the others, so a run's stored history, its sealed
//     segment and the writer's memory are bounded by the window times
//     the steps, not by how often a loop goes round. Keeping a window
//     rather than restarting the run keeps its id, state and steps.X
//     (the latest output of each step, never dropped). The settlement
//     that writes a step's record deletes the records past the window
//     in the same commit, except those written in the same delivery
//     (the next delivery deletes them); the large outputs of deleted
//     records that the step's latest output does not name are deleted
//     by the step's next delivery (its record's deletion is durable by
//     then), or by the retention sweep after the run ends.
//   - parallel and map (parallel.go, map.go, join.go): each branch and
//     each map item is a child run executing one block of the parent's
//     pinned definition (state.Block; stepAt resolves the step), with the
//     call machinery: ids derived from parent, step, visit and attempt, a
//     redelivery submitting only the children not yet there, the child
//     index in each child's submission commit (so the parent's end
//     cancels them), the terminal hook reporting the end. Since the
//     runtime buffers one signal per key (the latest wins), one signal
//     cannot carry several children's results: each child's end is
//     written durably under the parent's tqw/join/ key first, then rings
//     the parent's doorbell, and the parent reads the join records at
//     each wake. So no end is lost (a ring while the parent is busy stays
//     buffered for its next wait), results never ride in the Continue
//     payload (a map keeps a cursor: counters and the indexes of at most
//     concurrency items), and a map's state stays the same size for 10 or
//     10 million items. Join records go with the run's other records at
//     retention.
//   - Tracing (Options.TracerProvider; off when nil, and then no span is
//     created): a span per run in this process, from the first step it
//     runs to the run's end or EndRunSpans (the process giving its runs
//     up), a child span per DSL step run (AttrStep, AttrAction,
//     AttrAttempt, AttrOutcome; error status when the attempt failed, with
//     the error text the history stores), and a span per Submit. Submit
//     stores the submitting span's traceparent as HeaderTraceParent, so
//     the run spans of every process that works the run, after a crash
//     too, are children of it in one trace; a child run's spans are
//     children of its call step's. The pure steps of one delivery have a
//     span each (AttrStepNumber is the runtime step they share). Spans
//     carry no input, output or header; an action's context carries the
//     step's redactor (tracing.WithRedaction), which the HTTP client
//     spans apply.
//   - Forks (fork.go): FindForkPoint rebuilds a run's variables and step
//     outputs as they were just before it first reached a step, from its
//     history (live or sealed), and PrepareFork submits a new run there,
//     linked by HeaderForkFrom and HeaderForkAt; history records written
//     before forks existed are refused (ErrNotForkable), never guessed.
//     Forks and redrives consult a content-addressed answer store
//     (answers.go) so an unchanged llm request, or http request with
//     cache, is not paid twice; a reused answer is counted
//     as saved (TotalLLMSavedTokens, TotalLLMSavedUSD), never as paid.
//     DiffHistories compares two histories; ExportRun and ImportRun move
//     a run between stores as a checked folder (export.go), writing
//     nothing for a damaged one.
//
// # Costs in object-store requests
//
// Per runtime step (an effectful DSL step and the pure ones after it, or
// a run's leading pure steps): the runtime's transition (a share of one
// WAL PUT) plus the KV effects riding in it, a history record per DSL
// step; a pure step costs no request of its own. No extra request unless
// an output exceeds InlineOutputLimit (one PUT, and one GET for each later
// step reading it).
// With the history window (Options.HistoryVisits), each DSL step's
// history record also rewrites its step's visits list (a KV record of
// about 6 bytes per kept record, in the same settlement) and, once the
// window is full, deletes the oldest visit's records in it (memory reads
// of them first): no request of its own; a dropped record's large
// output costs one DELETE, in the step's next delivery.
// Submit costs the runtime's submit commit and, for each definition of
// the call tree this interpreter has not pinned or read yet, one HEAD,
// plus one create-only PUT when the store lacks it: a definition is
// pinned once per process (concurrent first submissions share one HEAD
// and PUT), and resubmitting a workflow writes nothing but the run.
// PrepareRun, which has no such memory, costs one HEAD per definition. A call step's child submission costs another submit commit
// (the child index rides in it). A definition not yet cached costs one GET.
// A parallel step costs a submit commit per branch, then per wake (a
// branch's end) a runtime step and one memory read per branch; each
// branch end costs its terminal hook a durable KV put and a signal. A map
// step costs, on entry, its items in KV records of 64 (a larger record as
// an object: one PUT, one GET per read) in its settlement; per item a
// submit commit, the item's own steps, the hook's put and signal; per
// wake a runtime step, one memory read per running item and, when it
// starts items, one read of their chunk; and at the end one KV scan of
// the join records.
// A branch or item reads the parent's input from one KV record (a memory
// read); an input over 4 KiB is written once per step visit as an object
// (one PUT) that each process GETs once and keeps decoded in a cache of
// the last 16, so an item never decodes all the map's items.
// A lone run watched to its end (Watch) costs one WAL PUT for its
// submission and one per runtime step: one per delivery of an effectful
// step (each attempt; a sleep, wait_signal or call also its wake), plus
// one when the run starts with a pure step, plus one per 101 pure steps
// in a row (a 101-step pure loop: 2 PUTs; a 10-step no-op action run:
// 11). The end reaches the watcher through the runtime's RunEndObserver,
// not a notification job.
// CheckObjects costs one LIST per 1,000 objects under tqw/defs/ and
// tqw/outputs/, one GET per object there, the run listing (one
// runtime.Inspector.ListRuns page per 1,000 runs) and one history read per
// run (memory reads of the KV; a sealed run's records, one GET of its
// segment's data object unless cached).
// Memo reads and writes cost one GET and one PUT each (llm and foreach
// only). A paid llm answer or a kept http response (cache) costs one more
// PUT (the shared answer store); a fork's or redrive's llm attempt that
// its memo does not answer, or cached http attempt, one GET of it. What
// a fork needs rides the history records (no request); a fork costs one
// PUT per inherited large output plus its submission, ExportRun and
// ImportRun what their docs say. A predicted wait is one KV record in the submission commit (at
// most 16 per run); checking a signal (ValidateSignal, CheckSignal) costs
// memory reads, plus one GET for a definition not cached yet. Tracing
// costs no request: the trace header rides in the submission commit.
// A run deadline costs nothing: it rides in the state. Handlers cost what
// their steps cost (entering one is part of the settlement of the step
// that ended the run's steps, or a delivery of its own when the handler's
// first step is effectful); a cancel handed to them costs the runtime's
// hand-over commit instead of its terminating one.
//
// A termination costs the runtime's notification job (riding the
// terminating commit) and its acknowledgement (one durable commit, which
// carries the retention marker and stale wait deletes) for every run that
// is a child, did not succeed, has predicted waits, or ends while
// Retention is set, unless the runtime seals and the run is known clean
// (this process saw it start; it stored no large output, started no
// child and carries no rerun claim: it needs no retention marker); a
// succeeded top-level run without any of these costs nothing extra.
// Cancelling children costs one Cancel (two durable commits) per child
// still active. A sweep
// pass costs nothing when nothing expired; per expired run, one LIST per
// 1,000 large-output objects, one DELETE per object and one durable commit
// per 256 KV records; its scans are memory reads on the writer. Reuse
// checks (Submit, first step) are memory reads.
//
// # What it does not do
//
// Steps are delivered at least once: an action interrupted by a crash runs
// again (http sends an idempotency key; llm and foreach items are memoized).
// A child run is submitted by the calling step before its settlement; the
// child's id is derived from the parent run and step number, and a
// redelivered step submits only when no run of that id exists, so a crash
// in between never starts the child twice (while its result is retained).
// Without Options.Retention nothing is deleted; SweepLoop must run in the
// process that owns the queue (New does not start it). A notification
// the queue dead-letters (its hook failed every attempt) writes no marker,
// so that run's records are kept. A child cancelled because its parent
// ended leaves its end signal buffered under tqw.call:<child> in the
// runtime. A run id reused in the moment between the expiry of the run's
// records and of a child's retained result (a child cancelled at the
// run's end finishes a little after it) makes that call step find the old
// child and wait, until its timeout, for an end already reported.
// A run submitted through PrepareRun (another process's inbox) has no
// trace header unless its context carried a span: each process's run
// span is then a trace of its own. A run span stays open (in memory)
// while the run waits in this process.
// foreach cannot run sleep or wait_signal: Load refuses such a workflow
// (foreach.wait-action), and a run pinned to one before this check fails.
// Start events and spans are not durable: a delivery whose settlement
// never commits leaves the start events and spans of the steps it ran,
// and its redelivery sends and makes them again. A delivery's first
// step sends its start event as it runs; the pure steps folded after it
// send theirs with their end events once the delivery's settlement is
// durable, in order (each step's end, then the next step's start), so
// a folded step whose delivery never commits is never reported.
package interpreter
