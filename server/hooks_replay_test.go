package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

// TestHookReplayUnderANewDeliveryID: a signed request sent again under
// another delivery id (GitHub does not sign the delivery header), or
// with none, is a replay: a duplicate that starts no run and sends no
// signal.
func TestHookReplayUnderANewDeliveryID(t *testing.T) {
	f := hookFixture(t)
	ctx := f.ctx
	body := `{"name":"replayed"}`
	hdr := func(delivery string) http.Header {
		return http.Header{"X-Hub-Signature-256": {githubSign(body)}, "X-GitHub-Delivery": {delivery}}
	}
	first, status, err := f.c.Hook(ctx, "github", []byte(body), hdr("r1"))
	if err != nil || status != http.StatusAccepted || !first.New {
		t.Fatalf("the first delivery: %d %+v %v", status, first, err)
	}
	f.waitState(first.RunID, "succeeded")
	again, status, err := f.c.Hook(ctx, "github", []byte(body), hdr("r2"))
	if err != nil || status != http.StatusOK || !again.Duplicate || again.RunID != first.RunID {
		t.Fatalf("the same signed body under a new delivery id: %d %+v %v; want a duplicate of %s", status, again, err, first.RunID)
	}
	if n := runCount(t, f); n != 1 {
		t.Fatalf("the replay started a run: %d runs", n)
	}

	// Stripe's signature covers its time: the same header again, within
	// the tolerance, is a replay too (the hook takes no delivery id).
	sb := `{"name":"stripe-replayed"}`
	sh := http.Header{"Stripe-Signature": {stripeSign(sb, time.Now())}}
	if _, status, err := f.c.Hook(ctx, "stripe", []byte(sb), sh); err != nil || status != http.StatusAccepted {
		t.Fatalf("stripe: %d %v", status, err)
	}
	if res, status, err := f.c.Hook(ctx, "stripe", []byte(sb), sh); err != nil || status != http.StatusOK || !res.Duplicate {
		t.Fatalf("a stripe request sent twice: %d %+v %v; want a duplicate", status, res, err)
	}
	if n := runCount(t, f); n != 2 {
		t.Fatalf("%d runs after one github and one stripe delivery, each replayed; want 2", n)
	}

	// A signal hook: the replayed signature is recorded with the signal.
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "rp1", Input: []byte(`{"request":"r"}`)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("rp1", "waiting")
	sig := `{"run":"rp1","approved":true,"by":"gh"}`
	sigHdr := func(delivery string) http.Header {
		return http.Header{"X-Hub-Signature-256": {githubSign(sig)}, "X-GitHub-Delivery": {delivery}}
	}
	if res, status, err := f.c.Hook(ctx, "gh-approve", []byte(sig), sigHdr("s1")); err != nil || status != http.StatusAccepted || res.Delivered != "now" {
		t.Fatalf("signal hook: %d %+v %v", status, res, err)
	}
	f.waitState("rp1", "succeeded")
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "rp1b", Input: []byte(`{"request":"r"}`)}); err != nil {
		t.Fatal(err)
	}
	res, status, err := f.c.Hook(ctx, "gh-approve", []byte(sig), sigHdr("s2"))
	if err != nil || status != http.StatusOK || !res.Duplicate {
		t.Fatalf("the signal hook's signed body under a new delivery id: %d %+v %v; want a duplicate", status, res, err)
	}
	if sigs, _ := f.rt.Inspector().ListSignals(ctx, signal.ListOptions{}); len(sigs) != 0 {
		t.Fatalf("the replay buffered a signal: %v", sigs)
	}
}

// postForm posts body to hook name with a GitHub signature of sig (the
// raw body's unless sig is set) as GitHub's form content type.
func postForm(t *testing.T, f *fixture, name, body, sig, delivery string) (int, string) {
	t.Helper()
	if sig == "" {
		sig = githubSign(body)
	}
	req, err := http.NewRequestWithContext(f.ctx, http.MethodPost, f.hs.URL+"/v1/hooks/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Hub-Signature-256", sig)
	req.Header.Set("X-GitHub-Delivery", delivery)
	resp, err := f.raw().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestGitHubFormEncodedHook: GitHub's application/x-www-form-urlencoded
// content type carries the JSON in a payload field, and the signature
// covers the raw body: accepted with a valid signature, refused with a
// bad one, and a form without its payload is a 400.
func TestGitHubFormEncodedHook(t *testing.T) {
	f := hookFixture(t)
	body := "payload=" + url.QueryEscape(`{"name":"form"}`)
	if status, b := postForm(t, f, "github", body, "sha256="+strings.Repeat("cd", 32), "f0"); status != http.StatusUnauthorized {
		t.Fatalf("a form body with a bad signature: %d %s, want 401", status, b)
	}
	// A signature of the payload alone is not one of the body.
	if status, b := postForm(t, f, "github", body, githubSign(`{"name":"form"}`), "f0"); status != http.StatusUnauthorized {
		t.Fatalf("a signature of the payload, not the raw body: %d %s, want 401", status, b)
	}
	if n := runCount(t, f); n != 0 {
		t.Fatalf("refused form deliveries wrote %d runs", n)
	}
	status, b := postForm(t, f, "github", body, "", "f1")
	if status != http.StatusAccepted {
		t.Fatalf("a signed form body: %d %s, want 202", status, b)
	}
	runID := strings.Split(strings.Split(b, `"run_id":"`)[1], `"`)[0]
	if run := f.waitState(runID, "succeeded"); string(run.Result) != `"hello form"` {
		t.Fatalf("the run did not get the form's payload as input: %s", run.Result)
	}
	if status, b := postForm(t, f, "github", "other=1", "", "f2"); status != http.StatusBadRequest || !strings.Contains(b, "payload") {
		t.Fatalf("a signed form without payload: %d %s, want 400 naming payload", status, b)
	}
}

// rawHookRequest writes head (and then body) to the server on a socket
// of its own, closes the writing half, and returns the status line.
func rawHookRequest(t *testing.T, f *fixture, head, body string) string {
	t.Helper()
	conn, err := net.Dial("tcp", f.hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(deadline)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, head+body); err != nil {
		t.Fatal(err)
	}
	// The client goes away mid-body: nothing more will come.
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to a request cut short: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestHookBodyCutShortIsNotTooLarge: a body shorter than its
// Content-Length (the client closed mid-body) is answered 400, not 413:
// only a body over the hook's limit is too large.
func TestHookBodyCutShortIsNotTooLarge(t *testing.T) {
	f := hookFixture(t)
	body := `{"name":"cut`
	head := fmt.Sprintf("POST /v1/hooks/github HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\nX-Hub-Signature-256: %s\r\nX-GitHub-Delivery: cut1\r\n\r\n",
		f.hs.Listener.Addr(), githubSign(body))
	if line := rawHookRequest(t, f, head, body); !strings.Contains(line, " 400 ") {
		t.Fatalf("a body cut short answered %q, want 400", line)
	}
	if n := runCount(t, f); n != 0 {
		t.Fatalf("a body cut short wrote %d runs", n)
	}
}

// TestHookBodyLimit: a hook's max_body is its limit (64 bytes for the
// fixture's small hook); the file's max_body and the loader's default
// apply to hooks that set none.
func TestHookBodyLimit(t *testing.T) {
	f := hookFixture(t)
	ctx := f.ctx
	fits := `{"name":"` + strings.Repeat("a", 40) + `"}`
	over := `{"name":"` + strings.Repeat("a", 60) + `"}`
	sign := func(b string) http.Header { return http.Header{"X-Hub-Signature-256": {githubSign(b)}} }
	if _, status, err := f.c.Hook(ctx, "small", []byte(fits), sign(fits)); err != nil || status != http.StatusAccepted {
		t.Fatalf("%d bytes to a hook of max_body 64: %d %v", len(fits), status, err)
	}
	if _, status, _ := f.c.Hook(ctx, "small", []byte(over), sign(over)); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d bytes to a hook of max_body 64: %d, want 413", len(over), status)
	}
	if _, status, err := f.c.Hook(ctx, "github", []byte(over), http.Header{"X-Hub-Signature-256": {githubSign(over)}, "X-GitHub-Delivery": {"big1"}}); err != nil || status != http.StatusAccepted {
		t.Fatalf("%d bytes to a hook of the default limit: %d %v", len(over), status, err)
	}

	dir := t.TempDir()
	p := filepath.Join(dir, "h.yaml")
	doc := "max_body: 2048\nhooks:\n  - {name: a, workflow: greet.yaml, bearer: {secret_env: S}}\n  - {name: b, workflow: greet.yaml, bearer: {secret_env: S}, max_body: 10}\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(string) string { return "a-secret-long-enough" }
	hooks, err := server.LoadHooksWith(p, env, server.HookDefaults{MaxBody: 4096})
	if err != nil || hooks[0].MaxBody != 2048 || hooks[1].MaxBody != 10 {
		t.Fatalf("file and hook limits: %+v %v", hooks, err)
	}
	if err := os.WriteFile(p, []byte("hooks: [{name: a, workflow: greet.yaml, bearer: {secret_env: S}}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if hooks, err := server.LoadHooksWith(p, env, server.HookDefaults{MaxBody: 4096}); err != nil || hooks[0].MaxBody != 4096 {
		t.Fatalf("the loader's default: %+v %v", hooks, err)
	}
	if hooks, err := server.LoadHooks(p, env); err != nil || hooks[0].MaxBody != server.DefaultHookMaxBody {
		t.Fatalf("no limit set: %+v %v", hooks, err)
	}
}
