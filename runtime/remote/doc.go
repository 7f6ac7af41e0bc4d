// Package remote is remote control of a runtime: processes that do not
// own a store (a Client: the CLI's submit, signal and cancel while a
// worker runs) send commands through the store itself, and the one that
// owns it (its writer, running ServeInbox beside its worker) applies each
// exactly once and answers it. A Client never opens the store as a
// writer, so it never fences the worker.
//
// Submit, Signal, ClearSignal, Cancel, Redrive and Bulk become command
// objects in the
// store's inbox, which the writer drains (ServeInbox, DrainInbox),
// applying each exactly once, also across its own crashes, and answering
// it. An answer is written only once every effect it reports is durable.
// Each command ends with one outcome: its result; a rejection naming a
// sentinel error (Client returns a *CommandError matching it), nothing
// applied; "internal", the writer gave up on store errors before the
// command had started, nothing applied; or "uncertain", it gave up after
// the command may have taken effect. An uncertain command stays in the
// inbox and is retried at every pass as the continuation of its first
// attempt (an applied-marker per command id), so it takes effect at most
// once, and the attempt that succeeds replaces the answer with the true
// outcome, which the Client waits for (ErrOutcomeUncertain if it does not
// come in time). A store error that stops the kv is never answered; the
// next writer applies the command. Status, ListRuns and ListSignals of a
// Client read the durable state through a queue.Reader.
//
// # Objects
//
// Under InboxOptions.Prefix (default "inbox"):
//
//	inbox/<id>          a command (JSON), written create-only by a Client;
//	                    <id> is a ULID, so a LIST returns commands oldest first
//	inbox-answers/<id>  its answer (JSON), written create-only by the
//	                    writer, read and deleted by the Client; the writer
//	                    sweeps abandoned ones after InboxOptions.AnswerTTL
//	inbox-bell          the doorbell (JSON: "tqw":"inbox-bell" and the id
//	                    of the last command sent), overwritten by Clients
//	                    that ring it, only ever HEADed by the writer, never
//	                    deleted
//
// and, in the queue's caller KV, workflow/inbox/<id>: the command's
// applied-marker (MessagePack) while it is in flight. These formats are
// the same, byte for byte, as when the inbox was part of package runtime,
// so a store written then keeps working (TestWireFormatsUnchanged).
//
// # Recognition
//
// The writer touches only what it can prove is the inbox's. A command is
// an object whose name is a command id and whose JSON carries
// "tqw":"inbox-command" and, as "id", its own name; an answer likewise
// carries "tqw":"inbox-answer" and its name. Anything else under the
// prefixes (a user's object, another component's) is left as it is and
// reported in a warning, once per object and hour; a command that is the
// inbox's but cannot be applied (unknown kind or format) is answered
// invalid_command. Every component of a store keeps its objects under its
// own prefix (docs/STORE-LAYOUT.md lists them): ServeInbox, DrainInbox
// and NewClient check the inbox's prefixes against the runtime's
// (runtime.Runtime.StoreNamespaces: queue, memo, writer lease, those
// declared with runtime.Options.StoreNamespaces) and refuse an overlap with
// objstore.ErrNamespaceOverlap naming both.
//
// # Invariants
//
// Each command is applied exactly once, even if the writer crashes
// anywhere while draining it:
//
//  1. The answer is the commit point: a command is answered only after its
//     effects are durable (the writer waits for every commit it made or
//     saw, kv Sync, before the answer's PUT), and a command that has an
//     answer is never applied again (the writer reads the answer before
//     anything else). The command object is deleted only after its answer
//     exists, the marker only after the command object is gone.
//  2. A command whose first attempt wrote nothing and was not answered may
//     be applied again: nothing observed the first attempt.
//  3. Signal is not idempotent, so its marker commits atomically with the
//     signal's buffer write (runtime.Runtime.BufferSignal, guarded by the
//     marker's absence), and the wake of a registered waiter commits
//     atomically with consuming that buffer entry and recording the
//     outcome in the marker (runtime.Runtime.DeliverSignal). A redrain that
//     finds the marker never buffers again; it resumes the delivery only
//     while the buffer still holds this very signal, so a signal is never
//     delivered twice.
//  4. ClearSignal deletes the buffer and writes its marker in one commit
//     (runtime.Runtime.ClearSignalWith).
//  5. Submit and Cancel are idempotent for a live incarnation of a run but
//     not across its end (a terminated run id is free again, so a repeated
//     Submit would start a second run and a repeated Cancel could cancel a
//     newer incarnation). Their marker records the run's incarnation
//     (runtime.Runtime.Incarnation: active nonce, retained result nonce)
//     seen before the first attempt; it is committed before the command's
//     own commit, which therefore makes it durable. A redrain compares: an
//     incarnation that appeared since was started by this command, and
//     Cancel is only repeated on the incarnation it was meant for. With
//     no retained results (a negative runtime.Options.ResultRetention) a run submitted by the first
//     attempt and terminated before the redrain leaves no trace, and the
//     redrain submits it again.
//  6. An uncertain answer (the last attempt failed after the command may
//     have taken effect) keeps the command object and its marker, and the
//     writer applies the command again at every pass: each attempt is a
//     continuation of the first through the marker (3, 5), so the command
//     takes effect at most once. The attempt that succeeds replaces the
//     uncertain answer (If-Match on its ETag) with the true outcome; the
//     Client waits for that one and never deletes an uncertain answer, so
//     it cannot delete an answer it has not read.
//
// With runtime.Options.LeaseGate the writer applies no command while its
// writer lease is not valid (runtime.Runtime.AwaitLease), and ServeInbox
// ends with the lost lease.
//
// # Latency: how a command reaches the writer, and its answer the client
//
// On a local file store (file://) the writer watches the inbox folder and
// the Client the answers folder through the operating system's change
// notification (github.com/fsnotify/fsnotify: inotify, kqueue), so a
// command is applied as soon as its object is created and its answer read
// as soon as it is written. Notification only shortens waits: every
// waiter keeps polling as below, since a file system may send no events
// (network mounts) or drop some (a queue overflow).
//
// Elsewhere (S3) the writer polls adaptively: right after a pass found a
// command it LISTs again after MinInterval (200 ms), doubling after every
// empty pass up to MaxInterval (5 s). Between two LISTs it reads the
// inbox's doorbell with a HEAD every BellEvery (500 ms): a single object,
// <prefix>-bell, that a Client with ClientOptions.RingBell (the CLI's)
// overwrites with the command's id after each command it sends, so a
// command sent to an idle writer is applied within about half a second
// instead of up to 5 s. The Client reads its answer every PollMin (100 ms)
// for PollFastFor (2 s), then backs off to PollMax (1 s).
//
// # Cost in object-store requests
//
// An idle writer makes, per minute: on S3, 12 LISTs (one per MaxInterval)
// and 120 HEADs of the doorbell (one per BellEvery), 132 requests, about
// $0.16 a day at $0.005 per 1,000 LISTs and $0.0004 per 1,000 HEADs
// (17,280 LISTs ≈ $0.086 and 172,800 HEADs ≈ $0.069); on a file store 12
// LISTs and no HEAD (change notification replaces the doorbell). The
// writer lease's renewals come on top (see runtime/lease). Per command the
// writer adds about four requests (a GET of the answer, a GET of the
// command, the answer's PUT, the command's DELETE) plus the command's own
// commits, and the passes that follow it (LISTs at 200 ms, 400 ms, ...
// until it is idle again: about seven more LISTs in the next 5 s).
// On the Client, per command: the command's PUT, the doorbell's PUT (with
// RingBell), a GET per poll of the answer (one every 100 ms while it
// waits, for up to 2 s, then doubling to one per second), and the answer's
// DELETE; on a file store with notification the polls double from the
// start. Status and ListRuns cost a Reader Refresh; see Client.
// Figures: docs/BENCHMARKS.md#inbox and docs/BENCHMARKS.md#signal-latency.
//
// # Design
//
// The package sits above package runtime and reaches it only through its
// exported control surface (runtime/control.go): Submit, Cancel,
// Incarnation, AdmitSignal, SignalValue, BufferSignal, SignalBuffered,
// DeliverSignal, ClearSignalWith, SignalExpiry, AwaitLease, and Store,
// Queue, Clock, Logger, StoreNamespaces for what the runtime runs on. That
// surface is what any control plane needs (the coming HTTP API too): the
// runtime's own keys and records stay unexported, and the signal
// operations take the control plane's record as an opaque caller-KV write
// committed with their own, so the exactly-once logic lives here while
// the runtime alone writes its records. The markers stay where they
// always were, under workflow/inbox/, which the runtime reserves for the
// inbox as a control namespace (runtime.ControlKVPrefix("inbox")) and
// never touches: moving them would strand the markers of commands in
// flight in a store written before, and a redrain that misses its marker
// could deliver a signal twice. ServeInbox, DrainInbox and InboxWaiting
// are functions of a *runtime.Runtime, as they were its methods, and
// build their state per call, so their requests are those they made
// before the move.
//
// # What it does not do
//
// Commands are applied in the order of their ids (ULIDs: the sender's
// clock, to the millisecond), not in the order they arrived. A command a
// writer rejected is not retried; a command sent while no writer runs
// waits in the inbox until one does (ClientOptions.CommandTTL bounds how
// long). It does not make a process the store's writer: runtime/lease
// does.
package remote
