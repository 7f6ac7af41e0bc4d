package metrics

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/buildinfo"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

const workflowYAML = `
tqw: v1
name: metered
steps:
  - id: pick
    set: {greeting: hi}
  - id: route
    switch:
      - when: vars.greeting == "hi"
        next: hello
  - id: hello
    action: shell
    with: {command: "echo hi"}
  - id: wait
    action: wait_signal
    with: {key: "go:${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ output }"
`

// TestMetricsAfterARealRun runs a workflow (a set and a switch, which
// fold into one runtime step, a shell step, a wait for a signal sent
// through the inbox, a succeed) on a writer wired as the
// worker wires it, then scrapes: counters, histograms and gauges carry
// the run, and no label holds its id.
func TestMetricsAfterARealRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := New()
	store := m.WrapStore(mem.New())
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	it, err := interpreter.New(q, store, interpreter.Options{Actions: builtin.New(builtin.Options{EnableShell: true}), Logger: quiet, Events: m.Events,
		Runtime: runtime.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	rt := it.Runtime()
	if err := m.Watch(Source{Runtime: rt}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "metered.yaml")
	if err := os.WriteFile(path, []byte(workflowYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const runID = "run-7f3a"
	done, _ := it.Watch(runID)
	if _, err := it.Submit(ctx, w, nil, runID); err != nil {
		t.Fatal(err)
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.Background())

	// Wait for the run to reach its wait, then signal it through the
	// inbox as another process would.
	for {
		st, err := rt.Status(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == runstate.StateWaiting {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run never waited; state %v", st.State)
		case <-time.After(5 * time.Millisecond):
		}
	}
	c, err := remote.NewClient(store, remote.ClientOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := make(chan error, 1)
	go func() {
		_, err := c.Signal(ctx, "go:"+runID, []byte(`"yes"`))
		sent <- err
	}()
	for answered := false; !answered; {
		if _, err := remote.DrainInbox(ctx, rt, remote.InboxOptions{OnAnswered: m.InboxAnswered}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-sent:
			if err != nil {
				t.Fatal(err)
			}
			answered = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	out := <-done
	if out.Status.String() != "succeeded" {
		t.Fatalf("run ended %s, want succeeded", out.Status)
	}

	checks := map[string]float64{
		`tqw_runs_started_total{workflow="metered"}`:                                                     1,
		`tqw_runs_finished_total{outcome="succeeded",workflow="metered"}`:                                1,
		`tqw_step_attempts_total{action="shell",outcome="ok",step="hello",workflow="metered"}`:           1,
		`tqw_step_duration_seconds_count{action="shell",outcome="ok",step="hello",workflow="metered"}`:   1,
		`tqw_step_attempts_total{action="wait_signal",outcome="waiting",step="wait",workflow="metered"}`: 1,
		`tqw_inbox_commands_total{kind="signal",outcome="ok"}`:                                           1,
		`tqw_signal_delivery_latency_seconds_count{path="inbox"}`:                                        1,
		`tqw_runs{state="succeeded"}`:                                                                    1,
		`tqw_runs{state="waiting"}`:                                                                      0,
		`tqw_queue_jobs{queue="` + rt.QueueName() + `",state="pending"}`:                                 0,
	}
	text := scrape(t, m)
	for series, want := range checks {
		got, ok := value(text, series)
		if !ok {
			t.Errorf("no series %s in the scrape", series)
			continue
		}
		if got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for _, series := range []string{`tqw_objstore_requests_total{op="put",outcome="ok"}`, `tqw_kv_durable_commits_total`, `tqw_kv_wal_puts_total`,
		`tqw_kv_wal_put_duration_seconds_count`, `tqw_objstore_request_duration_seconds_count{op="put"}`} {
		if got, ok := value(text, series); !ok || got <= 0 {
			t.Errorf("%s = %v (present %v), want > 0", series, got, ok)
		}
	}
	if strings.Contains(text, runID) {
		t.Errorf("the scrape names the run id %s: unbounded label", runID)
	}
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "tqw_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// TestLLMUsage counts tokens and cost by model from end events, and a
// call without a known price apart.
func TestLLMUsage(t *testing.T) {
	m := New()
	m.Events(interpreter.Event{Kind: "end", Workflow: "w", Step: "ask", Action: "llm", Status: interpreter.OutcomeSucceeded,
		LLM: []interpreter.LLMUsage{{Model: "gpt-x", PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.25, CostKnown: true},
			{Model: "gpt-x", PromptTokens: 1, CompletionTokens: 2, CostUSD: 0.5, CostKnown: true},
			{Model: "local", PromptTokens: 3}}})
	for series, want := range map[string]float64{
		`tqw_llm_tokens_total{kind="prompt",model="gpt-x"}`:         11,
		`tqw_llm_tokens_total{kind="completion",model="gpt-x"}`:     7,
		`tqw_llm_cost_usd_total{model="gpt-x"}`:                     0.75,
		`tqw_llm_unpriced_calls_total{model="local"}`:               1,
		`tqw_runs_finished_total{outcome="succeeded",workflow="w"}`: 1,
	} {
		if got, ok := value(scrape(t, m), series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
}

// scrape GETs the handler as Prometheus does.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s\n%s", resp.Status, b)
	}
	return string(b)
}

// value finds a series line ("name{labels} value") in a text scrape.
func value(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, series+" ")
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest, &v); err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

const waitYAML = `
tqw: v1
name: patient
steps:
  - id: wait
    action: wait_signal
    with: {key: "go:${ run.id }", timeout: 30d}
  - id: done
    succeed: "${ output }"
`

// TestWaitsAndCancellations runs two waiting runs on the mock clock: one
// is signalled after three days parked, the other cancelled while it
// waits. The three days are in tqw_step_wait_seconds, not in the
// step-duration buckets, and the cancelled run is counted as finished.
func TestWaitsAndCancellations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	m := New()
	clk := clock.NewMock(time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC))
	store := mem.New()
	q, err := queue.Open(ctx, store, queue.Options{Clock: clk, Logger: quiet, SweepInterval: -1,
		DefaultConfig: queue.QueueConfig{LeaseDuration: 1000 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	it, err := interpreter.New(q, store, interpreter.Options{Actions: builtin.New(builtin.Options{}), Logger: quiet,
		Events: m.Events, Ended: m.RunEnded, Runtime: runtime.Options{Logger: quiet, ShutdownTimeout: -1}})
	if err != nil {
		t.Fatal(err)
	}
	rt := it.Runtime()
	path := filepath.Join(t.TempDir(), "patient.yaml")
	if err := os.WriteFile(path, []byte(waitYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	signalled, _ := it.Watch("sig-run-1")
	cancelled, _ := it.Watch("cancel-run-1")
	for _, id := range []string{"sig-run-1", "cancel-run-1"} {
		if _, err := it.Submit(ctx, w, nil, id); err != nil {
			t.Fatal(err)
		}
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.Background())
	for _, id := range []string{"sig-run-1", "cancel-run-1"} {
		for {
			st, err := rt.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == runstate.StateWaiting {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("run %s never waited; state %v", id, st.State)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	const parked = 72 * time.Hour
	clk.Advance(parked)
	if _, err := rt.SendSignal(ctx, "go:sig-run-1", []byte(`"yes"`), signal.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Cancel(ctx, "cancel-run-1"); err != nil {
		t.Fatal(err)
	}
	for id, ch := range map[string]<-chan *runstate.Outcome{"sig-run-1": signalled, "cancel-run-1": cancelled} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("run %s did not end", id)
		}
	}
	// A watcher wakes when the end commits; the cancelled run is counted
	// when its end is handled, after that.
	text := scrape(t, m)
	for {
		if _, ok := value(text, `tqw_runs_finished_total{outcome="cancelled",workflow="patient"}`); ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the cancelled run was never counted")
		case <-time.After(5 * time.Millisecond):
		}
		text = scrape(t, m)
	}
	for series, want := range map[string]float64{
		`tqw_runs_finished_total{outcome="succeeded",workflow="patient"}`:                                               1,
		`tqw_runs_finished_total{outcome="cancelled",workflow="patient"}`:                                               1,
		`tqw_step_duration_seconds_count{action="wait_signal",outcome="ok",step="wait",workflow="patient"}`:             1,
		`tqw_step_wait_seconds_count{action="wait_signal",step="wait",workflow="patient"}`:                              1,
		`tqw_step_wait_seconds_bucket{action="wait_signal",step="wait",workflow="patient",le="65536"}`:                  0,
		`tqw_step_wait_seconds_bucket{action="wait_signal",step="wait",workflow="patient",le="262144"}`:                 1,
		`tqw_step_duration_seconds_bucket{action="wait_signal",outcome="ok",step="wait",workflow="patient",le="1.024"}`: 1,
	} {
		if got, ok := value(text, series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if sum, _ := value(text, `tqw_step_wait_seconds_sum{action="wait_signal",step="wait",workflow="patient"}`); sum < parked.Seconds() {
		t.Errorf("the wait's sum is %vs; want at least the %v parked", sum, parked)
	}
	if strings.Contains(text, "sig-run-1") || strings.Contains(text, "cancel-run-1") {
		t.Error("the scrape names a run id")
	}
}

// TestBuildInfo: tqw_build_info is 1, labelled with the build's Go
// toolchain as buildinfo reads it.
func TestBuildInfo(t *testing.T) {
	in, _ := buildinfo.Read()
	text := scrape(t, New())
	found := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "tqw_build_info{") && strings.Contains(line, `goversion="`+in.GoVersion+`"`) && strings.HasSuffix(line, " 1") {
			found = strings.Contains(line, `revision="`) && strings.Contains(line, `version="`)
		}
	}
	if !found {
		t.Errorf("no tqw_build_info{version,revision,goversion=%q} 1 in the scrape", in.GoVersion)
	}
}
