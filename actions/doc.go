// Package actions defines what a workflow step calls: the Action interface,
// the Call an interpreter hands to one attempt, the typed Error an attempt
// fails with, a Registry of actions by name, and the strict argument decoder
// the built-in actions share.
//
// Guarantees:
//   - An Action's Execute runs exactly one attempt. Retries, backoff, catch
//     routing and durable recording of outputs belong to the interpreter;
//     an action only says, through Error.Type and Error.Retryable, what went
//     wrong and whether trying again can help.
//   - Outputs are JSON-compatible values (map[string]any, []any, string,
//     int64, float64, bool, nil), so the interpreter can store and replay them
//     byte for byte.
//   - Argument errors are Errors of type "validation" that name the argument
//     at fault (see DecodeArgs and ArgError).
//
// Costs: nothing in this package touches object storage. Actions never see
// the queue or the store; the only durable state an action may use is the
// per-step Memo the runtime hands it (one KV read before, and one KV write
// after, an expensive call).
//
// Not done here: secrets redaction in outputs and logs (the interpreter
// redacts; actions never log secret values and report through Call.Derive
// the values they build from secrets in forms the interpreter cannot see
// through, such as Basic credentials), expression evaluation
// (Args arrive rendered), and the built-in set itself, which lives in
// package actions/builtin because the built-in actions import this package.
package actions
