// Package metrics is the Prometheus instrumentation of a tqw writer
// process (`tqw-dsl worker --metrics ADDR`, `tqw-dsl serve`): New returns a
// Metrics whose Handler serves /metrics, and whose hooks the process
// wires in:
//
//   - Events, an observer of the interpreter's step events
//     (interpreter.Options.Events): tqw_runs_started_total{workflow},
//     tqw_runs_finished_total{workflow,outcome="succeeded"},
//     tqw_step_attempts_total and tqw_step_duration_seconds
//     {workflow,step,action,outcome} (the attempt's working time),
//     tqw_step_wait_seconds{workflow,step,action} (the time a resumed
//     wait_signal, sleep or call step was parked, kept out of the
//     step-duration buckets), tqw_llm_tokens_total{model,kind},
//     tqw_llm_cost_usd_total{model}, tqw_llm_unpriced_calls_total{model}.
//   - RunEnded (interpreter.Options.Ended): the runs that did not
//     succeed, failed or cancelled (from outside, with no step event of
//     their own), in tqw_runs_finished_total{workflow,outcome}.
//   - The server.Observer methods (server.Config.Observer):
//     tqw_http_requests_total{method,route,code},
//     tqw_http_request_duration_seconds{method,route} (event streams
//     excluded), tqw_http_requests_in_flight, tqw_http_event_streams (open
//     SSE subscribers), tqw_webhooks_total{hook,outcome}, and
//     tqw_signal_delivery_latency_seconds{path="http"}.
//   - tqw_build_info{version,revision,goversion}, always 1: the build
//     tqw-dsl --version prints (internal/buildinfo).
//   - WrapStore, a wrapper of the objstore.Store everything writes through:
//     tqw_objstore_requests_total{op,outcome} and
//     tqw_objstore_request_duration_seconds{op}. It forwards the wrapped
//     store's packing (objstore.Packer), so the writer's WAL costs what it
//     costs without metrics (one data flush per commit on a file store).
//   - InboxAnswered (remote.InboxOptions.OnAnswered) and
//     ObserveSignalDelivery: tqw_inbox_commands_total{kind,outcome},
//     tqw_signal_delivery_latency_seconds{path}.
//   - Watch, gauges read at scrape time: tqw_runs{state},
//     tqw_queue_jobs{queue,state}, tqw_queue_oldest_ready_age_seconds{queue},
//     tqw_writer_lease_state{state}, and from the kv's Stats
//     tqw_kv_commits_total, tqw_kv_durable_commits_total,
//     tqw_kv_wal_puts_total, tqw_kv_commits_per_wal_put and
//     tqw_kv_wal_put_duration_seconds (the latency a durable commit waits).
//
// Names follow the Prometheus conventions (base units in names, _total on
// counters). Label values come from bounded sets: workflow names and step
// ids of the definitions the process runs, action and model names, fixed
// outcome and state names, the API's route templates, known HTTP methods
// (others are OTHER), status codes and the configured hooks' names. No
// label carries a run id, a signal key, a raw path or any other
// per-request value.
//
// Step events are counted when the interpreter reports them: an attempt's
// "end" after its settlement is durable, so a step is never counted as
// done before it is; a worker that crashes between a step's start and its
// end counts the start again when the step runs again (at least once).
// Runs that did not succeed are counted by RunEnded once the writer
// handled their end notification (at least once as well: again when the
// notification is retried); a cancelled run has no step event.
//
// # Cost
//
// Counters and histograms cost memory only, no object-store request. A
// scrape reads the writer's in-memory state: the run counts
// (Inspector.CountRuns: the sealed segments' state counts plus the runs
// still in the KV, so O(active and not yet sealed runs); a run id reused
// after its first run was sealed may cost one GET of a segment index),
// both queues' stats and the first 100 pending jobs of each; on the
// writer these are memtable reads and make no other object-store request
// (a read waits for a WAL PUT under way, a read barrier). The store wrapper adds a clock read and a map lookup per
// request.
//
// # What it does not do
//
// It does not serve HTTP itself (the caller mounts Handler), does not
// push, and does not trace; counters start at zero with each process.
package metrics
