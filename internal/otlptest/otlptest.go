package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, with ids in hex and attribute values as
// text (numbers and booleans in Go's format, other kinds as OTLP JSON).
type Span struct {
	Name          string
	TraceID       string
	SpanID        string
	ParentSpanID  string // "" for a root span
	Kind          tracepb.Span_SpanKind
	Attributes    map[string]string
	StatusCode    tracepb.Status_StatusCode
	StatusMessage string
	// Resource holds the attributes of the span's resource (service.name, ...).
	Resource map[string]string
	// Events are the names and attributes of the span's events.
	Events []Event
}

// Event is a span event.
type Event struct {
	Name       string
	Attributes map[string]string
}

// Collector is a fake OTLP/HTTP trace collector.
type Collector struct {
	// URL is the base URL to set as OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	requests int
	headers  http.Header // of the last request
	arrived  chan struct{}
}

// Start starts a collector on 127.0.0.1, closed when t ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{arrived: make(chan struct{}, 1)}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	c.URL = c.srv.URL
	t.Cleanup(c.srv.Close)
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	isJSON := strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")
	if isJSON {
		err = protojson.Unmarshal(body, &req)
	} else {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "decoding ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(), Attributes: attrs(s.GetAttributes()),
					StatusCode: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(), Resource: res}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, Event{Name: e.GetName(), Attributes: attrs(e.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.requests++
	c.headers = r.Header.Clone()
	c.mu.Unlock()
	select {
	case c.arrived <- struct{}{}:
	default:
	}
	resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	if isJSON {
		resp, _ = protojson.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	_, _ = w.Write(resp)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case nil:
		return ""
	default:
		b, _ := protojson.Marshal(v)
		return string(b)
	}
}

// Spans returns the spans received so far, in arrival order.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests returns how many export requests arrived.
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// LastHeader returns the headers of the last export request (nil before one).
func (c *Collector) LastHeader() http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headers
}

// WaitFor waits until done(spans received so far) holds, up to timeout,
// and returns those spans; it fails t with what arrived when it times out.
func (c *Collector) WaitFor(t testing.TB, timeout time.Duration, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		spans := c.Spans()
		if done(spans) {
			return spans
		}
		select {
		case <-c.arrived:
		case <-deadline.C:
			t.Fatalf("otlptest: after %v the collector holds %d spans, not what the test waits for:\n%s", timeout, len(spans), Describe(spans))
			return nil
		}
	}
}

// Describe renders spans one a line, for failure messages.
func Describe(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString("  " + s.Name + " span=" + s.SpanID + " parent=" + s.ParentSpanID + " trace=" + s.TraceID)
		b.WriteString(" status=" + s.StatusCode.String())
		for k, v := range s.Attributes {
			b.WriteString(" " + k + "=" + v)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ByName returns the spans named name.
func ByName(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
