package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
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
	addr, bin, store, stop, err := startServe(ctx, signalBinary, signalWorkflow, "--inbox-poll", "1h")
	if err != nil {
		return err
	}
	defer stop()
	env := append(os.Environ(), "TQW_API_TOKEN=", "TQW_STORE=")
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

func signalOnce(ctx context.Context, c *client.Client, bin, store string, env []string, n int64) (time.Duration, error) {
	id := fmt.Sprintf("sig-%d-%d", time.Now().UnixNano(), n)
	if _, err := c.Submit(ctx, client.SubmitRequest{Workflow: "bench.yaml", RunID: id}); err != nil {
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
