// Package otlptest is a fake OpenTelemetry collector for tests: an
// OTLP/HTTP server on 127.0.0.1 that decodes every ExportTraceServiceRequest
// (protobuf or JSON) posted to /v1/traces and keeps its spans, flattened,
// for assertions on their names, tree, attributes and status.
//
// It makes no object-store request; it answers HTTP only.
package otlptest
