package server_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

const (
	githubSecret = "github-hook-secret-0123456789"
	stripeSecret = "stripe-hook-secret-0123456789"
	bearerSecret = "bearer-hook-token-0123456789"
)

const hooksYAML = `hooks:
  - name: github
    workflow: greet.yaml
    hmac: {secret_env: GH_SECRET, header: X-Hub-Signature-256}
    delivery_header: X-GitHub-Delivery
  - name: stripe
    workflow: greet.yaml
    hmac: {secret_env: STRIPE_SECRET, header: Stripe-Signature, format: stripe}
  - name: approve
    signal: "approve:{body.run}"
    bearer: {secret_file: %s}
    delivery_header: Idempotency-Key
  - name: gh-approve
    signal: "approve:{body.run}"
    hmac: {secret_env: GH_SECRET, header: X-Hub-Signature-256}
    delivery_header: X-GitHub-Delivery
  - name: small
    workflow: greet.yaml
    hmac: {secret_env: GH_SECRET, header: X-Hub-Signature-256}
    max_body: 64
`

func hookFixture(t *testing.T) *fixture {
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
	// The API token guards the API, not the hooks: they carry their own.
	return newFixture(t, func(c *server.Config) { c.Hooks, c.Token = hooks, apiToken })
}

func githubSign(body string) string {
	m := hmac.New(sha256.New, []byte(githubSecret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func stripeSign(body string, t time.Time) string {
	ts := fmt.Sprint(t.Unix())
	m := hmac.New(sha256.New, []byte(stripeSecret))
	m.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

func runCount(t *testing.T, f *fixture) int {
	runs, err := f.rt.Inspector().ListRuns(f.ctx, runstate.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

// TestWorkflowHooks: a good GitHub signature starts a run with the body
// as input; a bad one is 401 and writes nothing; a replayed delivery id
// is a duplicate that writes nothing; Stripe's format and its timestamp
// tolerance.
func TestWorkflowHooks(t *testing.T) {
	f := hookFixture(t)
	ctx := f.ctx
	body := `{"name":"octocat"}`
	hdr := func(sig, delivery string) http.Header {
		h := http.Header{}
		h.Set("X-Hub-Signature-256", sig)
		h.Set("X-GitHub-Delivery", delivery)
		return h
	}
	for name, h := range map[string]http.Header{
		"wrong secret":   hdr("sha256="+strings.Repeat("ab", 32), "d0"),
		"no signature":   hdr("", "d0"),
		"not hex":        hdr("sha256=zz", "d0"),
		"other body":     hdr(githubSign(`{"name":"mallory"}`), "d0"),
		"api token only": {"Authorization": {"Bearer " + apiToken}},
	} {
		_, status, err := f.c.Hook(ctx, "github", []byte(body), h)
		if status != http.StatusUnauthorized || !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: %d %v, want 401", name, status, err)
		}
	}
	if n := runCount(t, f); n != 0 {
		t.Fatalf("refused deliveries wrote %d runs", n)
	}
	res, status, err := f.c.Hook(ctx, "github", []byte(body), hdr(githubSign(body), "d1"))
	if err != nil || status != http.StatusAccepted || !res.New || res.RunID == "" {
		t.Fatalf("a good delivery: %d %+v %v", status, res, err)
	}
	run := f.waitState(res.RunID, "succeeded")
	if string(run.Result) != `"hello octocat"` {
		t.Fatalf("the run did not get the body as input: %s", run.Result)
	}
	for i := 0; i < 2; i++ {
		again, status, err := f.c.Hook(ctx, "github", []byte(body), hdr(githubSign(body), "d1"))
		if err != nil || status != http.StatusOK || !again.Duplicate || again.RunID != res.RunID {
			t.Fatalf("replay %d: %d %+v %v, want a duplicate of %s", i, status, again, err, res.RunID)
		}
	}
	if n := runCount(t, f); n != 1 {
		t.Fatalf("replays wrote runs: %d runs", n)
	}
	if _, status, _ := f.c.Hook(ctx, "github", []byte(body), http.Header{"X-Hub-Signature-256": {githubSign(body)}}); status != http.StatusBadRequest {
		t.Fatalf("no delivery id: %d, want 400", status)
	}

	now := time.Now()
	if _, status, err := f.c.Hook(ctx, "stripe", []byte(body), http.Header{"Stripe-Signature": {stripeSign(body, now)}}); err != nil || status != http.StatusAccepted {
		t.Fatalf("stripe: %d %v", status, err)
	}
	if _, status, _ := f.c.Hook(ctx, "stripe", []byte(body), http.Header{"Stripe-Signature": {stripeSign(body, now.Add(-time.Hour))}}); status != http.StatusUnauthorized {
		t.Fatalf("a stripe signature an hour old: %d, want 401", status)
	}
	if _, status, _ := f.c.Hook(ctx, "nope", []byte(body), nil); status != http.StatusNotFound {
		t.Fatalf("an unknown hook: %d", status)
	}
}

// TestSignalHook: a bearer hook delivers its body as a signal on the key
// its template renders, exactly once per delivery id.
func TestSignalHook(t *testing.T) {
	f := hookFixture(t)
	ctx := f.ctx
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "h1", Input: []byte(`{"request":"r"}`)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("h1", "waiting")
	body := []byte(`{"run":"h1","approved":true,"by":"hook"}`)
	auth := func(tok, key string) http.Header {
		return http.Header{"Authorization": {"Bearer " + tok}, "Idempotency-Key": {key}}
	}
	if _, status, _ := f.c.Hook(ctx, "approve", body, auth("wrong-token-0123456789", "k1")); status != http.StatusUnauthorized {
		t.Fatalf("a wrong bearer token: %d", status)
	}
	if sigs, _ := f.rt.Inspector().ListSignals(ctx, signal.ListOptions{}); len(sigs) != 0 || f.waitState("h1", "waiting").State != "waiting" {
		t.Fatalf("a refused hook signalled: %v", sigs)
	}
	res, status, err := f.c.Hook(ctx, "approve", body, auth(bearerSecret, "k1"))
	if err != nil || status != http.StatusAccepted || res.Delivered != "now" {
		t.Fatalf("signal hook: %d %+v %v", status, res, err)
	}
	run := f.waitState("h1", "succeeded")
	if string(run.Result) != `{"approved_by":"hook","request":"r"}` {
		t.Fatalf("result %s", run.Result)
	}
	res, status, err = f.c.Hook(ctx, "approve", body, auth(bearerSecret, "k1"))
	if err != nil || status != http.StatusOK || !res.Duplicate {
		t.Fatalf("a replayed delivery: %d %+v %v, want a duplicate", status, res, err)
	}
	if sigs, _ := f.rt.Inspector().ListSignals(ctx, signal.ListOptions{}); len(sigs) != 0 {
		t.Fatalf("the replay buffered a signal: %v", sigs)
	}
	if _, status, _ := f.c.Hook(ctx, "approve", []byte(`{"approved":true}`), auth(bearerSecret, "k2")); status != http.StatusBadRequest {
		t.Fatalf("a body without the key's field: %d, want 400", status)
	}
	if n, err := f.srv.SweepHookMarkers(ctx); err != nil || n != 0 {
		t.Fatalf("sweeping fresh delivery ids: %d %v", n, err)
	}
}

// TestLoadHooksRefuses bad hook files.
func TestLoadHooksRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"no credential": "hooks: [{name: a, workflow: greet.yaml}]",
		"both targets":  "hooks: [{name: a, workflow: greet.yaml, signal: k, bearer: {secret_env: S}}]",
		"unset secret":  "hooks: [{name: a, workflow: greet.yaml, bearer: {secret_env: UNSET}}]",
		"short secret":  "hooks: [{name: a, workflow: greet.yaml, bearer: {secret_env: SHORT}}]",
		"bad name":      "hooks: [{name: A/b, workflow: greet.yaml, bearer: {secret_env: S}}]",
		"unknown field": "hooks: [{name: a, workflow: greet.yaml, bearer: {secret_env: S}, secret: x}]",
		"bad format":    "hooks: [{name: a, workflow: greet.yaml, hmac: {secret_env: S, header: X, format: md5}}]",
		"bad template":  "hooks: [{name: a, signal: 'k:{bodyx}', bearer: {secret_env: S}}]",
		"negative body": "hooks: [{name: a, workflow: greet.yaml, bearer: {secret_env: S}, max_body: -1}]",
		"huge body":     "max_body: 1073741824\nhooks: [{name: a, workflow: greet.yaml, bearer: {secret_env: S}}]",
	} {
		p := filepath.Join(dir, "h.yaml")
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"S": "a-secret-long-enough", "SHORT": "x"}
		if _, err := server.LoadHooks(p, func(k string) string { return env[k] }); !errors.Is(err, server.ErrHooks) {
			t.Errorf("%s: %v, want ErrHooks", name, err)
		}
	}
}
