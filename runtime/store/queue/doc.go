// Package queue is a durable job queue with Taquba's semantics whose only
// durable home is an object store, built on runtime/store/kv.
//
// # Model
//
// Jobs live in named queues. A job is pending (claimable), scheduled
// (claimable from RunAt), claimed (leased to a worker), done (acked; kept
// only for the queue's KeepDoneJobs) or dead (out of attempts or
// dead-lettered; kept for DeadRetention, forever when 0, or until
// RequeueDead). Claims take the highest priority first, FIFO within a
// priority. A nack schedules the job after min(BackoffBase*2^(n-1),
// BackoffMax) for attempt n, or dead-letters it when n reached MaxAttempts.
// A dedup key blocks a second job with the same key in the same queue while
// the first is pending or scheduled; it is released at claim and taken back
// (if still free) when the job returns to pending or scheduled.
//
// # Guarantees
//
//   - Enqueue, EnqueueWithKV, EnqueueBatch, Ack, DeadLetter, a nack that
//     dead-letters or cancels, Cancel, WakeScheduled, RequeueDead,
//     ApplyEffects, RemoveWaiting and the caller-KV writes are durable
//     when they return.
//     A durable call that fails with kv.ErrCommitUncertain was applied (it
//     is visible) but may not survive a crash; any other error means
//     nothing changed.
//   - Settlement effects (follow-up enqueues, caller-KV puts, deletes and
//     compare-deletes) commit in the same kv transaction as the
//     settlement: all or nothing (a compare-delete whose value changed is
//     skipped, the rest applies). They apply on an ack, a dead-letter, an
//     attempt-exhausting nack and a Cancel that removes the job; a Cancel
//     of a claimed job stores its effects with the job and the next Nack
//     of that claim removes the job and applies them (an Ack or DeadLetter
//     discards them; AckUnlessCancelled and DeadLetterUnlessCancelled
//     instead refuse, in the same transaction, and leave the claim to the
//     caller). ApplyEffects commits effects without a settlement,
//     guarded by expected caller-KV values; RemoveWaiting, guarded the
//     same way, removes a scheduled job with them (never a claimed one).
//   - A settlement by a claim that is not the job's current one fails with
//     ErrClaimLost and changes nothing. Each claim carries a token stored
//     on the job record; reaping, re-claiming, requeueing at Open and
//     removal all change or drop it.
//   - Delivery is at least once. Leases live in memory: the reaper requeues
//     a job whose lease expired (dead-letters it when that was its last
//     attempt), and Open requeues every job a previous writer left claimed
//     (with the same rule, so a job that crashes the process every time
//     ends dead instead of looping).
//   - Nothing is published before it is durable: a job that a durable
//     commit enqueued, scheduled, woke or requeued is not claimed, and a
//     completion is not reported (WaitForCompletion, SettlementEffects.
//     OnDurable), until the WAL object holding that commit is in the store,
//     even though the commit is visible to reads at once. So a job that a
//     settlement enqueues (a run's next step) never starts ahead of that
//     settlement, and during a store outage no new work starts. Sync is
//     the read barrier for callers that report other reads.
//   - An Ack with SettlementEffects.ClaimFirst creates its first follow-up
//     job claimed by the caller in the same durable commit (one commit for
//     a settlement and the next claim; the job is never pending).
//   - Claims, non-dead nacks, reaper requeues, scheduler promotions and
//     retention deletions are non-durable commits: they are visible at once
//     and ride the next durable commit's WAL object. A crash can undo them,
//     which only returns a job to the state it was durably in; Open then
//     requeues it if that state was claimed.
//   - A stored job or cancel-effects record that does not decode (damage,
//     or a hostile store: lengths beyond its bytes, nesting past 16 levels)
//     fails the call that reads it with ErrCorrupt, at a cost in memory in
//     proportion to the record's size; it never panics or exhausts the
//     process.
//   - Every timestamp and timer comes from Options.Clock; clock.Mock drives
//     the scheduler, the reaper, the sweeper and Work's shutdown deadline.
//
// # Storage and costs
//
// One kv store under Options.Prefix holds everything (see keys.go for the
// layout): a small MessagePack job record per job (with a hand-written
// codec: it is rewritten at every state change), the payload inside the
// record up to 1 KiB and under its own key beyond, one index entry for the job's state (ready index ordered by
// priority then sequence, scheduled by run time, claimed, done and dead by
// time), a dedup entry and per-queue state counters updated with kv Add so
// concurrent commits never conflict on them. The ready sequence is kept in
// memory and seeded at Open from the ready index, so enqueues share no hot
// key.
//
// In object-store requests: a durable commit costs one WAL PUT shared by
// every commit in the same group-commit batch (under load many job state
// changes share one PUT); a non-durable commit costs nothing until the next
// durable one. Reads (claims, inspection) are served from the kv's
// in-memory state: no request. A payload larger than the kv's
// LargeValueThreshold (64 KiB by default) goes to its own object: one
// extra PUT at enqueue, a GET when it is read back, a DELETE when the job
// goes; smaller payloads travel inside the WAL and checkpoints. A payload
// over 1 KiB is written once and state changes rewrite only the small
// record; a smaller one rides in the record, which costs fewer kv writes
// than a key of its own. Open costs
// the kv's open (manifest, checkpoint chunks, WAL replay) plus in-memory
// scans of the counters, the ready index and the claimed index, and one
// durable commit per 512 interrupted claims it requeues.
//
// # Tests
//
// TQW_QUEUE_KILLS sets the number of SIGKILLs of the subprocess crash test
// (default 200); TQW_QUEUE_MODEL_SEEDS the number of random sequences the
// model test compares against its in-memory model (default 4).
//
// # What it does not do
//
// One process writes a store (kv fencing enforces it: an older writer gets
// kv.ErrFenced; a writer whose WAL write failed for good gets kv.ErrStopped,
// and ClaimWait and Work return either at once). Other processes read through Reader, which sees the
// durable state as of its last Refresh. There is no exactly-once delivery,
// no jitter on backoff, and no queue-level rate limiting. Lease renewals
// are in memory only, so they cost nothing but do not survive the process.
// Ordering is FIFO within a priority among jobs that became pending in the
// same process; promotions and requeues take a new place at the tail.
package queue
