package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
	"github.com/tqw-dsl/tqw/server"
)

// TestTraceparentParentsTheRun: a submission carrying the caller's
// traceparent is a server span, child of the caller's span, named by
// its route template; the submit span is its child and the run's span
// is in the caller's trace. A read of the run is a span named by the
// template, never by the run id.
func TestTraceparentParentsTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	store := mem.New()
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	it, err := interpreter.New(q, store, interpreter.Options{Actions: builtin.New(builtin.Options{}), Logger: quiet(), TracerProvider: tp,
		Runtime: runtime.Options{Logger: quiet(), ShutdownTimeout: -1}})
	if err != nil {
		t.Fatal(err)
	}
	rt := it.Runtime()
	w := rt.Spawn(context.Background())
	defer w.Shutdown(context.Background())
	s, err := server.New(server.Config{Runtime: rt, Interpreter: it, WorkflowsDir: "testdata/workflows", Logger: quiet(), TracerProvider: tp,
		DSL: interpreter.LoadOptions(builtin.New(builtin.Options{}), dsl.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()

	// The caller traces in its own process.
	callerTP := sdktrace.NewTracerProvider()
	defer callerTP.Shutdown(context.Background())
	cctx, caller := callerTP.Tracer("caller").Start(ctx, "caller")
	done, _ := it.Watch("traced-1")
	req, _ := http.NewRequestWithContext(cctx, http.MethodPost, hs.URL+"/v1/runs", strings.NewReader(`{"workflow":"greet.yaml","run_id":"traced-1"}`))
	req.Header.Set("Content-Type", "application/json")
	propagation.TraceContext{}.Inject(cctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %s", resp.Status)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the run did not end")
	}
	resp, err = http.Get(hs.URL + "/v1/runs/traced-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	want := caller.SpanContext()
	byName := map[string]sdktrace.ReadOnlySpan{}
	// The server span ends after its handler returned, which may be
	// after the client read the answer.
	for byName["GET /v1/runs/{id}"] == nil || byName["run greet"] == nil {
		for _, sp := range rec.Ended() {
			byName[sp.Name()] = sp
		}
		select {
		case <-ctx.Done():
			t.Fatalf("spans ended: %v", byName)
		case <-time.After(5 * time.Millisecond):
		}
	}
	srv, submit, run := byName["POST /v1/runs"], byName["submit greet"], byName["run greet"]
	if srv == nil || submit == nil {
		t.Fatalf("no server or submit span among %v", byName)
	}
	if srv.SpanKind() != trace.SpanKindServer || srv.Parent().SpanID() != want.SpanID() || !srv.Parent().IsRemote() || srv.SpanContext().TraceID() != want.TraceID() {
		t.Errorf("server span %s (kind %v) has parent %v; want a server span under the caller's %v", srv.Name(), srv.SpanKind(), srv.Parent(), want)
	}
	if submit.Parent().SpanID() != srv.SpanContext().SpanID() || submit.SpanContext().TraceID() != want.TraceID() {
		t.Errorf("submit span's parent %v; want the server span %v", submit.Parent(), srv.SpanContext())
	}
	if run.SpanContext().TraceID() != want.TraceID() {
		t.Errorf("the run's span is in trace %v; want the caller's %v", run.SpanContext().TraceID(), want.TraceID())
	}
	for name, sp := range byName {
		if sp.SpanKind() == trace.SpanKindServer && strings.Contains(name, "traced-1") {
			t.Errorf("span name %q carries the run id", name)
		}
	}
	route := ""
	for _, kv := range byName["GET /v1/runs/{id}"].Attributes() {
		if kv.Key == "http.route" {
			route = kv.Value.AsString()
		}
	}
	if route != "/v1/runs/{id}" {
		t.Errorf("http.route = %q; want the template", route)
	}
}
