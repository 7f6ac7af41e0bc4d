// Package server is the HTTP API of a store's writer: 'tqw-dsl serve' is a
// worker that also serves it. New takes what the process already opened
// (the runtime and interpreter of the writer) and opens nothing itself; the
// document of the API is openapi.json (OpenAPI 3.1, embedded as OpenAPI and
// served at /v1/openapi.json), and docs/API.md describes it for people. The
// request and response bodies are the types of package server/wire, which
// server/client decodes too.
//
// # Guarantees
//
//   - A command answered 2xx is durable: submit, cancel and signal return
//     after the runtime's durable commit, as the CLI's do.
//   - What a read reports is durable: a run, its history, its visited and
//     current steps, its wait, the list and its counts reflect only
//     commits in the store. Each answer waits, after its last read of the
//     writer's memory, for the WAL PUT holding what it read (the runtime's
//     read barrier, which Inspector's answers and interpreter.History
//     take; a run's detail reads its history last so that barrier covers
//     the rest). So a client (the UI, server/client, the CLI's status and
//     history over HTTP) that sees a step done never sees it run again,
//     whatever crashes. The cost is latency, not requests: free when no
//     commit is pending, else at most that PUT plus the kv's commit delay.
//   - Bad input changes nothing: a request is checked (body shape, run id,
//     workflow, input against its schema, signal payload against the
//     waiting step's schema) before anything is written, and refused with a
//     4xx JSON error {"error":{"code","message","field"}} naming the field.
//   - No panic escapes a handler: it is logged and answered 500.
//   - Every request leaves one audit line at info on Config.Logger (method,
//     route template, status, duration, remote address, whether a token
//     came, the run id of a run's routes) and a webhook one more (hook,
//     outcome, delivery id); never a credential, a body or the raw path
//     (audit.go). Config.Observer counts the same (server/metrics), and
//     with Config.TracerProvider each request is a server span named by
//     its route template, under the caller's traceparent. None of this
//     costs an object-store request.
//   - A submission, signal or cancellation the store does not make
//     durable within Config.DurableTimeout is answered 503 with
//     Retry-After instead of waiting for the store (the write was applied
//     and may still land). Starting answers /healthz and /readyz (with
//     the reason) while the process's store is not open yet.
//   - ConnLimiter caps the connections of an http.Server, in total and
//     per client IP: at the cap it sheds the connection idle (or without
//     a complete request header) longest, refuses with a 503 only when
//     every held one is serving a request, and refuses a client over its
//     own cap at once. It costs no store request.
//   - With Config.Token set, every endpoint except /healthz, /readyz,
//     /metrics, the UI's assets and the webhooks (which carry their own
//     signature or token) requires "Authorization: Bearer <token>",
//     compared in constant time. Without a token the caller must listen on
//     loopback only (CheckListenAddr). No CORS headers are sent, so a
//     browser allows only same-origin calls; the token travels in a header,
//     never a cookie, so cross-site requests carry no credential.
//   - Whatever the token setting, a request whose Host does not name the
//     server (Config.ListenAddr, the address the connection reached,
//     localhost on loopback, Config.AllowedHosts) is 421, one from a page
//     of another origin (Origin, Sec-Fetch-Site; Config.AllowedOrigins
//     excepted) is 403, and a POST under /v1 whose body is not of its
//     endpoint's media type (JSON; YAML for /v1/validate) is 415, before
//     authentication or any handler sees it (guard.go; docs/API.md,
//     "Browser and network model"). A wrong method is 405 with Allow.
//   - JSON bodies are I-JSON (RFC 7493): a duplicate key at any depth,
//     invalid UTF-8 or trailing data is 400 naming the field; signal keys
//     are checked by signal.CheckKey.
//   - Trust model (docs/API.md): inline workflows are refused (403
//     inline_disabled) unless Config.AllowInline; every workflow the server
//     loads calls only files of WorkflowsDir (interpreter.InFolder:
//     os.Root, one message for missing and outside); a submission that
//     declares a secret Config.Secrets does not allow is refused (403
//     secret_not_allowed) before any value is read. SecretPolicy.Getenv,
//     given to the interpreter, keeps runs submitted another way to the
//     same secrets. Cost: a folder scan (a stat per file, a parse per new
//     or changed one) when a secret no scan has seen is asked for.
//   - Recovering runs (recover.go): retry and skip redrive one run
//     (interpreter.Interpreter.Redrive); a retry's new revision is loaded
//     as a submission's workflow is (folder, inline, shell and secret
//     rules above). POST /v1/bulk acts on the runs GET /v1/runs's filter
//     selects, each at most once per request_id (runtime/remote.Bulk);
//     DELETE /v1/signals/{key} discards a buffered signal. Cost: a
//     redrive's (runtime.Runtime.Redrive: one durable commit), Bulk's per
//     run, ClearSignal's.
//   - No response carries a secret's value: outputs, errors and history are
//     redacted by the interpreter before they are stored, and the server
//     serves only what is stored.
//   - Webhooks: a request whose HMAC-SHA256 signature (GitHub or Stripe
//     style) or bearer token does not match is answered 401 and writes
//     nothing. A replayed delivery id, and a signed request seen before
//     under any delivery id (or none), are answered {"duplicate":true}
//     and write nothing: a workflow hook's run id is derived from the
//     delivery id (idempotent submission) and its run is labelled with a
//     digest of the signature in the submission's commit (a replay finds
//     it through the label index; requests of one signature are
//     serialized in this process, the store's only writer), both for as
//     long as the run is retained; a signal hook records the delivery id
//     and the signature in the same commit as the signal (kept
//     HookDedupWindow). A form-encoded body
//     (application/x-www-form-urlencoded, GitHub's option) carries its
//     JSON in the payload field, the signature covering the raw body.
//     Only a body over the hook's max_body is 413; a body cut short is
//     400, one slower than the read timeout 408.
//   - Event streams (server-sent events) report a run's state from durable
//     records; step_end events are sent once the step's settlement is
//     durable. A run's stream sends its terminal state after the run's
//     last step_end (held back at most one Config.Heartbeat) and ends.
//     State changes made by other processes (inbox commands) reach the
//     streams within a heartbeat. Each write of a stream has its own
//     deadline (Config.StreamWriteTimeout): a client that stops reading
//     loses its stream once its connection's buffers are full and a
//     write has waited that long.
//   - Step events reach the streams in the order of the steps: each
//     step's end before the next step's start, the pure steps folded
//     into one runtime step included (the interpreter sends a folded
//     step's start with its end, once the chain is durable).
//   - Events carry ids ("<process epoch>-<seq>"), each its own (a resync
//     event carries none: the client resumes after the event before it);
//     a client that reconnects with Last-Event-ID loses nothing silently.
//     The stream of every run replays the changes since from a ring of
//     the last 8192 events; a run's stream replays its step events from
//     the ring, then sends the current state. The broker goes on
//     following every run for 60 heartbeats after the last stream of
//     every run closed, so a client reconnecting within that time is
//     replayed what it missed. When the ring no longer reaches back, the
//     id is another process's, or the broker was not following then, the
//     stream starts with a reload event (reload the runs, or the run's
//     history) and goes on from there. A stream that falls 1024 events
//     behind is ended with a resync event naming the id to reconnect
//     with; step events the broker itself had to drop (4096 waiting)
//     send the streams of their runs a reload event. Never silently. The
//     ring costs memory only (about 8192 event payloads).
//
// # Cost in object-store requests
//
// The server is the store's writer, so reads are memory reads of the
// writer's kv (its memtable), except where noted:
//
//   - GET /healthz, /v1/openapi.json, /v1/schema, /v1/workflows[/{name}],
//     POST /v1/validate: none (the workflows folder is read from disk).
//   - GET /readyz: Config.Ready's (serve: one HEAD of the lease object, a
//     stat on file://, plus a statfs(2) there; the kv's write health is
//     in memory).
//   - GET /v1/runs: the page is one runtime ListRuns walk (states, labels,
//     the workflow label and the cursor through its index; only the time
//     filters are applied while paging), which reads the index of the one
//     or two sealed segments its runs lie in on a cache miss, and stops
//     one run past the page. Unfiltered or filtered by status only, the
//     counts come from Inspector.CountRuns: the catalog's state counts plus
//     the runs still in the KV (active and not yet sealed), no sealed run
//     visited. With a workflow, label or time filter they are counted over
//     the first 1,000 runs the index gives (label and workflow) and
//     counts_capped says when that bound cut them (lower bounds, shown as
//     "N+" by the UI). A time filter is applied while paging, so a page
//     costs the runs the index gives until it is full.
//   - GET /v1/runs/{id}: none, plus one GET for a definition this process
//     has not parsed yet (cached after); a waiting run's schema gets its
//     x-order from one YAML parse of the definition (CPU only).
//   - GET /v1/runs/{id}/history: one GET per step output over
//     interpreter.InlineOutputLimit (kept in its own object).
//   - POST /v1/runs: one PUT per workflow file not pinned yet, plus the
//     submission's durable commit (one WAL PUT, shared with concurrent
//     commits by group commit).
//   - POST /v1/runs/{id}/cancel: one durable commit.
//   - POST /v1/signals/{key}: one durable commit to buffer, one more to
//     wake a waiting step.
//   - POST /v1/hooks/{name}: as submit or signal.
//   - Event streams: none; while a stream is open (and 60 heartbeats
//     after the last stream of every run closed) the broker polls the
//     writer's memory once per Config.Heartbeat for the active runs only
//     (the index skips sealed segments), and remembers the active runs
//     and at most 32,768 ended ones, so a poll and the broker's memory
//     cost the active runs, not the retained ones. A resumption costs no
//     read: it is answered from the ring or with a reload event.
//   - POST /v1/hooks/{name} of a workflow hook with an HMAC: plus one
//     walk of the signature label's index (memory for runs in the KV,
//     a sealed segment's index on a cache miss).
//   - GET /v1/runs/{id}/export: interpreter.ExportRun's (one GET of a
//     sealed run's segment, one per definition and large output, one
//     LIST of the run's memo plus a GET per answer).
//   - POST /v1/import: interpreter.ImportRun's (a HEAD and PUT per
//     definition, a PUT per large output and answer, one durable
//     commit); a refused document costs none.
package server
