package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

const serveToken = "serve-test-token-0123456789"

// startServe starts serve on a free loopback port with the repository's
// approval workflow in its folder and an inbox poll of an hour, so a
// command that reached it through the inbox would not be answered within
// the test: only HTTP can. It returns the process and its address.
func startServe(t *testing.T, c *cli, extra ...string) (*bg, string) {
	t.Helper()
	wfDir := filepath.Join(c.dir, "wf")
	if err := os.MkdirAll(wfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("../../workflows/approval.tqw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wfDir, "approval.tqw.yaml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	p := c.start(append([]string{"serve", "--addr", "127.0.0.1:0", "--workflows", wfDir, "--inbox-poll", "1h"}, extra...)...)
	// Its own address, not a former writer's that a takeover line names.
	p.waitLine("(stop with Ctrl-C)")
	m := regexp.MustCompile(`serving (http://[0-9.:]+) \(stop with Ctrl-C\)`).FindStringSubmatch(p.stderr())
	if m == nil {
		t.Fatalf("no address in %s", p.stderr())
	}
	return p, m[1]
}

// TestServeCommandsOverHTTP: submit, status, list, signal, history and
// cancel reach a serving writer over HTTP (its inbox is polled hourly, so
// the inbox could not have answered), validate as before, and say what
// to do with a wrong token; serve advertises its address in the lease
// and stops cleanly on SIGTERM.
func TestServeCommandsOverHTTP(t *testing.T) {
	t.Parallel()
	testServeCommandsOverHTTP(t, newCLI(t))
}

// TestServeCommandsOverHTTPS3 is TestServeCommandsOverHTTP on the test
// S3 server, whose lease is an object rather than a file lock.
func TestServeCommandsOverHTTPS3(t *testing.T) {
	t.Parallel()
	c, store := newS3CLI(t)
	c.open = func() (objstore.Store, error) { return store, nil }
	testServeCommandsOverHTTP(t, c)
}

func testServeCommandsOverHTTP(t *testing.T, c *cli) {
	c.env = append(c.env, apiTokenEnv+"="+serveToken)
	wf := filepath.Join(c.dir, "wf", "approval.tqw.yaml")
	p, addr := startServe(t, c, "--allow-inline") // submit sends the file inline

	info, live, err := lease.Live(t.Context(), c.openStore(), lease.Options{})
	if err != nil || !live || info.Endpoint != addr {
		t.Fatalf("lease: %+v live=%v %v, want endpoint %s", info, live, err, addr)
	}
	if code, out, errOut := c.run("submit", wf, "--input", `{"request":"disk"}`, "--run-id", "h1"); code != exitOK || strings.TrimSpace(out) != "h1" {
		t.Fatalf("submit: %d %q %s", code, out, errOut)
	}
	if code, _, errOut := c.run("submit", wf, "--input", `{"request":7}`); code != exitUsage || !strings.Contains(errOut, "input") {
		t.Fatalf("submit with a bad input: %d %s", code, errOut)
	}
	var st runJSON
	pollUntil(t, "h1 waiting", func() bool {
		code, out, _ := c.run("status", "h1", "--json")
		return code == exitOK && json.Unmarshal([]byte(out), &st) == nil && st.State == "waiting"
	})
	if st.SignalKey != "approve:h1" || st.Workflow != "approval" || st.Totals == nil {
		t.Fatalf("status over HTTP: %+v", st)
	}
	if code, out, _ := c.run("list"); code != exitOK || !strings.Contains(out, "h1") || !strings.Contains(out, "signal approve:h1") {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, _, errOut := c.run("signal", "approve:h1", `{"approved":"yes"}`); code != exitUsage || !strings.Contains(errOut, "boolean") {
		t.Fatalf("a payload the schema refuses: %d %s", code, errOut)
	}
	bad := c.with(apiTokenEnv + "=wrong-token-0123456789")
	if code, _, errOut := bad.run("signal", "approve:h1", `{"approved":true}`); code != exitFailed || !strings.Contains(errOut, apiTokenEnv) {
		t.Fatalf("a wrong token: %d %s", code, errOut)
	}
	if code, out, errOut := c.run("signal", "approve:h1", `{"approved":true,"by":"bo"}`); code != exitOK || !strings.Contains(out, "delivered") {
		t.Fatalf("signal: %d %s %s", code, out, errOut)
	}
	pollUntil(t, "h1 succeeded", func() bool {
		code, out, _ := c.run("status", "h1", "--json")
		return code == exitOK && json.Unmarshal([]byte(out), &st) == nil && st.State == "succeeded"
	})
	if code, out, _ := c.run("history", "h1"); code != exitOK || !strings.Contains(out, "approved") || !strings.Contains(out, `"by":"bo"`) {
		t.Fatalf("history: %d %s", code, out)
	}
	// /metrics needs no token and counts the run: its start, its end and
	// the store requests.
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tqw_runs_finished_total{outcome="succeeded",workflow="approval"} 1`, "tqw_objstore_requests_total", "tqw_step_duration_seconds_bucket"} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET /metrics: %d, lacks %s:\n%s", resp.StatusCode, want, body)
		}
	}
	if code, _, errOut := c.run("cancel", "h1"); code != exitFailed || !strings.Contains(errOut, "already ended") {
		t.Fatalf("cancel a finished run: %d %s", code, errOut)
	}
	if code, _, _ := c.run("submit", wf, "--input", `{"request":"x"}`, "--run-id", "h2"); code != exitOK {
		t.Fatal("submit h2")
	}
	if code, out, errOut := c.run("cancel", "h2"); code != exitOK || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: %d %s %s", code, out, errOut)
	}
	// list's filters and cursor go through the API's label index too.
	if code, out, errOut := c.run("list", "--workflow", "approval", "--after", "h1"); code != exitOK || !strings.Contains(out, "h2") || strings.Contains(out, "h1") {
		t.Fatalf("list --workflow approval --after h1: %d %s %s", code, out, errOut)
	}
	// A wrong token: the API refuses it, so list reads the store, which
	// anyone who can read it may (issue 23).
	if code, out, errOut := bad.run("list", "--workflow", "approval"); code != exitOK || !strings.Contains(out, "h2") || strings.Contains(errOut, "refused the API token") {
		t.Fatalf("list --workflow with a wrong token (the API refuses it, so from the store): %d %s %s", code, out, errOut)
	}
	if code, out, errOut := c.run("list", "--label", "workflow=nothing-by-this-name"); code != exitOK || strings.Contains(out, "h1") || strings.Contains(out, "h2") {
		t.Fatalf("list --label workflow=nothing-by-this-name: %d %s %s", code, out, errOut)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := p.wait(); code != exitOK || !strings.Contains(errOut, "stopped; every finished step is durable") {
		t.Fatalf("serve after SIGTERM: %d %s", code, errOut)
	}
	// With no writer, the commands read and write the store as before.
	if code, out, _ := c.run("status", "h2", "--json"); code != exitOK || !strings.Contains(out, `"cancelled"`) {
		t.Fatalf("status from the store: %d %s", code, out)
	}
}

// TestServeRefusesNonLoopbackWithoutToken: nothing listens, exit 2.
func TestServeRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	code, _, errOut := c.run("serve", "--addr", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "loopback") || !strings.Contains(errOut, apiTokenEnv) {
		t.Fatalf("%d %s", code, errOut)
	}
	tok := filepath.Join(c.dir, "tok")
	if err := os.WriteFile(tok, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := c.run("serve", "--addr", "0.0.0.0:0", "--token-file", tok); code != exitUsage || !strings.Contains(errOut, "at least 16") {
		t.Fatalf("a short token: %d %s", code, errOut)
	}
}
