package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/server/client"
)

var signalBinary string

func init() {
	register(&bench{
		name:    "signal",
		summary: "CLI signal latency over HTTP: 'tqw-dsl signal' started -> the waiting run's next step starts, against 'tqw-dsl serve' on file:// (target p50 <= 50 ms)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&signalBinary, "tqw-dsl", "", "tqw-dsl binary (default: go build ./cmd/tqw-dsl into a temp dir)")
		},
		run: runSignal,
	})
}

// signalWorkflow waits on a key, then runs one more step, whose start
// ends the measurement.
const signalWorkflow = `tqw: v1
name: signal-bench
steps:
  - id: wait
    action: wait_signal
    with: {key: "go:${ run.id }", timeout: 1h}
  - id: after
    succeed: done
`

// runSignal starts serve on a file:// store (its inbox polled hourly, so
// only HTTP can answer in time), and for each operation submits a run,
// waits until it waits, then times a 'tqw-dsl signal' process from its
// start to the step_start event of the step after the wait, whose time
// the server stamps with the same machine's clock.
func runSignal(ctx context.Context, cfg *config) error {
	bin := signalBinary
	dir, err := os.MkdirTemp("", "tqw-bench-signal-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "tqw-dsl")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tqw-dsl").CombinedOutput(); err != nil {
			return fmt.Errorf("building tqw-dsl (run from the repository root or pass --tqw-dsl): %v\n%s", err, out)
		}
	}
	wfDir := filepath.Join(dir, "wf")
	if err := os.MkdirAll(wfDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(wfDir, "signal.yaml"), []byte(signalWorkflow), 0o644); err != nil {
		return err
	}
	store := "file://" + filepath.Join(dir, "store")
	env := append(os.Environ(), "TQW_API_TOKEN=", "TQW_STORE=")
	srv := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--store", store, "--workflows", wfDir, "--inbox-poll", "1h")
	srv.Env = env
	stderr, err := srv.StderrPipe()
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	}()
	addr, err := serveAddress(stderr)
	if err != nil {
		return err
	}
	c := client.New(addr, client.Options{})
	var lats Latencies
	start := time.Now()
	var n int64
	for ctx.Err() == nil && !cfg.done(n, start) {
		d, err := signalOnce(ctx, c, bin, store, env, n)
		if err != nil {
			return err
		}
		lats.Add(d)
		n++
	}
	return cfg.emitFor("file://", newResult("cli-signal-http", 1, n, time.Since(start).Seconds(), &lats, counting.Counts{}, map[string]any{"path": "http"}))
}

// serveAddress reads serve's stderr until it says where it serves, then
// drains the rest in the background.
func serveAddress(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	re := regexp.MustCompile(`serving (http://[0-9.:]+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, r) }()
			return m[1], nil
		}
	}
	return "", errors.New("serve exited before it said where it serves")
}

func signalOnce(ctx context.Context, c *client.Client, bin, store string, env []string, n int64) (time.Duration, error) {
	id := fmt.Sprintf("sig-%d-%d", time.Now().UnixNano(), n)
	if _, err := c.Submit(ctx, client.SubmitRequest{Workflow: "signal.yaml", RunID: id}); err != nil {
		return 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := c.RunEvents(sctx, id)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	// Wait until the run waits: the wait step's end (outcome waiting).
	for {
		ev, err := st.Next()
		if err != nil {
			return 0, fmt.Errorf("run %s never waited: %w", id, err)
		}
		if ev.Name == "state" && strings.Contains(string(ev.Data), `"state":"waiting"`) {
			break
		}
	}
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, bin, "signal", "go:"+id, `{"ok":true}`, "--store", store)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("tqw-dsl signal: %v\n%s", err, out)
	}
	for {
		ev, err := st.Next()
		if err != nil {
			return 0, fmt.Errorf("run %s: no step after the signal: %w", id, err)
		}
		if ev.Name != "step_start" {
			continue
		}
		var se struct {
			Time time.Time `json:"time"`
			Step string    `json:"step"`
		}
		if err := json.Unmarshal(ev.Data, &se); err != nil {
			return 0, err
		}
		if se.Step == "after" {
			return se.Time.Sub(t0), nil
		}
	}
}
