package server_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/client"
)

const apiToken = "test-token-0123456789abcdef"

// TestAuth: with a token, the API refuses no token and a wrong one (401
// JSON, nothing written) and serves the right one; probes stay open.
func TestAuth(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Token = apiToken })
	ctx := f.ctx
	for name, c := range map[string]*client.Client{"no token": f.client(""), "wrong token": f.client("wrong-token-0123456789abcdef"), "prefix": f.client(apiToken[:10])} {
		if _, err := c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: "a1"}); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: submit: %v, want 401", name, err)
		}
		if _, err := c.ListRuns(ctx, client.ListOptions{}); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: list: %v, want 401", name, err)
		}
		if _, err := c.OpenAPI(ctx); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: openapi: %v, want 401", name, err)
		}
		if _, err := c.Events(ctx); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("%s: events: %v, want 401", name, err)
		}
		if err := c.Healthz(ctx); err != nil {
			t.Errorf("%s: healthz: %v", name, err)
		}
		if err := c.Readyz(ctx); err != nil {
			t.Errorf("%s: readyz: %v", name, err)
		}
	}
	if _, err := f.c.Run(ctx, "a1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an unauthorized submission wrote a run: %v", err)
	}
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: "a1"}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	// A "Basic" or bare token is not a bearer token.
	for _, h := range []string{"Basic " + apiToken, apiToken, "bearer"} {
		req, _ := http.NewRequest(http.MethodGet, f.hs.URL+"/v1/runs", nil)
		req.Header.Set("Authorization", h)
		resp, err := f.raw().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: %d, want 401 with WWW-Authenticate", h, resp.StatusCode)
		}
	}
}

// TestNoCORS: the server answers no cross-origin request with CORS
// headers, so browsers keep other sites from reading it.
func TestNoCORS(t *testing.T) {
	f := newFixture(t)
	req, _ := http.NewRequest(http.MethodGet, f.hs.URL+"/v1/runs", nil)
	req.Header.Set("Origin", "https://evil.example")
	resp, err := f.raw().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Fatalf("Access-Control-Allow-Origin: %q", v)
	}
}

// TestCheckListenAddr refuses non-loopback addresses without a token.
func TestCheckListenAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7700": true, "localhost:0": true, "[::1]:80": true, "127.1.2.3:9": true,
		":7700": false, "0.0.0.0:7700": false, "192.168.1.5:80": false, "[::]:80": false, "example.com:80": false,
	} {
		err := server.CheckListenAddr(addr, false)
		if ok != (err == nil) {
			t.Errorf("%s without a token: %v", addr, err)
		}
		if !ok && !errors.Is(err, server.ErrNotLoopback) {
			t.Errorf("%s: %v does not match ErrNotLoopback", addr, err)
		}
		if err := server.CheckListenAddr(addr, true); err != nil {
			t.Errorf("%s with a token: %v", addr, err)
		}
	}
}
