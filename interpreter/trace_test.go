package interpreter

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tqw-dsl/tqw/interpreter/tracing"
)

// tracedEnv is a test env whose interpreter and HTTP client trace into
// an in-memory exporter, synchronously (a span is exported as it ends).
func tracedEnv(t *testing.T, opts ...envOption) (*tenv, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	opts = append(opts, withTracerProvider(tp), withHTTPClient(tracing.HTTPClient(tp)))
	return newTestEnv(t, opts...), exp
}

func spanAttr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

func spansNamed(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func oneSpan(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := spansNamed(spans, name)
	if len(got) != 1 {
		t.Fatalf("%d spans named %q; want 1:\n%s", len(got), name, describeSpans(spans))
	}
	return got[0]
}

func describeSpans(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s span=%s parent=%s status=%v %q", s.Name, s.SpanContext.SpanID(), s.Parent.SpanID(), s.Status.Code, s.Status.Description)
		for _, kv := range s.Attributes {
			fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// wantChild checks that child's parent is parent, in parent's trace.
func wantChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("span %q has parent %s in trace %s; want %q (%s in %s)", child.Name, child.Parent.SpanID(), child.SpanContext.TraceID(),
			parent.Name, parent.SpanContext.SpanID(), parent.SpanContext.TraceID())
	}
}

// wantNoSecret checks that no part of any span carries secret, plain
// or URL-encoded.
func wantNoSecret(t *testing.T, spans tracetest.SpanStubs, secret string) {
	t.Helper()
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret)}
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		for _, kv := range s.Attributes {
			texts = append(texts, kv.Value.String())
		}
		for _, ev := range s.Events {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, f := range forms {
				if strings.Contains(text, f) {
					t.Errorf("span %q carries the secret: %q", s.Name, text)
				}
			}
		}
	}
}

// TestTraceRunStepsAndHTTP runs a workflow whose http step sends a
// secret in its URL path, query and a header, then fails on a 400: one
// trace holds the submission, the run, a span per step and the HTTP
// client spans, whose context reached the server; the failing step and
// the run have error status; no span carries the secret.
func TestTraceRunStepsAndHTTP(t *testing.T) {
	const secret = "tok-s3cr3t/+9876"
	var mu sync.Mutex
	got := map[string]string{} // path -> traceparent received
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0]] = r.Header.Get("traceparent")
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/fail") {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok": true}`)
	}))
	defer ts.Close()
	e, exp := tracedEnv(t, withEnv("API_TOKEN", secret))
	p := e.write("traced.yaml", `
tqw: v1
name: traced
secrets: [API_TOKEN]
steps:
  - id: call
    action: http
    with:
      url: "`+ts.URL+`/hook/${ secrets.API_TOKEN }"
      query: {key: "${ secrets.API_TOKEN }", page: "2"}
      headers: {Authorization: "Bearer ${ secrets.API_TOKEN }", User-Agent: "agent ${ secrets.API_TOKEN }"}
  - id: broken
    action: http
    with: {url: "`+ts.URL+`/fail"}
`)
	o := e.run(p, map[string]any{}, "r1")
	if o.Status != runstate.Failed {
		t.Fatalf("run: %s %q; want failed on the 400", o.Status, o.Error)
	}
	spans := exp.GetSpans()

	submit := oneSpan(t, spans, "submit traced")
	run := oneSpan(t, spans, "run traced")
	call := oneSpan(t, spans, "step call")
	broken := oneSpan(t, spans, "step broken")
	wantChild(t, run, submit)
	wantChild(t, call, run)
	wantChild(t, broken, run)
	clients := spansNamed(spans, "HTTP GET")
	if len(clients) != 2 {
		t.Fatalf("%d HTTP client spans; want 2:\n%s", len(clients), describeSpans(spans))
	}
	for _, c := range clients {
		step := call
		path := "hook"
		if c.Parent.SpanID() == broken.SpanContext.SpanID() {
			step, path = broken, "fail"
		}
		wantChild(t, c, step)
		want := fmt.Sprintf("00-%s-%s-01", c.SpanContext.TraceID(), c.SpanContext.SpanID())
		mu.Lock()
		tp := got[path]
		mu.Unlock()
		if tp != want {
			t.Errorf("the server got traceparent %q for /%s; want the client span's %q", tp, path, want)
		}
	}

	for key, want := range map[attribute.Key]string{AttrRunID: "r1", AttrWorkflow: "traced", AttrStep: "call", AttrAction: "http",
		AttrAttempt: "1", AttrOutcome: OutcomeOK, AttrStepNumber: "0"} {
		if v := spanAttr(call, key); v != want {
			t.Errorf("step call: %s = %q; want %q", key, v, want)
		}
	}
	if call.Status.Code == codes.Error {
		t.Errorf("step call has error status %q", call.Status.Description)
	}
	if spanAttr(broken, AttrOutcome) != OutcomeFailed || broken.Status.Code != codes.Error || !strings.Contains(broken.Status.Description, "400") {
		t.Errorf("step broken: outcome %q, status %v %q; want failed, error status naming the 400", spanAttr(broken, AttrOutcome), broken.Status.Code, broken.Status.Description)
	}
	if spanAttr(run, AttrRunStatus) != "failed" || run.Status.Code != codes.Error || run.Status.Description != o.Error {
		t.Errorf("run span: status attribute %q, status %v %q; want failed with the run's error %q", spanAttr(run, AttrRunStatus), run.Status.Code, run.Status.Description, o.Error)
	}
	for _, c := range clients {
		full := spanAttr(c, "url.full")
		u, err := url.Parse(full)
		if err != nil {
			t.Fatalf("url.full %q: %v", full, err)
		}
		if q := u.Query(); c.Parent.SpanID() == call.SpanContext.SpanID() && (u.Path != "/hook/"+redacted || q.Get("key") != tracing.Redacted || q.Get("page") != tracing.Redacted) {
			t.Errorf("url.full of the call = %q; want the path's secret and every query value redacted", full)
		}
	}
	wantNoSecret(t, spans, secret)
}

// TestTraceRunReleasedAndResumed: a process that gives a waiting run up
// ends its span marked released; the run's next span, started from the
// run's stored trace header alone, is in the same trace under the same
// submission span, as in a process that resumes the run after a crash.
func TestTraceRunReleasedAndResumed(t *testing.T) {
	e, exp := tracedEnv(t)
	p := e.write("wait.yaml", `
tqw: v1
name: waiter
steps:
  - id: ask
    action: wait_signal
    with: {key: "go:${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ output }"
`)
	ch := e.submitUntil(p, map[string]any{}, "r1", "ask", OutcomeWaiting)
	e.it.EndRunSpans()
	first := oneSpan(t, exp.GetSpans(), "run waiter")
	if spanAttr(first, AttrRunReleased) != "true" || first.Status.Code == codes.Error {
		t.Fatalf("the given-up run's span: released %q, status %v; want released, no error", spanAttr(first, AttrRunReleased), first.Status.Code)
	}
	if _, err := e.rt.Signal(e.ctx, "go:r1", []byte(`"yes"`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"yes"`)
	spans := exp.GetSpans()
	submit := oneSpan(t, spans, "submit waiter")
	runs := spansNamed(spans, "run waiter")
	if len(runs) != 2 {
		t.Fatalf("%d run spans; want the released one and the resumed one:\n%s", len(runs), describeSpans(spans))
	}
	for _, r := range runs {
		wantChild(t, r, submit)
	}
	second := runs[1]
	if spanAttr(second, AttrRunReleased) != "" || spanAttr(second, AttrRunStatus) != "succeeded" {
		t.Errorf("the resumed run's span: released %q, status %q; want an end, succeeded", spanAttr(second, AttrRunReleased), spanAttr(second, AttrRunStatus))
	}
	asks := spansNamed(spans, "step ask")
	if len(asks) != 2 {
		t.Fatalf("%d spans of step ask; want its two deliveries (wait, signal):\n%s", len(asks), describeSpans(spans))
	}
	wantChild(t, asks[0], first)
	wantChild(t, asks[1], second)
	wantChild(t, oneSpan(t, spans, "step done"), second)
}

// Pure steps folded into one delivery keep a span each, children of the
// run's span, in order, all at the delivery's runtime step number.
func TestTraceFoldedStepsSpanEach(t *testing.T) {
	e, exp := tracedEnv(t)
	p := e.write("folded.yaml", `
tqw: v1
name: folded
steps:
  - id: pick
    set: {x: 1}
  - id: route
    switch:
      - when: vars.x == 2
        next: pick
    next: done
  - id: done
    fail: "no x"
`)
	wantFailedWith(t, e.run(p, map[string]any{}, "r1"), "no x")
	spans := exp.GetSpans()
	run := oneSpan(t, spans, "run folded")
	var order []string
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "step ") {
			continue
		}
		wantChild(t, s, run)
		order = append(order, s.Name+"@"+spanAttr(s, AttrStepNumber)+":"+spanAttr(s, AttrOutcome))
	}
	if got, want := strings.Join(order, " "), "step pick@0:ok step route@0:ok step done@0:failed"; got != want {
		t.Fatalf("step spans %q; want %q", got, want)
	}
	if done := oneSpan(t, spans, "step done"); done.Status.Code != codes.Error || done.Status.Description != "fail: no x" {
		t.Errorf("span of the failing step: status %v %q", done.Status.Code, done.Status.Description)
	}
}
