// Package jobs runs single-shot typed tasks on the durable runtime: the Go
// counterpart of taquba-workflow's jobs module. Use it when a caller awaits
// a typed return value and there are no intermediate steps to persist; use
// a runtime.StepRunner when the caller follows a run through cancellation
// and a terminal hook instead.
//
// A job type is an input struct that implements Job[Out]: a name and
// Run(ctx, JobContext) (Out, error). Register it on a Runner, Submit
// instances, and Await the Handle for the typed result:
//
//	type SendEmail struct{ To string }
//	func (SendEmail) JobName() string { return "email.send" }
//	func (e SendEmail) Run(ctx context.Context, jc jobs.JobContext) (string, error) { ... }
//
//	r, _ := jobs.New(q, store)
//	_ = jobs.Register[SendEmail](r)
//	w := r.Spawn(ctx)
//	h, _ := jobs.Submit(ctx, r, SendEmail{To: "a@example.com"})
//	id, err := h.Await(ctx)
//
// # Guarantees
//
//   - Each job is one single-step run of the runtime. Its outcome record
//     (output, or the failure with its class, code and detail) is written in
//     the caller-KV namespace under "<prefix>results/<job id>" in the same
//     commit that terminates the run, so Handle.FetchResult and Await work
//     after a restart, from the store alone.
//   - Terminations that commit without the job's step deciding them (an
//     external Cancel, a step the queue dead-lettered) get their record from
//     the runner's terminal hook, before any waiter is woken.
//   - A job whose input implements Idempotent gets a job id derived from
//     its name and key: a duplicate submission while it runs joins the
//     running job, and one after completion returns the stored outcome
//     without running again. The same key with a different input fails with
//     ErrInputMismatch (runtime.ErrInputMismatch).
//   - Run is invoked at least once: a retried or redelivered job runs
//     again unless its outcome already committed. JobContext.Memo caches
//     expensive side effects across attempts.
//   - Errors are classified transient (retried with the queue's backoff up
//     to WithMaxAttempts) or permanent (fails at once): errors built with
//     Permanent or runtime.Permanent are permanent, a Classifier on the
//     input decides otherwise, anything else is transient. The awaiter gets
//     a *Failure carrying the message, the class and, when the job's error
//     implements Coder or Detailer, a code and a JSON detail.
//
// # Cost in object-store requests
//
// Everything is a queue commit (a share of one WAL PUT under group
// commit): Submit one commit; a job's claim and its terminating settlement
// (which carries the outcome record) one to two; the completion
// notification (enqueued in that settlement) one claim and one ack. Await,
// FetchResult and a duplicate submission read memory only. A record the
// hook writes (cancel, dead-letter) costs one more commit. Memo entries
// cost one GET or PUT each.
//
// # What it does not do
//
// Inputs and outputs are JSON: keep them small (the record is a KV value,
// at most queue.MaxKVValueSize); put large data in objects and pass keys.
// Outcome records are kept until Forget deletes them; there is no
// automatic retention. A Handle awaits in the process that runs the worker;
// another process reads outcomes with FetchResult on a reopened Runner.
package jobs
