// Package interpreter runs parsed tqw workflows durably: Interpreter is one
// runtime.StepRunner that executes any workflow file, one DSL step per
// durable runtime step.
//
// # Guarantees
//
//   - A run pins its definition. Submit stores the YAML of the workflow and
//     of every workflow it calls under tqw/defs/<sha256> (create-only) and
//     the run carries the hashes, so every step runs against the exact bytes
//     submitted, whatever happens to the files and whichever process
//     resumes the run. Parsed definitions are cached in memory by hash.
//   - The run input is checked against the workflow's input schema before
//     anything is written; a rejected input leaves the store unchanged.
//   - The state between steps (the current step, variables, attempt and
//     wait bookkeeping) rides in the runtime's Continue payload as
//     MessagePack. A step's output, its history record and the wait index
//     are KV effects of the step's settlement, so they commit with the
//     transition or not at all. Outputs over InlineOutputLimit go to their
//     own object, written before the settlement and referenced from KV.
//   - retry is a durable delay back to the same step (ContinueAfter); sleep
//     and wait_signal park the run in the runtime (ContinueAfter,
//     ContinueOnSignal), holding no worker; call submits a child run whose
//     termination signals the parent through the terminal hook.
//   - Expensive actions see a memo that survives crashes and DSL retries of
//     one visit of a step (the run memo under "v<visit>."), so the llm
//     action never pays twice for an answer it already received; foreach
//     items that finished are memoized the same way and not redone.
//   - Secrets are read from the environment when an action runs and never
//     stored: their values are replaced by *** in outputs, errors, history,
//     results and the logs this package writes.
//
// # Costs in object-store requests
//
// Per DSL step: the runtime's transition (a share of one WAL PUT) plus the
// KV effects riding in it; no extra request unless an output exceeds
// InlineOutputLimit (one PUT, and one GET for each later step reading it).
// Submit costs one create-only PUT per definition (a definition already
// stored fails the precondition and is reused) and the runtime's submit
// commit; a call step's child submission costs another submit commit. A definition not yet cached costs one GET. Memo reads and writes
// cost one GET and one PUT each (llm and foreach only).
//
// # What it does not do
//
// Steps are delivered at least once: an action interrupted by a crash runs
// again (http sends an idempotency key; llm and foreach items are memoized).
// A child run is submitted by the calling step before its settlement; the
// child's id is derived from the parent run and step number, and a
// redelivered step submits only when no run of that id exists, so a crash
// in between never starts the child twice (while its result is retained).
// History, outputs and definitions are not deleted by any retention sweep.
// foreach cannot run sleep or wait_signal.
package interpreter
