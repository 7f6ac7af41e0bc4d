package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/tqwdslbin"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/s3/s3test"
	"github.com/tqw-dsl/tqw/server/client"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// tqwBinary builds tqw-dsl once per test binary.
func tqwBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tqw-server-test-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin, buildErr = tqwdslbin.Path(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// serveProcess starts a real 'tqw-dsl serve' on store with the test
// workflows and a token, and returns a checking client of it; cleanup
// stops it with SIGTERM and requires a clean exit.
func serveProcess(t *testing.T, store string, env ...string) *client.Client {
	t.Helper()
	const token = "process-test-token-0123456789"
	base := startServeProcess(t, token, store, nil, env...)
	return client.New(base, client.Options{Token: token, HTTPClient: &http.Client{Transport: &checkingTransport{t: t, conf: sharedConformance(t)}}})
}

// startServeProcess starts a real 'tqw-dsl serve' on store with the test
// workflows, token ("" for none) and the extra serve flags args, and
// returns its base URL; cleanup stops it with SIGTERM and requires a
// clean exit.
func startServeProcess(t *testing.T, token, store string, args []string, env ...string) string {
	t.Helper()
	wfDir, err := filepath.Abs("testdata/workflows")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tqwBinary(t), append([]string{"serve", "--addr", "127.0.0.1:0", "--store", store, "--workflows", wfDir}, args...)...)
	cmd.Env = append(append(os.Environ(), "TQW_STORE=", "TQW_API_TOKEN="+token, "SERVER_TEST_SECRET="+testSecret), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	var log strings.Builder
	addr := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		own := regexp.MustCompile(`serving (http://[0-9.:]+) \(stop with Ctrl-C\)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := own.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	logs := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return log.String()
	}
	var base string
	select {
	case base = <-addr:
	case err := <-exited:
		t.Fatalf("serve exited before serving: %v\n%s", err, logs())
	case <-time.After(deadline):
		t.Fatalf("serve printed no address within %v:\n%s", deadline, logs())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve after SIGTERM: %v\n%s", err, logs())
			}
		case <-time.After(deadline):
			_ = cmd.Process.Kill()
			t.Errorf("serve did not stop within %v of SIGTERM:\n%s", deadline, logs())
		}
	})
	return base
}

// TestAPIOfServeProcess calls the API of a real serve process on the
// file store and on the local S3 server; every answer is checked against
// openapi.json.
func TestAPIOfServeProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts tqw-dsl; skipped with -short")
	}
	t.Run("file", func(t *testing.T) {
		apiOfServeProcess(t, serveProcess(t, "file://"+filepath.Join(t.TempDir(), "store")))
	})
	t.Run("s3", func(t *testing.T) {
		cfg := s3test.Config(t)
		store := fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=1", cfg.Bucket, cfg.Prefix, cfg.Endpoint)
		apiOfServeProcess(t, serveProcess(t, store, "AWS_ACCESS_KEY_ID="+cfg.AccessKey, "AWS_SECRET_ACCESS_KEY="+cfg.SecretKey))
	})
}

func apiOfServeProcess(t *testing.T, c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Readyz(ctx); err != nil {
		t.Fatalf("readyz: %v", err)
	}
	if _, err := c.OpenAPI(ctx); err != nil {
		t.Fatal(err)
	}
	in := json.RawMessage(`{"request":"proc"}`)
	sub, err := c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "pa1", Input: in, Labels: map[string]string{"team": "blue"}})
	if err != nil || !sub.New {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	if again, err := c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "pa1", Input: in, Labels: map[string]string{"team": "blue"}}); err != nil || again.New {
		t.Fatalf("the same submission again: %+v %v, want new=false", again, err)
	}
	waitRun := func(id, state string) client.Run {
		t.Helper()
		for {
			run, err := c.Run(ctx, id)
			if err == nil && run.State == state {
				return run
			}
			select {
			case <-ctx.Done():
				t.Fatalf("run %s did not reach %s: last %+v %v", id, state, run, err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	run := waitRun("pa1", "waiting")
	if run.Waiting == nil || run.Waiting.SignalKey != "approve:pa1" {
		t.Fatalf("waiting: %+v", run.Waiting)
	}
	list, err := c.ListRuns(ctx, client.ListOptions{Labels: map[string]string{"team": "blue"}})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].RunID != "pa1" {
		t.Fatalf("list by label: %+v %v", list, err)
	}
	st, err := c.RunEvents(ctx, "pa1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if ev, err := st.Next(); err != nil || ev.Name != "state" || ev.ID == "" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	if _, err := c.Signal(ctx, "approve:pa1", []byte(`{"approved":"yes"}`), true); !errors.Is(err, client.ErrRejected) || fieldOf(err) != "/approved" {
		t.Fatalf("a payload the schema refuses: %v", err)
	}
	if res, err := c.Signal(ctx, "approve:pa1", []byte(`{"approved":true,"by":"proc"}`), true); err != nil || res.Delivered != "now" {
		t.Fatalf("signal: %+v %v", res, err)
	}
	last := ""
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Name == "state" {
			var s client.RunSummary
			_ = json.Unmarshal(ev.Data, &s)
			last = s.State
		}
	}
	if last != "succeeded" {
		t.Fatalf("the run's stream ended in state %q, want succeeded", last)
	}
	hist, err := c.History(ctx, "pa1")
	if err != nil || len(hist) != 3 {
		t.Fatalf("history: %+v %v", hist, err)
	}
	if _, err := c.Cancel(ctx, "pa1"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("cancel of a finished run: %v", err)
	}
	if _, err := c.Submit(ctx, client.SubmitRequest{Workflow: "slow.yaml", RunID: "ps1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "ps1"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitRun("ps1", "cancelled")
	wfs, err := c.Workflows(ctx)
	if err != nil || len(wfs) == 0 {
		t.Fatalf("workflows: %+v %v", wfs, err)
	}
	if d, err := c.Workflow(ctx, "approval.tqw.yaml"); err != nil || d.Mermaid == "" {
		t.Fatalf("workflow: %+v %v", d, err)
	}
	if rep, err := c.Validate(ctx, "x.yaml", []byte("tqw: v1\nname: x\nsteps:\n  - id: a\n    succeed: ok\n")); err != nil || !rep.Valid {
		t.Fatalf("validate: %+v %v", rep, err)
	}
	if _, err := c.Schema(ctx); err != nil {
		t.Fatal(err)
	}
}
