package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
)

func init() { commands = append(commands, newRunCmd) }

type runFlags struct {
	store   string
	input   string
	runID   string
	detach  bool
	json    bool
	noShell bool
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a workflow file to its end, resuming unfinished runs in the store too",
		Long: `run validates FILE, pins it in the store by content hash, submits a run and
works the store until that run ends, then prints its result. It also works
every other unfinished run in the store, so running it again after a crash
finishes what was interrupted.

On a terminal each step is shown as it starts and ends; --json prints one
JSON event per line instead, the last one with the run's status and result.

Exit codes: 0 succeeded, 1 failed, 3 cancelled, 2 a usage, validation or
input error (nothing is written then), 130 interrupted (the run continues
with 'tqw-dsl worker' or 'tqw-dsl run' again).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd, args[0], &f)
		},
	}
	addStoreFlag(cmd, &f.store)
	cmd.Flags().StringVar(&f.input, "input", "", "run input: JSON, or @FILE to read it from a file (default {})")
	cmd.Flags().StringVar(&f.runID, "run-id", "", "run id (default: a new ULID); submitting an active run's id with the same input follows it")
	cmd.Flags().BoolVar(&f.detach, "detach", false, "submit the run, print its id and exit without working it")
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON event per line")
	cmd.Flags().BoolVar(&f.noShell, "no-shell", false, "refuse workflows that use the shell action, and do not run it")
	return cmd
}

// endEvent is the last line of run --json.
type endEvent struct {
	Event  string          `json:"event"` // "run_end"
	RunID  string          `json:"run"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

func runRun(cmd *cobra.Command, path string, f *runFlags) error {
	input, _, err := readJSONArg("--input", f.input, map[string]any{})
	if err != nil {
		return err
	}
	w, err := loadWorkflow(cmd, path, f.noShell)
	if err != nil {
		return err
	}
	if err := checkInput(w, input); err != nil {
		return err
	}
	runID := f.runID
	if runID == "" {
		runID = ulid.Make().String()
	}
	if err := runtime.ValidateRunID(runID); err != nil {
		return failf(exitUsage, "--run-id: %v", err)
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var progress func(interpreter.Event)
	if !f.detach {
		progress = newProgress(runID, out, errOut, f.json)
	}
	e, err := openEngine(context.WithoutCancel(ctx), f.store, engineOptions{noShell: f.noShell, events: progress})
	if err != nil {
		return err
	}
	defer e.Close()
	done, unwatch := e.it.Watch(runID)
	defer unwatch()
	sub, err := e.it.Submit(ctx, w, input, runID)
	if err != nil {
		return submitError(runID, err)
	}
	if f.detach {
		if f.json {
			return json.NewEncoder(out).Encode(map[string]any{"event": "submitted", "run": runID, "new": sub.NewlySubmitted})
		}
		fmt.Fprintln(out, runID)
		return nil
	}
	if !sub.NewlySubmitted && !f.json {
		fmt.Fprintf(errOut, "run %s is already active; following it\n", runID)
	}
	worker := e.rt.Spawn(context.WithoutCancel(ctx))
	var outcome *runtime.RunOutcome
	select {
	case outcome = <-done:
	case <-ctx.Done():
	case <-worker.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	werr := worker.Shutdown(shutdownCtx)
	if cerr := e.Close(); cerr != nil {
		return cerr
	}
	if outcome == nil {
		if werr != nil {
			return failf(exitFailed, "working the store stopped: %v", werr)
		}
		return failf(exitInterrupted, "interrupted; run %s continues with 'tqw-dsl worker' or 'tqw-dsl run' again", runID)
	}
	return report(out, errOut, outcome, f.json)
}

// report prints a run's end and returns its exit status.
func report(out, errOut io.Writer, o *runtime.RunOutcome, asJSON bool) error {
	if asJSON {
		ev := endEvent{Event: "run_end", RunID: o.RunID, Status: o.Status.String(), Error: o.Error}
		if len(o.Result) > 0 {
			ev.Result = json.RawMessage(o.Result)
		}
		if err := json.NewEncoder(out).Encode(ev); err != nil {
			return failf(exitFailed, "writing output: %v", err)
		}
	}
	switch o.Status {
	case runtime.Succeeded:
		if !asJSON {
			printResult(out, o)
		}
		return nil
	case runtime.Cancelled:
		return failf(exitCancelled, "run %s was cancelled", o.RunID)
	}
	return failf(exitFailed, "run %s failed: %s", o.RunID, o.Error)
}

// printResult prints a JSON string result as text, anything else as JSON.
func printResult(out io.Writer, o *runtime.RunOutcome) {
	if o.ResultOmitted {
		fmt.Fprintf(out, "(the result is over %d bytes; see 'tqw-dsl history %s')\n", runtime.MaxRetainedResult, o.RunID)
		return
	}
	var s string
	if json.Unmarshal(o.Result, &s) == nil {
		fmt.Fprintln(out, s)
		return
	}
	fmt.Fprintln(out, string(o.Result))
}

// newProgress returns the event printer of run: JSON lines on out, or
// step lines on errOut when it is a terminal, for runID and its children.
func newProgress(runID string, out, errOut io.Writer, asJSON bool) func(interpreter.Event) {
	var mu sync.Mutex
	mine := func(ev interpreter.Event) bool {
		return ev.RunID == runID || strings.HasPrefix(ev.RunID, runID+":")
	}
	if asJSON {
		enc := json.NewEncoder(out)
		return func(ev interpreter.Event) {
			if !mine(ev) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			_ = enc.Encode(ev)
		}
	}
	if !isTerminal(errOut) {
		return nil
	}
	return func(ev interpreter.Event) {
		if !mine(ev) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		prefix := ""
		if ev.RunID != runID {
			prefix = "  " + strings.TrimPrefix(ev.RunID, runID+":") + " › "
		}
		switch ev.Kind {
		case "start":
			fmt.Fprintf(errOut, "%s▶ %s (attempt %d)\n", prefix, ev.Step, ev.Attempt)
		default:
			line := fmt.Sprintf("%s%s %s %s in %s", prefix, mark(ev.Status), ev.Step, ev.Status, ev.Elapsed.Round(time.Millisecond))
			if ev.Error != nil {
				line += fmt.Sprintf(": %s: %s", ev.Error.Type, ev.Error.Message)
			}
			if ev.Next != "" && ev.Next != ev.Step {
				line += " → " + ev.Next
			}
			fmt.Fprintln(errOut, line)
		}
	}
}

func mark(status string) string {
	switch status {
	case interpreter.OutcomeOK, interpreter.OutcomeSucceeded:
		return "✓"
	case interpreter.OutcomeWaiting:
		return "…"
	case interpreter.OutcomeRetry, interpreter.OutcomeCaught:
		return "↻"
	}
	return "✗"
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
