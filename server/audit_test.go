package server_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/metrics"
)

var _ server.Observer = (*metrics.Metrics)(nil)

// logCapture is a JSON slog handler's output, safe for concurrent use.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// lines returns the records whose msg is msg.
func (c *logCapture) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(c.text()), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// find returns the one record of msg whose fields include want.
func (c *logCapture) find(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, rec := range c.lines(t, msg) {
		ok := true
		for k, v := range want {
			if fmt.Sprint(rec[k]) != fmt.Sprint(v) {
				ok = false
			}
		}
		if ok {
			found = append(found, rec)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %q lines with %v; want 1. The log:\n%s", len(found), msg, want, c.text())
	}
	return found[0]
}

// findSome is find for a request a poll may have repeated: at least one
// line, all alike.
func (c *logCapture) findSome(t *testing.T, msg string, want map[string]any) {
	t.Helper()
	for _, rec := range c.lines(t, msg) {
		ok := true
		for k, v := range want {
			if fmt.Sprint(rec[k]) != fmt.Sprint(v) {
				ok = false
			}
		}
		if ok {
			return
		}
	}
	t.Fatalf("no %q line with %v. The log:\n%s", msg, want, c.text())
}

// auditFixture is hookFixture's server with its log captured at info and
// its measurements going to m.
func auditFixture(t *testing.T) (*fixture, *logCapture, *metrics.Metrics) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(bearerSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(hooksYAML, tokenFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GH_SECRET": githubSecret, "STRIPE_SECRET": stripeSecret}
	hooks, err := server.LoadHooks(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	logs := &logCapture{}
	m := metrics.New()
	f := newFixture(t, func(c *server.Config) {
		c.Hooks, c.Token, c.Observer = hooks, apiToken, m
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	return f, logs, m
}

// do sends a request through the checking client and returns its status.
func (f *fixture) do(method, path, token string, body string, headers map[string]string) int {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, method, f.hs.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := f.raw().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metricValue is the value of the series name{labels} in reg (0, false
// when absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range s.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case s.Counter != nil:
				return s.GetCounter().GetValue(), true
			case s.Gauge != nil:
				return s.GetGauge().GetValue(), true
			case s.Histogram != nil:
				return float64(s.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestAuditTrail: a submission, a read, a 401 and a forged webhook each
// leave one structured line at info (method, route template, status,
// duration, remote address, whether a token came, the run id) and the
// webhooks a line of their outcome with the hook and delivery id; no
// line carries the token, a secret, a signature or a body. The same
// requests are counted by route and status, webhooks by outcome.
func TestAuditTrail(t *testing.T) {
	f, logs, m := auditFixture(t)
	const bodyMarker = "body-marker-never-logged"
	const wrongToken = "wrong-token-never-logged-0123456789"

	if got := f.do(http.MethodPost, "/v1/runs", apiToken, `{"workflow":"greet.yaml","run_id":"audit-1","input":{"name":"`+bodyMarker+`"}}`, nil); got != http.StatusCreated {
		t.Fatalf("submit: %d", got)
	}
	line := logs.find(t, "http request", map[string]any{"method": "POST", "route": "/v1/runs", "status": http.StatusCreated})
	if line["level"] != "INFO" || line["token"] != true || !strings.HasPrefix(fmt.Sprint(line["remote"]), "127.0.0.1:") {
		t.Errorf("submission line %v: want INFO, token true, the client's address", line)
	}
	if _, ok := line["duration"].(float64); !ok {
		t.Errorf("submission line %v has no duration", line)
	}
	f.waitState("audit-1", "succeeded") // polls GET /v1/runs/{id} as often as it takes
	logs.findSome(t, "http request", map[string]any{"method": "GET", "route": "/v1/runs/{id}", "run_id": "audit-1", "status": http.StatusOK})

	if got := f.do(http.MethodGet, "/v1/runs", wrongToken, "", nil); got != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", got)
	}
	logs.find(t, "http request", map[string]any{"method": "GET", "route": "/v1/runs", "status": http.StatusUnauthorized, "token": true})
	if got := f.do(http.MethodGet, "/v1/runs/audit-1/history", "", "", nil); got != http.StatusUnauthorized {
		t.Fatalf("no token: %d", got)
	}
	logs.find(t, "http request", map[string]any{"route": "/v1/runs/{id}/history", "status": http.StatusUnauthorized, "token": false})

	forged := `{"action":"` + bodyMarker + `"}`
	mac := hmac.New(sha256.New, []byte("not-the-hook-secret-0123456789"))
	mac.Write([]byte(forged))
	badSig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if got := f.do(http.MethodPost, "/v1/hooks/github", "", forged, map[string]string{"X-Hub-Signature-256": badSig, "X-GitHub-Delivery": "delivery-forged-1"}); got != http.StatusUnauthorized {
		t.Fatalf("a forged webhook: %d", got)
	}
	logs.find(t, "http request", map[string]any{"route": "/v1/hooks/{name}", "status": http.StatusUnauthorized, "token": false})
	logs.find(t, "webhook", map[string]any{"hook": "github", "outcome": "bad_signature", "delivery": "delivery-forged-1", "level": "INFO"})

	good := `{"name":"` + bodyMarker + `"}`
	for i, want := range []string{"accepted", "duplicate"} {
		f.do(http.MethodPost, "/v1/hooks/github", "", good, map[string]string{"X-Hub-Signature-256": githubSign(good), "X-GitHub-Delivery": "delivery-2"})
		if n := len(logs.lines(t, "webhook")); n != i+2 {
			t.Fatalf("%d webhook lines after %s; want %d", n, want, i+2)
		}
		logs.find(t, "webhook", map[string]any{"hook": "github", "outcome": want, "delivery": "delivery-2"})
	}
	big := `{"x":"` + strings.Repeat("a", 1<<20) + `"}`
	f.do(http.MethodPost, "/v1/hooks/github", "", big, map[string]string{"X-Hub-Signature-256": githubSign(big), "X-GitHub-Delivery": "delivery-3"})
	logs.find(t, "webhook", map[string]any{"hook": "github", "outcome": "too_large", "delivery": "delivery-3"})
	f.do(http.MethodPost, "/v1/hooks/github", "", "not json", map[string]string{"X-Hub-Signature-256": githubSign("not json"), "X-GitHub-Delivery": "delivery-4"})
	logs.find(t, "webhook", map[string]any{"hook": "github", "outcome": "bad_request", "delivery": "delivery-4"})

	if got := f.do(http.MethodPost, "/v1/signals/audit:"+bodyMarker, apiToken, `{"v":"`+bodyMarker+`"}`, nil); got != http.StatusAccepted {
		t.Fatalf("signal: %d", got)
	}
	logs.find(t, "http request", map[string]any{"route": "/v1/signals/{key...}", "status": http.StatusAccepted})

	text := logs.text()
	for _, secret := range []string{apiToken, wrongToken, githubSecret, bearerSecret, bodyMarker, badSig, githubSign(good)} {
		if strings.Contains(text, secret) {
			t.Errorf("the log carries %q:\n%s", secret, text)
		}
	}

	reg := m.Registry()
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"tqw_http_requests_total", map[string]string{"method": "POST", "route": "/v1/runs", "code": "201"}, 1},
		{"tqw_http_requests_total", map[string]string{"method": "GET", "route": "/v1/runs", "code": "401"}, 1},
		{"tqw_http_requests_total", map[string]string{"method": "POST", "route": "/v1/hooks/{name}", "code": "401"}, 1},
		{"tqw_http_request_duration_seconds", map[string]string{"method": "POST", "route": "/v1/runs"}, 1},
		{"tqw_webhooks_total", map[string]string{"hook": "github", "outcome": "bad_signature"}, 1},
		{"tqw_webhooks_total", map[string]string{"hook": "github", "outcome": "accepted"}, 1},
		{"tqw_webhooks_total", map[string]string{"hook": "github", "outcome": "duplicate"}, 1},
		{"tqw_webhooks_total", map[string]string{"hook": "github", "outcome": "too_large"}, 1},
		{"tqw_webhooks_total", map[string]string{"hook": "github", "outcome": "bad_request"}, 1},
		{"tqw_signal_delivery_latency_seconds", map[string]string{"path": "http"}, 1},
		{"tqw_http_requests_in_flight", nil, 0},
	} {
		if got, ok := metricValue(t, reg, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v); want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if strings.Contains(l.GetValue(), "audit-1") || strings.Contains(l.GetValue(), bodyMarker) {
					t.Errorf("%s has the label %s=%q: a per-request value", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestEventStreamGauge: an open event stream is one subscriber while it
// is open and none once the client left; its life is not a latency.
func TestEventStreamGauge(t *testing.T) {
	f, _, m := auditFixture(t)
	reg := m.Registry()
	ctx, cancel := context.WithCancel(f.ctx)
	st, err := f.c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The gauge moves before the stream's headers are sent.
	if got, _ := metricValue(t, reg, "tqw_http_event_streams", nil); got != 1 {
		t.Errorf("tqw_http_event_streams = %v with a stream open; want 1", got)
	}
	cancel()
	st.Close()
	for {
		got, _ := metricValue(t, reg, "tqw_http_event_streams", nil)
		inFlight, _ := metricValue(t, reg, "tqw_http_requests_in_flight", nil)
		if got == 0 && inFlight == 0 {
			break
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("tqw_http_event_streams = %v, in flight %v after the client left; want 0", got, inFlight)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if got, _ := metricValue(t, reg, "tqw_http_requests_total", map[string]string{"route": "/v1/events", "code": "200"}); got != 1 {
		t.Errorf("the stream's request counted %v times; want 1", got)
	}
	if got, ok := metricValue(t, reg, "tqw_http_request_duration_seconds", map[string]string{"route": "/v1/events"}); ok && got != 0 {
		t.Errorf("the stream's life is in the latency histogram (%v samples)", got)
	}
}
