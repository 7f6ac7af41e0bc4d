package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the HTTP API's: fed by the server through its Observer
// (server.Config.Observer), which Metrics implements.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
	streams  prometheus.Gauge
	webhooks *prometheus.CounterVec
}

// API answers span a memory read (under a millisecond) to a durable
// commit on a slow store (seconds).
var httpBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5 ms .. 16 s

func newHTTPMetrics() httpMetrics {
	return httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_http_requests_total", Help: "HTTP API requests answered, by method, route template (/v1/runs/{id}, never the raw path) and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tqw_http_request_duration_seconds", Help: "HTTP API request latency, by method and route template; event streams are not in it (their life is tqw_http_event_streams').", Buckets: httpBuckets,
		}, []string{"method", "route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tqw_http_requests_in_flight", Help: "HTTP API requests being served, open event streams included.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tqw_http_event_streams", Help: "Event streams (server-sent events subscribers) open.",
		}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tqw_webhooks_total", Help: "Webhook deliveries to configured hooks, by hook and outcome (accepted, duplicate, bad_signature, too_large, bad_request, refused, failed).",
		}, []string{"hook", "outcome"}),
	}
}

func (h httpMetrics) register(reg *prometheus.Registry) {
	reg.MustRegister(h.requests, h.duration, h.inFlight, h.streams, h.webhooks)
}

// HTTPRequestStarted counts a request in flight (server.Observer).
func (m *Metrics) HTTPRequestStarted() { m.http.inFlight.Inc() }

// HTTPRequestEnded counts an answered request by method, route template
// and status, and its latency unless it was an event stream
// (server.Observer).
func (m *Metrics) HTTPRequestEnded(method, route string, status int, elapsed time.Duration, stream bool) {
	m.http.inFlight.Dec()
	m.http.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	if !stream {
		m.http.duration.WithLabelValues(method, route).Observe(max(elapsed, 0).Seconds())
	}
}

// EventStreamOpened and EventStreamClosed count the open event streams
// (server.Observer).
func (m *Metrics) EventStreamOpened() { m.http.streams.Inc() }

// EventStreamClosed: see EventStreamOpened.
func (m *Metrics) EventStreamClosed() { m.http.streams.Dec() }

// WebhookOutcome counts one delivery to a configured hook
// (server.Observer).
func (m *Metrics) WebhookOutcome(hook, outcome string) {
	m.http.webhooks.WithLabelValues(hook, outcome).Inc()
}
