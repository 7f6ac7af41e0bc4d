package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/wire"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
)

func init() { commands = append(commands, newStatusCmd) }

// runJSON is a run's status as --json prints it.
type runJSON struct {
	RunID       string          `json:"run"`
	Workflow    string          `json:"workflow,omitempty"`
	State       string          `json:"state"`
	Step        int             `json:"step_number"`
	Attempt     int             `json:"attempt,omitempty"`
	SignalKey   string          `json:"signal_key,omitempty"`
	Until       *time.Time      `json:"until,omitempty"`
	LastError   string          `json:"last_error,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	SubmittedAt time.Time       `json:"submitted_at"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
	// Labels are the run's labels, the workflow's name (key workflow)
	// among them.
	Labels map[string]string `json:"labels,omitempty"`
	// LastStep is the workflow step of the latest history record.
	LastStep *lastStep `json:"last_step,omitempty"`
	// RejectedSignal is the last signal a waiting step set aside.
	RejectedSignal *rejectedJSON `json:"rejected_signal,omitempty"`
	// Totals is what the run cost so far (status only).
	Totals *totalsJSON `json:"totals,omitempty"`
	// Fork is the lineage of a fork: the run and step it started from.
	Fork *wire.ForkOrigin `json:"forked_from,omitempty"`
	// MapProgress is the progress of the map step a running run is at.
	MapProgress *wire.MapProgress `json:"map_progress,omitempty"`
}

// rejectedJSON is a signal a waiting step set aside, as status shows it.
type rejectedJSON struct {
	Step   string    `json:"step"`
	Key    string    `json:"key"`
	Size   int       `json:"size"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// lastStep summarizes the latest history record of a run.
type lastStep struct {
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Outcome string `json:"outcome"`
}

// latestStep returns the run's latest history record and the last signal
// one of its steps set aside, each nil when there is none.
func latestStep(ctx context.Context, v *view, runID string) (*lastStep, *rejectedJSON) {
	recs, err := interpreter.History(ctx, v.records(), nil, runID)
	if err != nil {
		return nil, nil
	}
	return latestOf(recs)
}

// latestOf returns the latest of recs and the last signal a step set
// aside, each nil when there is none.
func latestOf(recs []interpreter.HistoryRecord) (*lastStep, *rejectedJSON) {
	if len(recs) == 0 {
		return nil, nil
	}
	h := recs[len(recs)-1]
	var rej *rejectedJSON
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i].Rejected; r != nil {
			rej = &rejectedJSON{Step: recs[i].Step, Key: r.Key, Size: r.Size, Reason: r.Reason, At: recs[i].EndTime().UTC()}
			break
		}
	}
	return &lastStep{Step: h.Step, Attempt: h.Attempt, Outcome: h.Outcome}, rej
}

func toRunJSON(st runstate.Status) runJSON {
	r := runJSON{RunID: st.RunID, Workflow: st.Headers[interpreter.HeaderWorkflow], State: st.State.String(), Step: st.Step, Attempt: st.Attempt, SignalKey: st.SignalKey,
		LastError: st.LastError, Error: st.Error, SubmittedAt: st.SubmittedAt.UTC(), Labels: st.Labels,
		Fork: server.ForkOriginOf(st)}
	if !st.Until.IsZero() {
		u := st.Until.UTC()
		r.Until = &u
	}
	if !st.FinishedAt.IsZero() {
		f := st.FinishedAt.UTC()
		r.FinishedAt = &f
	}
	if json.Valid(st.Result) {
		r.Result = st.Result
	}
	return r
}

func newStatusCmd() *cobra.Command {
	var (
		store  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "Show a run's state (read-only)",
		Long: `status reads the store without writing to it and shows the run's state:
pending, running, waiting (for a signal), scheduled (a retry or sleep),
cancelling, succeeded, failed or cancelled, with the result or error of a
finished run (kept 24h), the run's totals (steps, attempts, retries, LLM
tokens and cost, wall time, and the object-store requests it caused, with
their price at S3 list prices), and the last signal a waiting step set aside
(a payload it could not use: it was not JSON or did not match the step's
schema) with the reason. An unknown run is exit code 1.

It never opens the store as its writer, so it works while a worker (or run)
holds the store and does not disturb it; it shows what that writer has made
durable.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := context.WithoutCancel(cmd.Context())
			var (
				st     runstate.Status
				last   *lastStep
				rej    *rejectedJSON
				totals *totalsJSON
				mp     *wire.MapProgress
			)
			if a := liveReadAPI(ctx, store); a != nil {
				if err := runstate.ValidateRunID(args[0]); err != nil {
					return failf(exitUsage, "%v", err)
				}
				run, err := a.c.Run(ctx, args[0])
				if err != nil {
					return a.apiError("status of run "+args[0], err)
				}
				recs, err := a.c.History(ctx, args[0])
				if err != nil {
					return a.apiError("history of run "+args[0], err)
				}
				st, totals = statusOf(run.RunSummary), &run.Totals
				st.Result, st.ResultOmitted = runResult(run), run.ResultOmitted
				last, rej = latestOf(historyOf(recs))
				mp = run.MapProgress
			} else {
				v, err := openView(ctx, store)
				if err != nil {
					return err
				}
				defer v.Close()
				if st, err = v.status(ctx, store, args[0]); err != nil {
					return err
				}
				last, rej = latestStep(ctx, v, st.RunID)
				totals = toTotalsJSON(st, time.Now())
				mp = v.mapProgress(ctx, st)
			}
			if asJSON {
				r := toRunJSON(st)
				r.LastStep, r.RejectedSignal = last, rej
				r.Totals, r.MapProgress = totals, mp
				return json.NewEncoder(cmd.OutOrStdout()).Encode(r)
			}
			printStatus(cmd.OutOrStdout(), st)
			if mp != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "map        step %s: %d done, %d failed of %d\n", mp.Step, mp.Done, mp.Failed, mp.Total)
			}
			printTotals(cmd.OutOrStdout(), totals)
			if last != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "last step  %s (attempt %d, %s)\n", last.Step, last.Attempt, last.Outcome)
			}
			if rej != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "rejected   signal on %s (%d bytes) set aside by step %s at %s: %s\n",
					rej.Key, rej.Size, rej.Step, rej.At.Format(time.RFC3339), rej.Reason)
			}
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// mapProgress is the progress of the map step st's run is at, nil when
// it is at no map step (or has ended). Like the HTTP run view, it reads
// the cursor in the run's current step job.
func (v *view) mapProgress(ctx context.Context, st runstate.Status) *wire.MapProgress {
	if st.JobID == "" {
		return nil
	}
	pos, err := v.defs.Position(ctx, v.r, st.JobID)
	if err != nil || pos.Map == nil {
		return nil
	}
	return &wire.MapProgress{Step: pos.Step, Done: pos.Map.Done, Failed: pos.Map.Failed, Total: pos.Map.Total}
}

func printStatus(out io.Writer, st runstate.Status) {
	fmt.Fprintf(out, "run        %s\nworkflow   %s\nstate      %s\nsubmitted  %s\n", st.RunID, st.Headers[interpreter.HeaderWorkflow], st.State, st.SubmittedAt.UTC().Format(time.RFC3339))
	if l := labelText(st.Labels); l != "" {
		fmt.Fprintf(out, "labels     %s\n", l)
	}
	if f := server.ForkOriginOf(st); f != nil {
		fmt.Fprintf(out, "lineage    forked from %s at %s\n", f.RunID, f.At)
	}
	if st.SignalKey != "" {
		fmt.Fprintf(out, "waiting on %s\n", st.SignalKey)
	}
	if !st.Until.IsZero() {
		fmt.Fprintf(out, "until      %s\n", st.Until.UTC().Format(time.RFC3339))
	}
	if st.LastError != "" {
		fmt.Fprintf(out, "last error %s\n", st.LastError)
	}
	if !st.FinishedAt.IsZero() {
		fmt.Fprintf(out, "finished   %s\n", st.FinishedAt.UTC().Format(time.RFC3339))
	}
	if st.State == runstate.StateSucceeded {
		if st.ResultOmitted {
			fmt.Fprintln(out, "result     (over 256 KiB; see history)")
		} else {
			fmt.Fprintf(out, "result     %s\n", st.Result)
		}
	}
	if st.Error != "" {
		fmt.Fprintf(out, "error      %s\n", st.Error)
	}
}

// labelText renders a run's labels as key=value pairs in key order,
// without the workflow label (status shows the workflow on its own line).
func labelText(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if k != interpreter.LabelWorkflow {
			parts = append(parts, k+"="+labels[k])
		}
	}
	return strings.Join(parts, " ")
}
