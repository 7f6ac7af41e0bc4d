package tracing

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tqw-dsl/tqw/internal/otlptest"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestFromEnvOff: without an endpoint, or with tracing disabled by the
// standard variables, FromEnv builds nothing: no provider, and no
// goroutine outlives it (synctest fails a bubble that leaves one).
func TestFromEnvOff(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"unset":           {"OTEL_SERVICE_NAME": "svc", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"},
		"sdk disabled":    {EnvEndpoint: "http://127.0.0.1:1", EnvSDKDisabled: "true"},
		"exporter none":   {EnvTracesEndpoint: "http://127.0.0.1:1/v1/traces", EnvTracesExporter: "none"},
		"disabled, upper": {EnvEndpoint: "http://127.0.0.1:1", EnvSDKDisabled: "TRUE"},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := FromEnv(t.Context(), Options{Getenv: envOf(env)})
				if err != nil {
					t.Fatal(err)
				}
				if p.Enabled() || p.TracerProvider() != nil || HTTPClient(p.TracerProvider()) != nil {
					t.Fatalf("FromEnv with %v: enabled %v, provider %v; want off", env, p.Enabled(), p.TracerProvider())
				}
				if err := p.Shutdown(t.Context()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
	var nilProvider *Provider
	if nilProvider.Enabled() || nilProvider.Shutdown(context.Background()) != nil {
		t.Error("a nil Provider is not off")
	}
}

func TestFromEnvRefusesOtherExporters(t *testing.T) {
	for _, env := range []map[string]string{
		{EnvEndpoint: "http://127.0.0.1:4317", EnvProtocol: "grpc"},
		{EnvEndpoint: "http://127.0.0.1:4318", EnvProtocol: "http/protobuf", EnvTracesProtocol: "grpc"},
		{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesExporter: "zipkin"},
	} {
		p, err := FromEnv(t.Context(), Options{Getenv: envOf(env)})
		if !errors.Is(err, ErrUnsupportedExporter) || p != nil {
			t.Errorf("FromEnv with %v: %v, %v; want ErrUnsupportedExporter", env, p, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "OTEL_") || !strings.Contains(msg, "unset it") {
			t.Errorf("error %q does not name the variable and what to do", msg)
		}
	}
}

// TestFromEnvExports: with an endpoint set, spans reach the collector
// when the provider shuts down, with the service name and resource
// attributes of the environment and the exporter's headers.
func TestFromEnvExports(t *testing.T) {
	c := otlptest.Start(t)
	t.Setenv(EnvEndpoint, c.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
	t.Setenv("OTEL_SERVICE_NAME", "tqw-test")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	for _, k := range []string{EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol, EnvSDKDisabled, EnvTracesExporter} {
		t.Setenv(k, "")
	}
	p, err := FromEnv(t.Context(), Options{ServiceName: "default-name"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Enabled() {
		t.Fatal("FromEnv with an endpoint is off")
	}
	_, span := p.TracerProvider().Tracer("test").Start(t.Context(), "hello")
	span.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := c.Spans()
	if len(spans) != 1 || spans[0].Name != "hello" {
		t.Fatalf("collector got:\n%s", otlptest.Describe(spans))
	}
	if got := spans[0].Resource["service.name"]; got != "tqw-test" {
		t.Errorf("service.name = %q; want OTEL_SERVICE_NAME's", got)
	}
	if got := spans[0].Resource["deployment.environment"]; got != "test" {
		t.Errorf("deployment.environment = %q; want OTEL_RESOURCE_ATTRIBUTES'", got)
	}
	if got := c.LastHeader().Get("X-Tenant"); got != "acme" {
		t.Errorf("export header x-tenant = %q; want OTEL_EXPORTER_OTLP_HEADERS'", got)
	}
	if got := spans[0].Resource["service.version"]; got == "" || got != ServiceVersion() {
		t.Errorf("service.version = %q; want the build's %q", got, ServiceVersion())
	}
	if got := spans[0].Resource["service.instance.id"]; len(got) != 36 {
		t.Errorf("service.instance.id = %q; want a UUID", got)
	}
}

// TestResourceNamesTheInstance: service.instance.id is the one given,
// and OTEL_RESOURCE_ATTRIBUTES still overrides service.version.
func TestResourceNamesTheInstance(t *testing.T) {
	c := otlptest.Start(t)
	t.Setenv(EnvEndpoint, c.URL)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.version=v9.9.9")
	for _, k := range []string{EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol, EnvSDKDisabled, EnvTracesExporter, "OTEL_SERVICE_NAME"} {
		t.Setenv(k, "")
	}
	p, err := FromEnv(t.Context(), Options{InstanceID: "writer-7"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.TracerProvider().Tracer("test").Start(t.Context(), "hello")
	span.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := c.Spans()
	if len(spans) != 1 {
		t.Fatalf("collector got:\n%s", otlptest.Describe(spans))
	}
	if got := spans[0].Resource["service.instance.id"]; got != "writer-7" {
		t.Errorf("service.instance.id = %q; want writer-7", got)
	}
	if got := spans[0].Resource["service.version"]; got != "v9.9.9" {
		t.Errorf("service.version = %q; want OTEL_RESOURCE_ATTRIBUTES'", got)
	}
}

func memoryProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func TestTransportWithoutProviderIsBase(t *testing.T) {
	base := &http.Transport{}
	if got := Transport(base, nil); got != base {
		t.Errorf("Transport(base, nil) = %T; want base itself", got)
	}
}

// TestTransportRedactsTheSpan sends a request with a secret in user
// info, host-less path, query and User-Agent: the server gets them all
// and the span's traceparent; the span shows none of them.
func TestTransportRedactsTheSpan(t *testing.T) {
	const secret = "s3cr3t-value"
	var gotURL, gotUA, gotTP string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotURL, gotUA, gotTP = r.URL.String(), r.UserAgent(), r.Header.Get("traceparent")
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer ts.Close()
	tp, exp := memoryProvider(t)
	client := &http.Client{Transport: Transport(nil, tp)}
	redact := func(s string) string { return strings.ReplaceAll(s, secret, "***") }
	ctx := WithRedaction(t.Context(), redact)
	target := strings.Replace(ts.URL, "http://", "http://user:"+secret+"@", 1) + "/p/" + secret + "?token=" + secret + "&n=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "ua-"+secret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if gotURL != "/p/"+secret+"?token="+secret+"&n=1" || gotUA != "ua-"+secret {
		t.Errorf("the server got %q with User-Agent %q; want the request as sent", gotURL, gotUA)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans; want 1", len(spans))
	}
	s := spans[0]
	if want := "00-" + s.SpanContext.TraceID().String() + "-" + s.SpanContext.SpanID().String() + "-01"; gotTP != want {
		t.Errorf("traceparent %q; want %q", gotTP, want)
	}
	if s.Status.Code != codes.Error {
		t.Errorf("a 500 has status %v; want error", s.Status.Code)
	}
	for _, kv := range s.Attributes {
		if v := kv.Value.String(); strings.Contains(v, secret) || strings.Contains(v, "user") {
			t.Errorf("attribute %s = %q carries the secret or the user info", kv.Key, v)
		}
	}
	for _, kv := range s.Attributes {
		if kv.Key == "url.full" {
			u, _ := url.Parse(kv.Value.AsString())
			if u.Path != "/p/***" || u.Query().Get("token") != Redacted || u.Query().Get("n") != Redacted {
				t.Errorf("url.full = %q", kv.Value.AsString())
			}
		}
	}
}

// TestTransportRedactsErrors: a transport error whose text carries a
// secret is reported redacted, to the span and the caller, and keeps its
// cause and its timeout classification.
func TestTransportRedactsErrors(t *testing.T) {
	const secret = "s3cr3t-value"
	cause := &net.DNSError{Err: "lookup " + secret + " failed", Name: secret, IsTimeout: true}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, cause })
	tp, exp := memoryProvider(t)
	client := &http.Client{Transport: Transport(base, tp), Timeout: time.Minute}
	ctx := WithRedaction(t.Context(), func(s string) string { return strings.ReplaceAll(s, secret, "***") })
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.invalid/", nil)
	_, err := client.Do(req)
	var uerr *url.Error
	if !errors.As(err, &uerr) || !uerr.Timeout() || !errors.Is(err, cause) || strings.Contains(err.Error(), secret) {
		t.Fatalf("error %v: want a redacted timeout wrapping the cause", err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code != codes.Error || strings.Contains(spans[0].Status.Description, secret) ||
		!strings.Contains(spans[0].Status.Description, "***") {
		t.Fatalf("spans %+v; want one error span with the redacted text", spans)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
