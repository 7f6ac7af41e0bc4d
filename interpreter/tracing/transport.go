package tracing

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// Redacted replaces query values in the URL a client span records.
const Redacted = "REDACTED"

type redactKey struct{}

// WithRedaction returns ctx carrying redact, which Transport applies to
// the URL, host and User-Agent its client spans record and to the error
// text they report: the interpreter passes its secret redactor, so a
// secret in a step's URL never reaches a span.
func WithRedaction(ctx context.Context, redact func(string) string) context.Context {
	return context.WithValue(ctx, redactKey{}, redact)
}

func redactor(ctx context.Context) func(string) string {
	if f, ok := ctx.Value(redactKey{}).(func(string) string); ok && f != nil {
		return f
	}
	return func(s string) string { return s }
}

// Transport returns base (nil: http.DefaultTransport) wrapped so that
// each request is an HTTP client span of tp (otelhttp), a child of the
// span in the request's context, and carries that span's W3C trace
// context (traceparent, and baggage) to the server. The span records
// the method, the URL without user info, with every query value replaced
// by Redacted and the context's redaction (WithRedaction) applied, the
// server address and the status; never headers or bodies. A nil tp
// returns base unwrapped: no span, no header, no cost.
func Transport(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if tp == nil {
		return base
	}
	inner := otelhttp.NewTransport(restoring{base}, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(Propagator()),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()))
	return sanitizing{inner}
}

// HTTPClient returns a client whose transport is Transport(nil, tp), or
// nil when tp is nil (the actions then use their default client).
func HTTPClient(tp trace.TracerProvider) *http.Client {
	if tp == nil {
		return nil
	}
	return &http.Client{Transport: Transport(nil, tp)}
}

type originalKey struct{}

// sanitizing hands otelhttp a copy of the request that shows only what a
// span may record; restoring, under otelhttp, sends the original.
type sanitizing struct{ next http.RoundTripper }

func (s sanitizing) RoundTrip(r *http.Request) (*http.Response, error) {
	redact := redactor(r.Context())
	shown := r.Clone(context.WithValue(r.Context(), originalKey{}, r))
	shown.URL = sanitizeURL(r.URL, redact)
	shown.Host = redact(r.Host)
	if ua := r.Header.Get("User-Agent"); ua != "" {
		shown.Header.Set("User-Agent", redact(ua))
	}
	return s.next.RoundTrip(shown)
}

type restoring struct{ next http.RoundTripper }

func (s restoring) RoundTrip(r *http.Request) (*http.Response, error) {
	orig, ok := r.Context().Value(originalKey{}).(*http.Request)
	if !ok {
		return s.next.RoundTrip(r)
	}
	// otelhttp's copy carries the client span's context and the injected
	// trace headers; the rest is the original request's.
	out := r.WithContext(r.Context())
	out.URL, out.Host = orig.URL, orig.Host
	out.Header = r.Header.Clone()
	if ua, set := orig.Header["User-Agent"]; set {
		out.Header["User-Agent"] = ua
	}
	resp, err := s.next.RoundTrip(out)
	if err != nil {
		if redacted := redactor(r.Context())(err.Error()); redacted != err.Error() {
			err = &redactedError{msg: redacted, err: err}
		}
	}
	return resp, err
}

// sanitizeURL returns u without user info, with every query value
// replaced by Redacted and redact applied to host and path.
func sanitizeURL(u *url.URL, redact func(string) string) *url.URL {
	c := *u
	c.User = nil
	c.Host = redact(u.Host)
	c.Path, c.RawPath = redact(u.Path), ""
	c.Fragment, c.RawFragment = "", ""
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			c.RawQuery = Redacted
		} else {
			for k, vs := range q {
				for i := range vs {
					vs[i] = Redacted
				}
				q[k] = vs
			}
			c.RawQuery = redact(q.Encode())
		}
	}
	return &c
}

// redactedError is a transport error whose text carried a secret: the
// span records the redacted text; callers still match the cause.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Timeout keeps net/http's timeout classification (url.Error.Timeout
// asserts on the error it wraps).
func (e *redactedError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}
