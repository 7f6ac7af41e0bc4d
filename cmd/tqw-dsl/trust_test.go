package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// trustSecret and trustServerVar are variables of serve's environment:
// the first one the operator allows with --secret, the second not.
const (
	trustSecret    = "TRUST_TEST_ALLOWED"
	trustSecretVal = "allowed-secret-value-0123"
	trustServerVar = "TRUST_TEST_SERVER_VAR"
	trustServerVal = "server-only-value-0123"
)

// trustFixture is a serve whose workflows folder holds a child workflow,
// a symlink to a workflow outside the folder and a FIFO, and a test HTTP
// server that records every body it receives.
type trustFixture struct {
	c        *cli
	dir      string // the workflows folder
	sink     *httptest.Server
	received func() []string
}

func newTrustFixture(t *testing.T) *trustFixture {
	t.Helper()
	c := newCLI(t)
	c.env = append(c.env, apiTokenEnv+"="+serveToken, trustSecret+"="+trustSecretVal, trustServerVar+"="+trustServerVal)
	f := &trustFixture{c: c, dir: filepath.Join(c.dir, "wf")}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	child := "tqw: v1\nname: child\nsteps:\n  - id: done\n    succeed: {ok: true}\n"
	for path, src := range map[string]string{
		filepath.Join(f.dir, "child.yaml"):   child,
		filepath.Join(c.dir, "outside.yaml"): strings.Replace(child, "child", "outside", 1),
	} {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(c.dir, "outside.yaml"), filepath.Join(f.dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(f.dir, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var bodies []string
	f.sink = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(f.sink.Close)
	f.received = func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bodies...)
	}
	return f
}

// trustPost sends body to addr+path with the token and returns the
// status and the JSON error's code and message (if any).
func trustPost(t *testing.T, addr, path string, body any) (int, string, string) {
	t.Helper()
	code, errCode, msg, err := postJSON(addr, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, errCode, msg
}

// postJSON is trustPost for any goroutine.
func postJSON(addr, path string, body any) (int, string, string, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", addr+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+serveToken)
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Timeout: waitDeadline}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", "", fmt.Errorf("POST %s: %w (not answered)", path, err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code, Message string }
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Message, nil
}

// callWorkflow is an inline workflow whose one step calls path.
func callWorkflow(path string) string {
	return fmt.Sprintf("tqw: v1\nname: caller\nsteps:\n  - id: c\n    call:\n      workflow: %q\n", path)
}

// sendWorkflow is an inline workflow that declares secret name and posts
// it to url.
func sendWorkflow(name, url string) string {
	return fmt.Sprintf("tqw: v1\nname: send\nsecrets: [%s]\nsteps:\n  - id: send\n    action: http\n    with:\n      method: POST\n      url: %q\n      body: \"${ secrets.%s }\"\n", name, url, name)
}

// TestServeRefusesInlineByDefault: without --allow-inline, POST /v1/runs
// with yaml is refused (403 inline_disabled) and starts nothing, by name
// works, and 'tqw-dsl submit FILE' (which sends the file's text) falls
// back to the store's inbox. A run submitted that way, whose workflow
// declares a variable of serve's environment the operator did not allow,
// reads it as unset: its http step never sends it.
func TestServeRefusesInlineByDefault(t *testing.T) {
	t.Parallel()
	f := newTrustFixture(t)
	_, addr := startServe(t, f.c, "--inbox-poll", "200ms")
	code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": callWorkflow("child.yaml"), "run_id": "inline1"})
	if code != http.StatusForbidden || errCode != "inline_disabled" || !strings.Contains(msg, "--allow-inline") {
		t.Fatalf("inline without --allow-inline: %d %s %s", code, errCode, msg)
	}
	if code, _, _ := f.c.run("status", "inline1"); code == exitOK {
		t.Fatal("the refused inline run exists")
	}
	if code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"workflow": "child.yaml", "run_id": "named1"}); code != http.StatusCreated {
		t.Fatalf("by name: %d %s %s", code, errCode, msg)
	}
	wf := filepath.Join(f.c.dir, "send.yaml")
	if err := os.WriteFile(wf, []byte(sendWorkflow(trustServerVar, f.sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := f.c.run("submit", wf, "--run-id", "inbox1"); code != exitOK || strings.TrimSpace(out) != "inbox1" {
		t.Fatalf("submit through the inbox: %d %q %s", code, out, errOut)
	}
	var st runJSON
	pollUntil(t, "inbox1 ended", func() bool {
		code, out, _ := f.c.run("status", "inbox1", "--json")
		return code == exitOK && json.Unmarshal([]byte(out), &st) == nil && (st.State == "failed" || st.State == "succeeded")
	})
	if st.State != "failed" || !strings.Contains(st.Error, trustServerVar+" is not set") {
		t.Fatalf("a run reading a secret serve does not allow: %+v", st)
	}
	for _, b := range f.received() {
		if strings.Contains(b, trustServerVal) {
			t.Fatalf("the test server received serve's variable: %q", b)
		}
	}
}

// TestServeConfinesInlineWorkflows: with --allow-inline, an inline
// workflow calls only files of the workflows folder (an absolute path, a
// .. out and a symlink out are refused with the message of a missing
// file), reads only the secrets the operator allowed (--secret, or
// declared by a file of the folder, also one added while serve runs),
// and a FIFO it calls is answered at once with a clear error, without
// growing serve's threads.
func TestServeConfinesInlineWorkflows(t *testing.T) {
	t.Parallel()
	f := newTrustFixture(t)
	p, addr := startServe(t, f.c, "--allow-inline", "--secret", trustSecret)

	if code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": callWorkflow("child.yaml")}); code != http.StatusCreated {
		t.Fatalf("calling a file of the folder: %d %s %s", code, errCode, msg)
	}
	// The message of a missing file, with the path as written replaced.
	_, _, missing := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": callWorkflow("missing.yaml")})
	want := strings.ReplaceAll(missing, "missing.yaml", "PATH")
	if !strings.Contains(missing, "no such workflow file in the workflows folder") {
		t.Fatalf("a missing file: %s", missing)
	}
	for _, path := range []string{"/etc/hostname", "../outside.yaml", "link.yaml", filepath.Join(f.c.dir, "outside.yaml")} {
		code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": callWorkflow(path)})
		if code != http.StatusUnprocessableEntity || errCode != "invalid_workflow" || strings.ReplaceAll(msg, path, "PATH") != want {
			t.Errorf("call %s: %d %s %q; want 422 %q", path, code, errCode, msg, want)
		}
	}

	// Secrets: the server's own token and a variable of its environment
	// are refused, with the message of an unset variable.
	_, _, unset := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": sendWorkflow("TRUST_TEST_UNSET", f.sink.URL)})
	wantSecret := strings.ReplaceAll(unset, "TRUST_TEST_UNSET", "NAME")
	if !strings.Contains(unset, "--secret") {
		t.Fatalf("an unset secret: %s", unset)
	}
	for _, name := range []string{apiTokenEnv, trustServerVar} {
		code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": sendWorkflow(name, f.sink.URL)})
		if code != http.StatusForbidden || errCode != "secret_not_allowed" || strings.ReplaceAll(msg, name, "NAME") != wantSecret {
			t.Errorf("secret %s: %d %s %q; want 403 %q", name, code, errCode, msg, wantSecret)
		}
	}
	if code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": sendWorkflow(trustSecret, f.sink.URL), "run_id": "allowed1"}); code != http.StatusCreated {
		t.Fatalf("a --secret secret: %d %s %s", code, errCode, msg)
	}
	var st runJSON
	pollUntil(t, "allowed1 ended", func() bool {
		code, out, _ := f.c.run("status", "allowed1", "--json")
		return code == exitOK && json.Unmarshal([]byte(out), &st) == nil && (st.State == "failed" || st.State == "succeeded")
	})
	if st.State != "succeeded" {
		t.Fatalf("allowed1: %+v", st)
	}
	got := f.received()
	if len(got) != 1 || got[0] != trustSecretVal {
		t.Fatalf("the test server received %q; want only the allowed secret", got)
	}
	// A secret a file of the folder declares, added while serve runs.
	late := "tqw: v1\nname: late\nsecrets: [TRUST_TEST_LATE]\nsteps:\n  - id: done\n    succeed: {}\n"
	if err := os.WriteFile(filepath.Join(f.dir, "late.yaml"), []byte(late), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, errCode, msg := trustPost(t, addr, "/v1/runs", map[string]any{"yaml": strings.Replace(late, "name: late", "name: uses-late", 1)}); code != http.StatusCreated {
		t.Fatalf("a secret a file of the folder declares: %d %s %s", code, errCode, msg)
	}

	// A FIFO: answered, with a clear error, and threads stay bounded.
	before := threads(t, p.cmd.Process.Pid)
	const requests, parallel = 200, 16
	var wg sync.WaitGroup
	var bad atomic.Value
	next := atomic.Int32{}
	for range parallel {
		wg.Go(func() {
			for next.Add(1) <= requests {
				code, _, msg, err := postJSON(addr, "/v1/runs", map[string]any{"yaml": callWorkflow("fifo.yaml")})
				if err != nil {
					bad.Store(err.Error())
				} else if code != http.StatusUnprocessableEntity || !strings.Contains(msg, "fifo.yaml") || !strings.Contains(msg, "not a regular file (a FIFO)") {
					bad.Store(fmt.Sprintf("%d %s", code, msg))
				}
			}
		})
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatalf("a FIFO call: %v", b)
	}
	after := threads(t, p.cmd.Process.Pid)
	// Bounded, not exact: the Go runtime may start a few threads, never
	// one per request.
	if after > before+parallel*2 {
		t.Fatalf("serve's threads went from %d to %d over %d FIFO calls", before, after, requests)
	}
	t.Logf("threads %d -> %d over %d FIFO calls", before, after, requests)
}

// threads reads the Threads line of /proc/PID/status.
func threads(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no Threads in /proc/%d/status", pid)
	return 0
}
