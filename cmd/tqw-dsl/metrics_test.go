package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWorkerMetrics starts `worker --metrics` on a free port, drives a run
// through the inbox (submit, signal) from other processes, and scrapes
// /metrics: the run, its steps and the signal are counted, and nothing
// else is served on that port.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	wait := abs(t, testdata+"e2e_wait.yaml")
	w := c.start("worker", "--metrics", "127.0.0.1:0")
	var addr string
	deadline := time.NewTimer(waitDeadline)
	defer deadline.Stop()
	for addr == "" {
		select {
		case l, ok := <-w.line:
			if !ok {
				t.Fatalf("worker exited (%d) before serving metrics:\n%s", w.code, w.stderr())
			}
			if a, found := strings.CutPrefix(l, "tqw-dsl worker: metrics at "); found {
				addr = a
			}
		case <-deadline.C:
			t.Fatalf("worker did not print its metrics address in %v:\n%s", waitDeadline, w.stderr())
		}
	}
	w.waitLine("working")
	c.must(0, "submit", wait, "--run-id", "m1")
	c.awaitState("m1", "waiting")
	c.must(0, "signal", "m1:ask", `{"approved": true}`)
	c.awaitState("m1", "succeeded")

	text := scrapeMetrics(t, addr)
	for _, want := range []string{
		`tqw_runs_started_total{workflow="e2e-wait"} 1`,
		`tqw_runs_finished_total{outcome="succeeded",workflow="e2e-wait"} 1`,
		`tqw_inbox_commands_total{kind="signal",outcome="ok"} 1`,
		`tqw_inbox_commands_total{kind="submit",outcome="ok"} 1`,
		`tqw_signal_delivery_latency_seconds_count{path="inbox"} 1`,
		`tqw_runs{state="succeeded"} 1`,
		`tqw_writer_lease_state{state="valid"} 1`,
		`tqw_objstore_requests_total{op="put",outcome="ok"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	if strings.Contains(text, "m1") {
		t.Error("the scrape names the run id m1")
	}
	if resp, err := http.Get(strings.TrimSuffix(addr, "metrics")); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / on the metrics port: %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
}

// scrapeMetrics GETs url as Prometheus does.
func scrapeMetrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v\n%s", url, resp.Status, err, b)
	}
	return string(b)
}

// TestServeAuditAndMetrics drives a real serve (TQW_LOG=info, a token): a
// submission and a cancellation over HTTP and a request without the
// token each leave an audit line on stderr and are counted at /metrics
// by route template and status; the cancelled run is counted as
// finished; no line or series carries the token.
func TestServeAuditAndMetrics(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, apiTokenEnv+"="+serveToken, "TQW_LOG=info")
	wf := filepath.Join(c.dir, "wf", "approval.tqw.yaml")
	p, addr := startServe(t, c, "--allow-inline") // submit sends the file's text
	if code, _, errOut := c.run("submit", wf, "--input", `{"request":"disk"}`, "--run-id", "au1"); code != exitOK {
		t.Fatalf("submit: %d %s", code, errOut)
	}
	if code, _, errOut := c.run("cancel", "au1"); code != exitOK {
		t.Fatalf("cancel: %d %s", code, errOut)
	}
	resp, err := http.Get(addr + "/v1/runs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/runs without the token: %d", resp.StatusCode)
	}
	var text string
	pollUntil(t, "the cancelled run counted", func() bool {
		text = scrapeMetrics(t, addr+"/metrics")
		return strings.Contains(text, `tqw_runs_finished_total{outcome="cancelled",workflow="approval"} 1`)
	})
	for _, want := range []string{
		`tqw_http_requests_total{code="201",method="POST",route="/v1/runs"} 1`,
		`tqw_http_requests_total{code="202",method="POST",route="/v1/runs/{id}/cancel"} 1`,
		`tqw_http_requests_total{code="401",method="GET",route="/v1/runs"} 1`,
		`tqw_http_request_duration_seconds_count{method="POST",route="/v1/runs"} 1`,
		`tqw_http_requests_in_flight 1`, // the scrape itself
		`tqw_build_info{`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	if strings.Contains(text, "au1") || strings.Contains(text, serveToken) {
		t.Error("the scrape names the run id or the token")
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := p.wait(); code != exitOK {
		t.Fatalf("serve after SIGTERM: %d %s", code, errOut)
	}
	logs := p.stderr()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`msg="http request" method=POST route=/v1/runs status=201 duration=\S+ remote=127\.0\.0\.1:\d+ token=true`),
		regexp.MustCompile(`msg="http request" method=POST route=/v1/runs/\{id\}/cancel status=202 .* token=true run_id=au1`),
		regexp.MustCompile(`msg="http request" method=GET route=/v1/runs status=401 .* token=false`),
	} {
		if !want.MatchString(logs) {
			t.Errorf("serve's log has no line matching %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, serveToken) || strings.Contains(logs, `"disk"`) {
		t.Errorf("serve's log carries the token or the input:\n%s", logs)
	}
}
