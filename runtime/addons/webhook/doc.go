// Package webhook delivers run terminations as HTTP callbacks: Hook is the
// runtime.TerminalHook of the seed's WebhookTerminalHook.
//
// A run opts in with a "callback_url" header on its runtime.RunSpec. When
// it terminates, the runtime enqueues a notification job in the commit that
// terminates the run (so the callback exists exactly when the termination
// committed, once), and Hook, running as that job's worker, POSTs the
// outcome as JSON to the URL:
//
//	{"run_id":"r1","status":"succeeded","result":{...},"step":3,
//	 "submitted_at":"...","finished_at":"..."}
//
// with the headers Workflow-Run-Id and Workflow-Run-Status (and, with a
// signing secret, Workflow-Signature: "t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>">").
//
// # Guarantees
//
//   - A 2xx response completes the notification.
//   - 408, 429, 5xx, timeouts and transport errors are transient: the
//     notification job is retried with the notification queue's backoff
//     until its attempts run out, then dead-lettered.
//   - Any other status (other 4xx, unfollowed 3xx) and an unusable URL are
//     permanent: the notification is dead-lettered at once, where operators
//     find it with the queue's dead-job listing.
//   - Delivery is at least once: a crash after the POST and before the
//     notification's acknowledgement repeats it. Receivers deduplicate on
//     Workflow-Run-Id (a run id terminates once per submission).
//
// # Cost in object-store requests
//
// Runs without the header cost nothing (Observes is false, no job). A
// notified run costs the notification job: it rides the terminating commit,
// then one claim and one acknowledgement (shares of WAL PUTs); each retry
// one nack. The HTTP request itself touches no store.
//
// # What it does not do
//
// It does not follow the response's Retry-After (the queue's backoff
// decides), does not deduplicate on the receiver's behalf and sends none
// of the run's other headers (they may hold secrets). Results that are
// not JSON are sent base64-encoded in "result_base64"; results over
// runtime.MaxRetainedResult are omitted ("result_omitted": true).
package webhook
