package main

import (
	"io"
	"net/http"
	"strings"
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
