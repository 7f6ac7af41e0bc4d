package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/server/client"
)

func init() { commands = append(commands, newHistoryCmd) }

// historyJSON is one record as --json prints it.
type historyJSON struct {
	interpreter.HistoryRecord
	Start time.Time  `json:"start"`
	End   time.Time  `json:"end"`
	Until *time.Time `json:"until,omitempty"`
}

func newHistoryCmd() *cobra.Command {
	var (
		store  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "history RUN",
		Short: "Show a run's step timeline with outputs, secrets redacted (read-only)",
		Long: `history prints every attempt of every step of RUN: when it started and
ended, its outcome (ok, waiting, retry, caught, failed, succeeded), its
error and its output. Secret values never reach the store, so they appear
as ***. An unknown run is exit code 1; a run with no step recorded yet
says so on stderr.

It only reads the store: it never opens it as its writer, so it works while
a worker (or run) holds the store and does not disturb it, showing what that
writer has made durable; it creates and changes nothing, so it works on a
store the user may only read; and a URL with no store at it is an error
(exit 1) that names the URL and where it came from.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			runID := args[0]
			if err := runstate.ValidateRunID(runID); err != nil {
				return failf(exitUsage, "%v", err)
			}
			ctx := context.WithoutCancel(cmd.Context())
			var (
				recs   []interpreter.HistoryRecord
				status func() (runstate.Status, error)
			)
			if a := liveReadAPI(ctx, store); a != nil {
				got, err := a.c.History(ctx, runID)
				if errors.Is(err, client.ErrNotFound) {
					return failf(exitFailed, "no run %q in %s", runID, store)
				}
				if err != nil {
					return a.apiError("history of run "+runID, err)
				}
				recs = historyOf(got)
				status = func() (runstate.Status, error) {
					run, err := a.c.Run(ctx, runID)
					if err != nil {
						return runstate.Status{}, a.apiError("status of run "+runID, err)
					}
					return statusOf(run.RunSummary), nil
				}
			} else {
				v, err := openView(ctx, store)
				if err != nil {
					return err
				}
				defer v.Close()
				recs, err = interpreter.History(ctx, v.records(), v.store, runID)
				if err != nil {
					return failf(exitFailed, "history of run %s: %v", runID, err)
				}
				status = func() (runstate.Status, error) {
					st, err := v.insp.Status(ctx, runID)
					if errors.Is(err, runtime.ErrRunNotFound) {
						return st, failf(exitFailed, "no run %q in %s", runID, store)
					}
					if err != nil {
						return st, failf(exitFailed, "status of run %s: %v", runID, err)
					}
					return st, nil
				}
			}
			if len(recs) == 0 {
				st, err := status()
				if err != nil {
					return err
				}
				if !asJSON {
					// On stderr, so stdout stays a (here empty) timeline.
					fmt.Fprintf(cmd.ErrOrStderr(), "run %s has no step in its history yet (it is %s): %s\n", runID, st.State, noStepsYet(st))
				}
				return nil
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				for _, h := range recs {
					r := historyJSON{HistoryRecord: h, Start: h.StartTime().UTC(), End: h.EndTime().UTC()}
					if h.Until > 0 {
						u := time.UnixMilli(h.Until).UTC()
						r.Until = &u
					}
					if err := enc.Encode(r); err != nil {
						return failf(exitFailed, "writing output: %v", err)
					}
				}
				return nil
			}
			for _, h := range recs {
				if h.DroppedVisits > 0 {
					fmt.Fprintf(out, "%s%s\n", strings.Repeat(" ", 26), droppedText(h))
				}
				line := fmt.Sprintf("%s  %-12s %-10s attempt %d  %-9s %6s", h.StartTime().UTC().Format("2006-01-02T15:04:05.000Z"),
					h.Step, h.Kind, h.Attempt, h.Outcome, h.EndTime().Sub(h.StartTime()).Round(time.Millisecond))
				if h.Next != "" {
					line += "  → " + h.Next
				}
				if h.WaitKey != "" {
					line += "  key " + h.WaitKey
				}
				fmt.Fprintln(out, line)
				if p := interpreter.ChildRunIDs(h.WaitKey); p != "" {
					// A parallel or map step: each branch or item is a run
					// with a history of its own.
					fmt.Fprintf(out, "    children  tqw-dsl history %s<branch or item index>\n", p)
				}
				if h.Error != nil {
					fmt.Fprintf(out, "    error  %s: %s\n", h.Error.Type, h.Error.Message)
				}
				if u := h.Reused; u != nil {
					fmt.Fprintf(out, "    answer reused, saved $%.6f / %d tokens (%s)\n", u.CostUSD, u.Tokens, plural(u.Calls, "call"))
				}
				if h.Output != nil {
					b, err := json.Marshal(h.Output)
					if err == nil {
						s := string(b)
						if len(s) > 2000 {
							s = s[:2000] + fmt.Sprintf("... (%d bytes; --json prints all)", len(b))
						}
						fmt.Fprintf(out, "    output %s\n", s)
					}
				}
			}
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per record")
	return cmd
}

// noStepsYet says why a run has no history record, and what to do.
func noStepsYet(st runstate.Status) string {
	switch {
	case st.State == runstate.StatePending || st.State == runstate.StateScheduled:
		return "its first step runs when a worker (tqw-dsl worker, or tqw-dsl run) works the store"
	case st.State == runstate.StateRunning:
		return "its first step is running; a step is recorded when it ends"
	case st.State.Terminal():
		return "it ended before any step was recorded"
	}
	return "a step is recorded when it ends"
}

// droppedText says how many earlier visits of h's step the history no
// longer holds, as history prints it above the step's oldest record.
func droppedText(h interpreter.HistoryRecord) string {
	noun := "visits"
	if h.DroppedVisits == 1 {
		noun = "visit"
	}
	return fmt.Sprintf("step %s: %s earlier %s not kept (the history keeps each step's latest visits)", h.Step, groupDigits(h.DroppedVisits), noun)
}

// groupDigits writes n with a comma between each group of three digits.
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
