package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/server/client"
)

// flakyYAML fails at its http step while the test's server answers 503.
const flakyYAML = `tqw: v1
name: flaky
steps:
  - id: fetch
    action: http
    with: {url: "${ input.url }"}
  - id: done
    succeed: "${ output.body }"
`

func newFlaky(t *testing.T) (*httptest.Server, *atomic.Bool) {
	var fixed atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("fixed"))
	}))
	t.Cleanup(ts.Close)
	return ts, &fixed
}

func (f *fixture) submitFlaky(id, url string, labels map[string]string) {
	f.t.Helper()
	in, _ := json.Marshal(map[string]string{"url": url})
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: flakyYAML, RunID: id, Input: in, Labels: labels}); err != nil {
		f.t.Fatal(err)
	}
	f.waitState(id, "failed")
}

func wantAPIError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != status || ce.Code != code {
		t.Fatalf("error %v; want %d %s", err, status, code)
	}
}

func TestRetryAndSkipOverHTTP(t *testing.T) {
	f := newFixture(t)
	ts, fixed := newFlaky(t)
	f.submitFlaky("r1", ts.URL, nil)

	// A revision without the step the run ended at: 422, nothing changed.
	bad := "tqw: v1\nname: flaky\nsteps:\n  - id: other\n    succeed: 1\n"
	_, err := f.c.Retry(f.ctx, "r1", client.RetryRequest{YAML: bad})
	wantAPIError(t, err, http.StatusUnprocessableEntity, "incompatible_definition")
	if !strings.Contains(err.Error(), `"fetch" is missing`) {
		t.Fatalf("incompatible: %v; want the difference named", err)
	}
	f.waitState("r1", "failed")
	// A file outside the workflows folder is refused as a submission's is.
	_, err = f.c.Retry(f.ctx, "r1", client.RetryRequest{Workflow: "../flaky.yaml"})
	wantAPIError(t, err, http.StatusBadRequest, "bad_request")

	fixed.Store(true)
	out, err := f.c.Retry(f.ctx, "r1", client.RetryRequest{})
	if err != nil || out.RunID != "r1" {
		t.Fatalf("retry: %+v %v", out, err)
	}
	if r := f.waitState("r1", "succeeded"); string(r.Result) != `"fixed"` {
		t.Fatalf("result %s", r.Result)
	}
	_, err = f.c.Retry(f.ctx, "r1", client.RetryRequest{})
	wantAPIError(t, err, http.StatusConflict, "not_redrivable")
	_, err = f.c.Retry(f.ctx, "nope", client.RetryRequest{})
	wantAPIError(t, err, http.StatusNotFound, "not_found")

	fixed.Store(false)
	f.submitFlaky("s1", ts.URL, nil)
	_, err = f.c.Skip(f.ctx, "s1", "done", nil)
	wantAPIError(t, err, http.StatusConflict, "not_redrivable")
	if _, err := f.c.Skip(f.ctx, "s1", "fetch", []byte(`{"body":"given"}`)); err != nil {
		t.Fatal(err)
	}
	if r := f.waitState("s1", "succeeded"); string(r.Result) != `"given"` {
		t.Fatalf("result after skip %s", r.Result)
	}
	h, err := f.c.History(f.ctx, "s1")
	if err != nil || len(h) != 4 || h[1].Status != "redriven" || h[2].Status != "skipped" {
		t.Fatalf("history %+v %v", h, err)
	}
}

func TestBulkOverHTTP(t *testing.T) {
	f := newFixture(t)
	ts, fixed := newFlaky(t)
	for _, id := range []string{"b1", "b2", "b3"} {
		f.submitFlaky(id, ts.URL, map[string]string{"batch": "x"})
	}
	f.submitFlaky("other", ts.URL, nil)
	filter := client.ListOptions{Labels: map[string]string{"batch": "x"}, Status: []string{"failed"}}
	dry, err := f.c.Bulk(f.ctx, filter, client.BulkRequest{Action: "retry"})
	if err != nil || !dry.DryRun || len(dry.Runs) != 3 || dry.Runs[0].Outcome != "selected" || dry.RequestID == "" {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	fixed.Store(true)
	res, err := f.c.Bulk(f.ctx, filter, client.BulkRequest{Action: "retry", Apply: true, RequestID: "req-1"})
	if err != nil || res.DryRun || len(res.Runs) != 3 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	for _, r := range res.Runs {
		if r.Outcome != "redriven" {
			t.Fatalf("run %s: %s %s", r.RunID, r.Outcome, r.Detail)
		}
		f.waitState(r.RunID, "succeeded")
	}
	if r, err := f.c.Run(f.ctx, "other"); err != nil || r.State != "failed" {
		t.Fatalf("a run outside the filter: %+v %v", r.State, err)
	}
	// Sent again with the same id: the runs are done already, whatever
	// the filter now selects.
	again, err := f.c.Bulk(f.ctx, client.ListOptions{Labels: map[string]string{"batch": "x"}}, client.BulkRequest{Action: "retry", Apply: true, RequestID: "req-1"})
	if err != nil || len(again.Runs) != 3 || again.Runs[0].Outcome != "done" {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	_, err = f.c.Bulk(f.ctx, client.ListOptions{}, client.BulkRequest{Action: "explode"})
	wantAPIError(t, err, http.StatusBadRequest, "bad_request")
	if _, err := f.c.Bulk(f.ctx, client.ListOptions{Limit: 3}, client.BulkRequest{Action: "cancel"}); err == nil {
		t.Fatal("Bulk with a limit: no error")
	}

	// Signal and cancel waiting runs.
	wait := "tqw: v1\nname: waiter\nsteps:\n  - id: w\n    action: wait_signal\n    with: {key: \"go:${ run.id }\", timeout: 1h}\n  - id: done\n    succeed: \"${ output }\"\n"
	for _, id := range []string{"w1", "w2"} {
		if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: wait, RunID: id, Labels: map[string]string{"batch": "w"}}); err != nil {
			t.Fatal(err)
		}
		f.waitState(id, "waiting")
	}
	sig, err := f.c.Bulk(f.ctx, client.ListOptions{Labels: map[string]string{"batch": "w"}, Cursor: "w1"},
		client.BulkRequest{Action: "signal", Apply: true, Payload: json.RawMessage(`"hello"`)})
	if err != nil || len(sig.Runs) != 1 || sig.Runs[0].RunID != "w2" || sig.Runs[0].Outcome != "delivered" {
		t.Fatalf("signal after w1: %+v %v", sig, err)
	}
	if r := f.waitState("w2", "succeeded"); string(r.Result) != `"hello"` {
		t.Fatalf("w2 result %s", r.Result)
	}
	can, err := f.c.Bulk(f.ctx, client.ListOptions{Workflow: "waiter", Status: []string{"waiting"}}, client.BulkRequest{Action: "cancel", Apply: true})
	if err != nil || len(can.Runs) != 1 || can.Runs[0].RunID != "w1" || can.Runs[0].Outcome != "cancelled" {
		t.Fatalf("cancel: %+v %v", can, err)
	}
	f.waitState("w1", "cancelled")
}

func TestClearSignalOverHTTP(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Signal(f.ctx, "nobody/waits", []byte(`1`), false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []bool{true, false} {
		res, err := f.c.ClearSignal(f.ctx, "nobody/waits")
		if err != nil || res.Cleared != want || res.Key != "nobody/waits" {
			t.Fatalf("clear: %+v %v; want cleared %v", res, err, want)
		}
	}
}

func TestSkipAWaitingRunOverHTTP(t *testing.T) {
	f := newFixture(t)
	yaml := `tqw: v1
name: waits
steps:
  - id: wait
    action: wait_signal
    with: {key: "go-${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ steps.wait.output }"
`
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: yaml, RunID: "w1"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("w1", "waiting")
	_, err := f.c.Skip(f.ctx, "w1", "done", nil)
	wantAPIError(t, err, http.StatusConflict, "not_redrivable")
	if !strings.Contains(err.Error(), `waits at step "wait", not "done"`) {
		t.Fatalf("skip of a step the run does not wait at: %v", err)
	}
	if _, err := f.c.Skip(f.ctx, "w1", "wait", []byte(`"given"`)); err != nil {
		t.Fatal(err)
	}
	if r := f.waitState("w1", "succeeded"); string(r.Result) != `"given"` {
		t.Fatalf("result after skip %s", r.Result)
	}
	h, err := f.c.History(f.ctx, "w1")
	if err != nil || len(h) != 3 || h[0].Status != "waiting" || h[1].Status != "skipped" {
		t.Fatalf("history %+v %v", h, err)
	}
}
