package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/felixge/httpsnoop"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/tqw-dsl/tqw/interpreter/tracing"
)

// Observer receives the server's measurements; server/metrics.Metrics is
// one. Its methods are called on the request path and must not block.
type Observer interface {
	// HTTPRequestStarted is called as a request arrives, HTTPRequestEnded
	// as its handler returns: the method (a known one or "OTHER"), the
	// route template, the status, the duration, and whether the answer
	// was an event stream (its duration is then the stream's life).
	HTTPRequestStarted()
	HTTPRequestEnded(method, route string, status int, elapsed time.Duration, stream bool)
	// EventStreamOpened and EventStreamClosed bracket each event stream.
	EventStreamOpened()
	EventStreamClosed()
	// WebhookOutcome reports one delivery to a configured hook (see
	// webhookOutcome for the outcomes).
	WebhookOutcome(hook, outcome string)
	// ObserveSignalDelivery reports a signal sent over HTTP ("http"):
	// from the request's arrival to the signal applied.
	ObserveSignalDelivery(path string, elapsed time.Duration)
}

// noObserver is the Observer of a server configured without one.
type noObserver struct{}

func (noObserver) HTTPRequestStarted()                                       {}
func (noObserver) HTTPRequestEnded(string, string, int, time.Duration, bool) {}
func (noObserver) EventStreamOpened()                                        {}
func (noObserver) EventStreamClosed()                                        {}
func (noObserver) WebhookOutcome(string, string)                             {}
func (noObserver) ObserveSignalDelivery(string, time.Duration)               {}

// requestRecord is what the audit line says of one request beyond what
// the outer middleware sees: the path values only the mux knows.
type requestRecord struct {
	start time.Time
	runID string
	hook  string
}

type recordKey struct{}

func recordOf(ctx context.Context) *requestRecord {
	rec, _ := ctx.Value(recordKey{}).(*requestRecord)
	return rec
}

// maxLoggedValue bounds a client-chosen value (a run id, a delivery id)
// in a log line.
const maxLoggedValue = 128

func clip(s string) string {
	if len(s) > maxLoggedValue {
		return s[:maxLoggedValue] + "..."
	}
	return s
}

// knownMethods bounds the method a metric or log line names.
var knownMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	return "OTHER"
}

// routeOf is the path template of the mux's pattern for r ("/v1/runs/{id}"),
// found without serving r, so a request refused before the mux (401) has
// its route too; "unmatched" when no pattern matches.
func routeOf(mux *http.ServeMux, r *http.Request) string {
	if r.Method != http.MethodConnect { // CONNECT's redirects name the raw path
		_, pattern := mux.Handler(r)
		if i := strings.IndexByte(pattern, '/'); i >= 0 {
			return pattern[i:]
		}
	}
	return "unmatched"
}

// quietRoutes are the probes and the scrape, logged at debug when they
// succeed: they come every few seconds and record no one's action.
var quietRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// hookRoute is the route of webhooks in.
const hookRoute = "/v1/hooks/{name}"

// noteRoute serves mux and copies into the request's record the path
// values only the mux's own request carries.
func noteRoute(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		if rec := recordOf(r.Context()); rec != nil {
			rec.runID, rec.hook = r.PathValue("id"), r.PathValue("name")
		}
	})
}

// observe wraps next (the chain ending with noteRoute(mux)) with the
// audit log line, the Observer's measurements and, with a
// TracerProvider, a server span per request named by its route template.
func (s *Server) observe(mux *http.ServeMux, next http.Handler) http.Handler {
	audited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := routeOf(mux, r)
		rec := &requestRecord{start: s.rt.Clock().Now()}
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetAttributes(attribute.String("http.route", route))
		}
		status := 0
		stream := false
		ww := httpsnoop.Wrap(w, httpsnoop.Hooks{
			WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
				return func(code int) {
					if status == 0 {
						status = code
						if code == http.StatusOK && strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
							stream = true
							s.obs.EventStreamOpened()
						}
					}
					next(code)
				}
			},
			Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
				return func(b []byte) (int, error) {
					if status == 0 {
						status = http.StatusOK
					}
					return next(b)
				}
			},
		})
		s.obs.HTTPRequestStarted()
		defer func() {
			if status == 0 {
				status = http.StatusOK // what net/http sends for a handler that wrote nothing
			}
			if stream {
				s.obs.EventStreamClosed()
			}
			method := methodLabel(r.Method)
			elapsed := s.rt.Clock().Now().Sub(rec.start)
			s.obs.HTTPRequestEnded(method, route, status, elapsed, stream)
			s.auditRequest(r, method, route, status, elapsed, rec)
			if route == hookRoute {
				s.auditHook(r, rec.hook, status)
			}
		}()
		next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), recordKey{}, rec)))
	})
	if s.cfg.TracerProvider == nil {
		return audited
	}
	return otelhttp.NewHandler(audited, "http", otelhttp.WithTracerProvider(s.cfg.TracerProvider),
		otelhttp.WithPropagators(tracing.Propagator()), otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return methodLabel(r.Method) + " " + routeOf(mux, r) }),
		// A webhook's sender is a third party: its trace context is
		// linked, not trusted as the parent.
		otelhttp.WithPublicEndpointFn(func(r *http.Request) bool { return routeOf(mux, r) == hookRoute }))
}

// auditRequest writes the request's audit line: who asked what and the
// answer, never a credential, a body or the raw path.
func (s *Server) auditRequest(r *http.Request, method, route string, status int, elapsed time.Duration, rec *requestRecord) {
	level := slog.LevelInfo
	if quietRoutes[route] && status < 400 {
		level = slog.LevelDebug
	}
	ctx := r.Context()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("method", method), slog.String("route", route), slog.Int("status", status),
		slog.Duration("duration", elapsed), slog.String("remote", r.RemoteAddr),
		slog.Bool("token", r.Header.Get("Authorization") != "")}
	if rec.runID != "" {
		attrs = append(attrs, slog.String("run_id", clip(rec.runID)))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	s.log.LogAttrs(ctx, level, "http request", attrs...)
}

// webhookOutcome names a webhook's outcome by its answer, as the
// OpenAPI document defines the hook endpoint's statuses: 202 accepted,
// 200 a duplicate (nothing done), 401 a bad signature or token, 413 a
// body over the limit, 400 a malformed request, another 4xx refused (the
// signal or the run id), 5xx failed.
func webhookOutcome(status int) string {
	switch {
	case status == http.StatusOK:
		return "duplicate"
	case status >= 200 && status < 300:
		return "accepted"
	case status == http.StatusUnauthorized:
		return "bad_signature"
	case status == http.StatusRequestEntityTooLarge:
		return "too_large"
	case status == http.StatusBadRequest:
		return "bad_request"
	case status >= 500:
		return "failed"
	}
	return "refused"
}

// auditHook writes a webhook's outcome line and counts it: the hook, the
// sender's delivery id, the outcome; never the body or the signature.
// A name no hook has is logged, not counted (it is the sender's choice).
func (s *Server) auditHook(r *http.Request, name string, status int) {
	outcome := webhookOutcome(status)
	h, ok := s.hooks[name]
	if !ok {
		outcome = "unknown_hook"
	} else {
		s.obs.WebhookOutcome(h.Name, outcome)
	}
	attrs := []slog.Attr{slog.String("hook", clip(name)), slog.String("outcome", outcome), slog.Int("status", status),
		slog.String("remote", r.RemoteAddr)}
	if ok && h.DeliveryHeader != "" {
		attrs = append(attrs, slog.String("delivery", clip(r.Header.Get(h.DeliveryHeader))))
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "webhook", attrs...)
}

// signalDelivered measures a signal sent over HTTP, from the request's
// arrival to now (it was applied).
func (s *Server) signalDelivered(r *http.Request) {
	if rec := recordOf(r.Context()); rec != nil {
		s.obs.ObserveSignalDelivery("http", s.rt.Clock().Now().Sub(rec.start))
	}
}
