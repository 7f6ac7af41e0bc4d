// Package bulk runs one pipeline over many inputs on the durable runtime:
// the Go counterpart of taquba-workflow's bulk module.
//
// A Pipeline is a list of phases. Runner.Submit starts a batch: one run
// per input item, whose single step runs the phases in order, each
// memoized in the step's memo (runtime.Step.Memo), so a retried,
// redelivered or replayed item skips the phases it completed and pays for
// them once. Phases record named integer costs (tokens, micro-dollars)
// with PhaseContext.AddCost.
//
// # Guarantees
//
//   - Exact totals. Every item has one record in the caller-KV namespace
//     ("<prefix><batch>/i/<index>"), written pending in the commit that
//     enqueues the item and replaced by its terminal record in the commit
//     that ends the item's run (or, when the step did not decide the end
//     (an external cancel, a dead-letter), by the terminal hook with a
//     compare-and-put). Progress and the cost rollup are sums over these
//     records, so a redelivered notification or step cannot count twice,
//     and a restarted process resumes with the same totals: the records
//     are the durable rollup, the in-memory aggregate is rebuilt from them.
//     Item costs are the sum of the item's memoized phase results; a phase
//     attempt that failed records nothing.
//   - Failure threshold. After each item's terminal record commits, the
//     hook checks the batch's Threshold; once crossed, the batch record is
//     marked stopped (durably), running items are cancelled, queued items
//     end as Cancelled when delivered and unsubmitted items are recorded
//     Cancelled without running.
//   - Resumable submission. Submit is idempotent per (batch, index, input):
//     after a crash, Submit again with the same items to enqueue those that
//     were not.
//   - Replay. Runner.Replay resubmits the failed and cancelled items as a
//     new generation of the same run id (so the memo is shared); late
//     notifications of the older generation are ignored.
//   - Results. WriteResults streams finished items as JSON lines in index
//     order.
//
// # Cost in object-store requests
//
// All records are queue KV values, so their writes are shares of WAL PUTs
// (group commit): Submit costs one commit for the batch record and one per
// item (up to WithSubmitConcurrency in flight, so they share PUTs). An item
// costs its claim and its terminating settlement (which carries its
// record), plus the notification (one claim and one ack). Each phase costs
// one GET (memo lookup) and one PUT (memo store); a retried item one GET
// per completed phase. A hook-written record costs one GET per phase plus
// one commit. Progress, Wait and WriteResults read memory, plus one GET per
// output over 64 KiB (kept in the memo only).
//
// # What it does not do
//
// Items and outputs ride in KV values: inputs are limited to MaxItemSize,
// outputs over 64 KiB stay in the last phase's memo (so memo retention
// removes them). Progress scans the batch's records, linear in its size.
// Costs of failed phase attempts are not counted. Submit must be called
// again after a crash to enqueue items it had not reached; Wait blocks
// until it is.
package bulk
