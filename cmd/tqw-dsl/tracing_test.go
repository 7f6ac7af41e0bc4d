package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/internal/otlptest"
)

// tracedWorkflow calls srv with a secret in the query and a header, asks
// the fake LLM, then fails on srv's /fail.
func tracedWorkflow(t *testing.T, dir, srv, llmURL string) string {
	t.Helper()
	p := filepath.Join(dir, "traced.tqw.yaml")
	src := `tqw: v1
name: traced
secrets: [API_TOKEN, OPENAI_API_KEY]
steps:
  - id: call
    action: http
    with:
      url: "` + srv + `/hook?token=${ secrets.API_TOKEN }"
      headers: {X-Token: "${ secrets.API_TOKEN }"}
  - id: ask
    action: llm
    with: {model: gpt-4o-mini, base_url: "` + llmURL + `", prompt: "hello"}
  - id: broken
    action: http
    with: {url: "` + srv + `/fail"}
`
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// traceparents records the traceparent header of each request by path.
type traceparents struct {
	mu  sync.Mutex
	got map[string][]string
}

func (tp *traceparents) handler(w http.ResponseWriter, r *http.Request) {
	tp.mu.Lock()
	tp.got[r.URL.Path] = append(tp.got[r.URL.Path], r.Header.Get("traceparent"))
	tp.mu.Unlock()
	if r.URL.Path == "/fail" {
		http.Error(w, "refused", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"ok": true}`)
}

func (tp *traceparents) of(path string) []string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]string(nil), tp.got[path]...)
}

func wantOne(t *testing.T, spans []otlptest.Span, name string) otlptest.Span {
	t.Helper()
	got := otlptest.ByName(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q; want 1:\n%s", len(got), name, otlptest.Describe(spans))
	}
	return got[0]
}

func wantParent(t *testing.T, child, parent otlptest.Span) {
	t.Helper()
	if child.ParentSpanID != parent.SpanID || child.TraceID != parent.TraceID {
		t.Errorf("span %q: parent %s in trace %s; want %q (%s in %s)", child.Name, child.ParentSpanID, child.TraceID, parent.Name, parent.SpanID, parent.TraceID)
	}
}

// TestRunExportsTraces runs `tqw-dsl run` as a process with
// OTEL_EXPORTER_OTLP_ENDPOINT set: the fake collector receives the
// submission, the run, a span per step and an HTTP client span per
// request, in one trace; the test server and the fake LLM receive the
// client spans' trace context; the failing step and the run have error
// status; no span carries a secret.
func TestRunExportsTraces(t *testing.T) {
	t.Parallel()
	col := otlptest.Start(t)
	tps := &traceparents{got: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(tps.handler))
	defer srv.Close()
	fake := llmfake.New()
	defer fake.Close()
	fake.Enqueue(llmfake.Reply{Content: "hi there"})
	c := newCLI(t)
	c.env = append(c.env, "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_SDK_DISABLED=",
		"OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_PROTOCOL=", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=")
	wf := tracedWorkflow(t, c.dir, srv.URL, fake.URL())
	_, errOut := c.must(exitFailed, "run", wf, "--run-id", "tr1")
	if !strings.Contains(errOut, "400") {
		t.Fatalf("stderr %q; want the failing step's 400", errOut)
	}
	// The process flushed its spans before it exited.
	spans := col.Spans()

	submit := wantOne(t, spans, "submit traced")
	run := wantOne(t, spans, "run traced")
	steps := map[string]otlptest.Span{}
	for _, id := range []string{"call", "ask", "broken"} {
		steps[id] = wantOne(t, spans, "step "+id)
		wantParent(t, steps[id], run)
	}
	wantParent(t, run, submit)
	if submit.ParentSpanID != "" {
		t.Errorf("the submission span has parent %s; want a root", submit.ParentSpanID)
	}
	if got := run.Resource["service.name"]; got != "tqw-dsl" {
		t.Errorf("service.name = %q; want tqw-dsl", got)
	}

	// Each request is a client span under its step, and the called
	// service got that span's context.
	clientOf := map[string]otlptest.Span{}
	for _, s := range spans {
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			continue
		}
		for id, st := range steps {
			if s.ParentSpanID == st.SpanID {
				clientOf[id] = s
			}
		}
	}
	if len(clientOf) != 3 {
		t.Fatalf("client spans under %d steps; want 3 (call, ask, broken):\n%s", len(clientOf), otlptest.Describe(spans))
	}
	traceparent := func(s otlptest.Span) string { return "00-" + s.TraceID + "-" + s.SpanID + "-01" }
	if got := tps.of("/hook"); len(got) != 1 || got[0] != traceparent(clientOf["call"]) {
		t.Errorf("/hook got traceparent %q; want the client span's %q", got, traceparent(clientOf["call"]))
	}
	if got := tps.of("/fail"); len(got) != 1 || got[0] != traceparent(clientOf["broken"]) {
		t.Errorf("/fail got traceparent %q; want the client span's %q", got, traceparent(clientOf["broken"]))
	}
	reqs := fake.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("traceparent") != traceparent(clientOf["ask"]) {
		t.Errorf("the LLM got %d requests, traceparent %q; want one with the client span's %q", len(reqs), reqs[0].Header.Get("traceparent"), traceparent(clientOf["ask"]))
	}
	if clientOf["ask"].Name != "HTTP POST" || clientOf["call"].Name != "HTTP GET" {
		t.Errorf("client spans %q and %q; want HTTP POST (llm) and HTTP GET (http)", clientOf["ask"].Name, clientOf["call"].Name)
	}

	for key, want := range map[string]string{"tqw.run.id": "tr1", "tqw.workflow": "traced", "tqw.step": "ask", "tqw.action": "llm",
		"tqw.attempt": "1", "tqw.outcome": "ok", "tqw.step.number": "1"} {
		if got := steps["ask"].Attributes[key]; got != want {
			t.Errorf("step ask: %s = %q; want %q", key, got, want)
		}
	}
	if s := steps["broken"]; s.StatusCode != tracepb.Status_STATUS_CODE_ERROR || s.Attributes["tqw.outcome"] != "failed" || !strings.Contains(s.StatusMessage, "400") {
		t.Errorf("step broken: status %v %q, outcome %q; want an error naming the 400, failed", s.StatusCode, s.StatusMessage, s.Attributes["tqw.outcome"])
	}
	if steps["call"].StatusCode == tracepb.Status_STATUS_CODE_ERROR || clientOf["call"].StatusCode == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the call step or its request has error status")
	}
	if run.StatusCode != tracepb.Status_STATUS_CODE_ERROR || run.Attributes["tqw.run.status"] != "failed" {
		t.Errorf("run span: status %v, tqw.run.status %q; want error, failed", run.StatusCode, run.Attributes["tqw.run.status"])
	}
	if u := clientOf["call"].Attributes["url.full"]; u != srv.URL+"/hook?token=REDACTED" {
		t.Errorf("url.full = %q; want the query value redacted", u)
	}
	dump := otlptest.Describe(spans)
	for _, secret := range []string{"tok-s3cr3t-9876", "sk-test-key"} {
		if strings.Contains(dump, secret) {
			t.Errorf("a span carries the secret %s:\n%s", secret, dump)
		}
	}
}

// TestRunWithoutTracingSendsNothing: with no endpoint set (other OTEL_*
// variables set), or with OTEL_SDK_DISABLED=true, a run sends no span
// and its requests carry no trace context.
func TestRunWithoutTracingSendsNothing(t *testing.T) {
	t.Parallel()
	col := otlptest.Start(t)
	tps := &traceparents{got: map[string][]string{}}
	srv := httptest.NewServer(http.HandlerFunc(tps.handler))
	defer srv.Close()
	fake := llmfake.New()
	defer fake.Close()
	for name, env := range map[string][]string{
		"unset":    {"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_SERVICE_NAME=quiet", "OTEL_EXPORTER_OTLP_HEADERS=a=b"},
		"disabled": {"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.URL, "OTEL_SDK_DISABLED=true"},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCLI(t)
			c.env = append(c.env, env...)
			wf := tracedWorkflow(t, c.dir, srv.URL, fake.URL())
			c.must(exitFailed, "run", wf)
			for _, path := range []string{"/hook", "/fail"} {
				if got := tps.of(path); len(got) == 0 || got[len(got)-1] != "" {
					t.Errorf("%s got traceparent %q; want none", path, got)
				}
			}
			reqs := fake.Requests()
			if tp := reqs[len(reqs)-1].Header.Get("traceparent"); tp != "" {
				t.Errorf("the LLM got traceparent %q; want none", tp)
			}
		})
	}
	if n := col.Requests(); n != 0 {
		t.Fatalf("the collector got %d export requests; want none:\n%s", n, otlptest.Describe(col.Spans()))
	}
}

// TestRunRefusesGRPCExport: an OTLP protocol tqw cannot speak is a
// usage error naming the variable, before anything runs.
func TestRunRefusesGRPCExport(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=", "OTEL_SDK_DISABLED=")
	_, errOut := c.must(exitUsage, "run", abs(t, "../../workflows/hello.yaml"))
	if !strings.Contains(errOut, "OTEL_EXPORTER_OTLP_PROTOCOL") || !strings.Contains(errOut, "http/protobuf") {
		t.Fatalf("stderr %q; want the variable and what to set", errOut)
	}
}
