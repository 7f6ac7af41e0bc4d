package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tqw-dsl/tqw/internal/browsertest"
	"github.com/tqw-dsl/tqw/server/client"
)

// TestServeRefusesCrossSiteAndRebinding drives a real token-less `tqw-dsl
// serve` on loopback as a hostile page and a rebinding name would: a page
// of another origin (another 127.0.0.1 port), opened in headless
// Chromium, sends the CORS "simple" requests that used to submit a run
// and approve someone's pending approval (no-cors, text/plain, a JSON
// body); the server refuses both (403) and nothing is submitted or
// signalled. A Host that names another server reads nothing (421), a
// text/plain POST without a browser is 415, a wrong method 405 with
// Allow, and strict bodies are 400.
func TestServeRefusesCrossSiteAndRebinding(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tqw-dsl and Chromium; skipped with -short")
	}
	browsertest.Chromium(t) // skip before starting a server when there is no browser
	base := startServeProcess(t, "", "file://"+filepath.Join(t.TempDir(), "store"), nil)
	c := client.New(base, client.Options{HTTPClient: &http.Client{Transport: &checkingTransport{t: t, conf: sharedConformance(t)}}})
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if _, err := c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "victim", Input: json.RawMessage(`{"request":"laptop"}`)}); err != nil {
		t.Fatal(err)
	}
	waitState := func(id, state string) client.Run {
		t.Helper()
		for {
			run, err := c.Run(ctx, id)
			if err == nil && run.State == state {
				return run
			}
			select {
			case <-ctx.Done():
				t.Fatalf("run %s did not reach %s: %+v %v", id, state, run, err)
			case <-waitTick():
			}
		}
	}
	waitState("victim", "waiting")

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>evil</title><script>
const api = %q;
const send = (path, body) => fetch(api + path, {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: JSON.stringify(body)});
Promise.allSettled([
  send('/v1/runs', {workflow: 'approval.tqw.yaml', run_id: 'evil', input: {request: 'evil'}}),
  send('/v1/signals/approve:victim', {approved: true, by: 'evil'}),
]).then(() => { document.title = 'sent'; });
</script>`, base)
	}))
	defer page.Close()

	tab := browsertest.Tab(t, ctx)
	var mu sync.Mutex
	answered := map[string]int64{} // path -> status the browser saw
	if err := chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*network.EventResponseReceived); ok && strings.HasPrefix(e.Response.URL, base+"/v1/") {
			mu.Lock()
			answered[strings.TrimPrefix(e.Response.URL, base)] = e.Response.Status
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tab, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("enabling the network domain: %v", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Navigate(page.URL)); err != nil {
		t.Fatalf("opening the hostile page: %v", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](`document.title === 'sent'`, chromedp.WithPollingTimeout(deadline))); err != nil {
		t.Fatalf("the hostile page's requests did not settle: %v", err)
	}
	mu.Lock()
	got := fmt.Sprint(answered)
	for _, p := range []string{"/v1/runs", "/v1/signals/approve:victim"} {
		if answered[p] != http.StatusForbidden {
			t.Errorf("the browser's cross-origin POST %s was answered %d, want 403 (all answers: %s)", p, answered[p], got)
		}
	}
	mu.Unlock()
	if _, err := c.Run(ctx, "evil"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the cross-origin page submitted a run: %v", err)
	}
	if run, err := c.Run(ctx, "victim"); err != nil || run.State != "waiting" {
		t.Errorf("the cross-origin page signalled the pending approval: %+v %v", run, err)
	}
	if hist, err := c.History(ctx, "victim"); err != nil || len(hist) != 1 {
		t.Errorf("victim's history after the page: %+v %v, want its one waiting record", hist, err)
	}

	// A rebinding name reads nothing: 421 and no run id in the answer.
	raw := &http.Client{Transport: &checkingTransport{t: t, conf: sharedConformance(t)}}
	for _, p := range []string{"/v1/runs", "/v1/runs/victim", "/v1/runs/victim/history"} {
		status, body := rawCall(t, raw, "GET", base+p, "", map[string]string{"Host": "attacker.example"})
		if status != http.StatusMisdirectedRequest || strings.Contains(body, "victim\"") || !strings.Contains(body, `"misdirected"`) {
			t.Errorf("GET %s with Host attacker.example: %d %s, want 421 that reads nothing", p, status, body)
		}
	}
	// No browser, wrong body type: 415, nothing submitted.
	if status, body := rawCall(t, raw, "POST", base+"/v1/runs", `{"workflow":"approval.tqw.yaml","run_id":"plain","input":{"request":"x"}}`, map[string]string{"Content-Type": "text/plain"}); status != http.StatusUnsupportedMediaType {
		t.Errorf("a text/plain submission: %d %s, want 415", status, body)
	}
	if _, err := c.Run(ctx, "plain"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a text/plain submission made a run: %v", err)
	}
	// A wrong method: 405 with Allow and the JSON error.
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/runs/victim", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(b), `"method_not_allowed"`) {
		t.Errorf("DELETE /v1/runs/victim: %d Allow %q %s, want 405 with Allow GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"), b)
	}
	// Strict bodies: a duplicate key, bad UTF-8, a key with a dot segment.
	for _, tc := range []struct{ path, body, field string }{
		{"/v1/runs", `{"workflow":"approval.tqw.yaml","run_id":"dup","input":{"request":"a","request":"b"}}`, `"field":"input"`},
		{"/v1/runs", "{\"workflow\":\"approval.tqw.yaml\",\"run_id\":\"utf\",\"input\":{\"request\":\"\xff\"}}", `"field":"input"`},
		{"/v1/signals/approve:victim", `{"approved":true,"approved":false}`, `"field":"payload"`},
		{"/v1/signals/approve:victim%2F..%2Fx", `{"approved":true}`, `"field":"key"`},
	} {
		if status, body := rawCall(t, raw, "POST", base+tc.path, tc.body, map[string]string{"Content-Type": "application/json"}); status != http.StatusBadRequest || !strings.Contains(body, tc.field) {
			t.Errorf("POST %s %q: %d %s, want 400 with %s", tc.path, tc.body, status, body, tc.field)
		}
	}
	for _, id := range []string{"dup", "utf"} {
		if _, err := c.Run(ctx, id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("a refused body made run %s: %v", id, err)
		}
	}
	if run, err := c.Run(ctx, "victim"); err != nil || run.State != "waiting" {
		t.Errorf("a refused signal reached the approval: %+v %v", run, err)
	}
}

// TestServeBearerSchemeIgnoresCase: a real serve with a token takes
// "bearer <token>" (RFC 9110: the scheme is case-insensitive).
func TestServeBearerSchemeIgnoresCase(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tqw-dsl; skipped with -short")
	}
	const token = "guard-process-token-0123456789"
	base := startServeProcess(t, token, "file://"+filepath.Join(t.TempDir(), "store"), nil)
	raw := &http.Client{Transport: &checkingTransport{t: t, conf: sharedConformance(t)}}
	for h, want := range map[string]int{"bearer " + token: 200, "Bearer " + token: 200, "bearer not-the-token-0123456789": 401} {
		if status, body := rawCall(t, raw, "GET", base+"/v1/runs", "", map[string]string{"Authorization": h}); status != want {
			t.Errorf("Authorization %q: %d %s, want %d", h, status, body, want)
		}
	}
}

// rawCall sends one request and returns the status and the body.
func rawCall(t *testing.T, hc *http.Client, method, u, body string, header map[string]string) (int, string) {
	t.Helper()
	status, _, b := call(t, hc, method, u, body, header)
	return status, b
}

// call sends one request (header "Host" sets the Host) and returns the
// status, headers and body of the answer.
func call(t *testing.T, hc *http.Client, method, u, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// waitTick paces a poll of the API.
func waitTick() <-chan time.Time { return time.After(10 * time.Millisecond) }
