// Package tracing is the OpenTelemetry tracing of a tqw process: FromEnv
// builds a TracerProvider from the standard OTEL_* variables, and
// Transport is the HTTP client transport of the http and llm actions,
// whose requests become client spans carrying the W3C trace context to
// the called service. The spans themselves are the interpreter's
// (interpreter.Options.TracerProvider): a span per run in this process, a
// child per step delivery, an HTTP client span under a step per request;
// the HTTP API's server spans are the server's (server.Config.TracerProvider),
// parents of the submit span when a caller sends traceparent.
//
// The resource FromEnv builds names the service (service.name), its build
// (service.version, ServiceVersion: as tqw-dsl --version reads it) and
// the process (service.instance.id: Options.InstanceID, else a random
// UUID); OTEL_RESOURCE_ATTRIBUTES overrides each.
//
// # Off unless configured
//
// Tracing is on only when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and not when
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Off, FromEnv
// returns a Provider whose TracerProvider is nil: nothing is built, no
// goroutine starts, the interpreter creates no span and the actions keep
// their plain transport. On, spans are batched and exported with
// OTLP/HTTP (otlptracehttp), which reads the rest of its settings itself
// (headers, timeout, compression, TLS, protocol http/protobuf or
// http/json); the SDK reads OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// the sampler and batching variables. gRPC export is refused with
// ErrUnsupportedExporter rather than sent to the wrong port. FromEnv also
// sets OpenTelemetry's global provider and propagator (trace context and
// baggage). Shutdown flushes the spans ended so far.
//
// # Secrets
//
// A client span records the method, the URL without user info and with
// every query value replaced by Redacted, the server address, the status
// and the transport error's text; never headers or bodies. The URL, host,
// User-Agent and error text first pass through the redaction the request's
// context carries (WithRedaction), which the interpreter sets to the
// step's secret redactor, so a secret in a step's URL path is "***" in
// the span as in the run's history. The interpreter's own spans carry
// identifiers (run id, workflow, step, action, attempt, outcome) and the
// error text the history stores, already redacted.
//
// # Cost
//
// No object-store request: spans go to the collector only, and the trace
// context a run keeps (interpreter.HeaderTraceParent) rides in the run's
// headers, written with the submission's commit. On, each step costs a
// span or two in memory until the batch exporter sends them (one HTTP
// request per batch, by default every 5 s or 512 spans); an unreachable
// collector drops spans, logs a warning and never slows a step.
package tracing
