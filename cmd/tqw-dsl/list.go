package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tqw-dsl/tqw/server"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/server/client"
)

func init() { commands = append(commands, newListCmd) }

var stateNames = []runstate.State{
	runstate.StatePending, runstate.StateRunning, runstate.StateWaiting, runstate.StateScheduled, runstate.StateCancelling,
	runstate.StateSucceeded, runstate.StateFailed, runstate.StateCancelled,
}

func parseStates(s string) ([]runstate.State, error) {
	if s == "" {
		return nil, nil
	}
	var out []runstate.State
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, st := range stateNames {
			if st.String() == name {
				out, found = append(out, st), true
				break
			}
		}
		if !found {
			var names []string
			for _, st := range stateNames {
				names = append(names, st.String())
			}
			return nil, failf(exitUsage, "--status %q: want one or more of %s, separated by commas", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// parseLabels parses --label values, key=value each.
func parseLabels(flags []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, failf(exitUsage, "--label %q: want key=value", f)
		}
		if _, dup := out[k]; dup {
			return nil, failf(exitUsage, "--label %q: key %q given twice", f, k)
		}
		out[k] = v
	}
	return out, nil
}

// submitLabels parses the --label values of run and submit: key=value
// each, checked by the label rules; the key workflow is the workflow's
// name, which tqw sets.
func submitLabels(flags []string) (map[string]string, error) {
	labels, err := parseLabels(flags)
	if err != nil {
		return nil, err
	}
	if _, ok := labels[interpreter.LabelWorkflow]; ok {
		return nil, failf(exitUsage, "--label %s=...: the label %q is the workflow's name, which tqw sets; pick another key", interpreter.LabelWorkflow, interpreter.LabelWorkflow)
	}
	if err := runstate.ValidateLabels(labels); err != nil {
		return nil, failf(exitUsage, "--label: %v", err)
	}
	return labels, nil
}

// labelFlagHelp is the help of run's and submit's --label.
const labelFlagHelp = "label the run, as key=value (repeatable; wins over the file's labels: on the same key)"

func newListCmd() *cobra.Command {
	var (
		store  string
		filter runFilter
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List active runs and runs finished in the last 24h (read-only)",
		Long: `list shows the active runs and those finished in the last 24h, by run id.
DETAIL says what a run waits for: the signal key, "until" the time a
sleeping, retrying or waiting step resumes at the latest, the error of the
retry in progress, or the error a run failed with.

It only reads the store: it never opens it as its writer, so it works while
a worker (or run) holds the store and does not disturb it, showing what that
writer has made durable; it creates and changes nothing, so it works on a
store the user may only read; and a URL with no store at it is an error
(exit 1) that names the URL and where it came from.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return failf(exitUsage, "--limit %d: want at least 1", limit)
			}
			o, err := filter.options()
			if err != nil {
				return err
			}
			o.Limit = limit
			ctx := context.WithoutCancel(cmd.Context())
			var runs []runstate.Status
			if a := liveReadAPI(ctx, store); a != nil {
				if runs, err = listHTTP(ctx, a, o); err != nil {
					return err
				}
			} else {
				v, err := openView(ctx, store)
				if err != nil {
					return err
				}
				defer v.Close()
				runs, err = v.insp.ListRuns(ctx, o)
				if err != nil {
					return failf(exitFailed, "list runs: %v", err)
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				for _, r := range runs {
					if err := enc.Encode(toRunJSON(r)); err != nil {
						return failf(exitFailed, "writing output: %v", err)
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTATE\tSUBMITTED\tDETAIL")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.RunID, r.Headers[interpreter.HeaderWorkflow], r.State, r.SubmittedAt.UTC().Format(time.RFC3339), listDetail(r))
			}
			return tw.Flush()
		},
	}
	addStoreFlag(cmd, &store)
	filter.addFlags(cmd, "list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per run")
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many runs")
	return cmd
}

// listDetail is the DETAIL column of a run: the signal it waits on, when
// a waiting or scheduled step resumes (until), the error of the retry in
// progress, or the error it failed with; at most 80 bytes, cut on a rune.
func listDetail(r runstate.Status) string {
	var parts []string
	if r.SignalKey != "" {
		parts = append(parts, "signal "+r.SignalKey)
	}
	if !r.Until.IsZero() && !r.State.Terminal() {
		parts = append(parts, "until "+r.Until.UTC().Format(time.RFC3339))
	}
	if r.LastError != "" {
		parts = append(parts, "last error: "+r.LastError)
	}
	if f := server.ForkOriginOf(r); f != nil {
		parts = append(parts, "forked from "+f.RunID+" at "+f.At)
	}
	detail := strings.Join(parts, ", ")
	if len(parts) == 0 {
		detail = r.Error
	}
	if len(detail) > 80 {
		cut := 77
		for cut > 0 && !utf8.RuneStart(detail[cut]) {
			cut--
		}
		detail = detail[:cut] + "..."
	}
	return detail
}

// listHTTP lists runs through the live writer's HTTP API, page by page
// up to o.Limit; the API's cursor is the run id to list after.
func listHTTP(ctx context.Context, a *apiWriter, o runstate.ListOptions) ([]runstate.Status, error) {
	var names []string
	for _, st := range o.States {
		names = append(names, st.String())
	}
	var out []runstate.Status
	cursor := o.After
	for len(out) < o.Limit {
		page, err := a.c.ListRuns(ctx, client.ListOptions{Status: names, Cursor: cursor, Labels: o.Labels, Limit: min(o.Limit-len(out), 1000)})
		if err != nil {
			return nil, a.apiError("list runs", err)
		}
		for _, r := range page.Runs {
			out = append(out, statusOf(r))
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	return out, nil
}
