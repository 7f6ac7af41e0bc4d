package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/server/client"
)

// Recovering runs: retry (redrive) and skip, the bulk forms of cancel,
// retry and signal, and signals clear.

func init() { commands = append(commands, newRetryCmd, newSkipCmd) }

const bulkHelp = `
With list's filters (--workflow, --status, --label, --after) instead of RUN,
it acts on every run they select: without --yes it only prints the runs it
would touch (a dry run, exit 0); with --yes it acts on each, printing one
line per run ("RUN OUTCOME [DETAIL]"; --json: one object per run). Each run
is acted on once per request id: --request-id names the request (one is
generated and printed on stderr when absent); a command interrupted (killed,
the store unreachable) is finished by running it again with the same
--request-id, which skips the runs it already did ("done"). It exits 1 when
a run was skipped (ended meanwhile, refused) or the request was cut short.`

func newRetryCmd() *cobra.Command {
	var (
		store, definition, requestID string
		filter                       runFilter
		yes, asJSON                  bool
	)
	cmd := &cobra.Command{
		Use:   "retry RUN | retry --status failed [FILTERS] [--yes]",
		Short: "Redrive a failed or cancelled run in place, from the step it ended at",
		Long: `retry continues a run that failed or was cancelled under the same run id,
from the step it ended at: every completed step's output and the variables
are as they were, and that step starts again with a fresh retry budget (the
http step whose server is fixed now, say). History shows the redrive as a
"redriven" record.

--definition FILE continues the run on a new revision of its workflow when
it is compatible: every step the run completed and the step it resumes at
exist in FILE with the same kind (action). Otherwise retry lists the
differences and changes nothing (exit 1).

A succeeded or active run is refused (exit 1), and so is a child run (one a
call step started): its parent already received its end; retry the parent,
whose call step starts the child anew. A run sealed into a segment is
redriven as well: the live run supersedes the sealed copy everywhere.
` + bulkHelp + `

Like cancel, it goes to the live writer (its HTTP API, or the store's inbox)
or opens the store as its writer for the moment it takes.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var w *interpreter.Workflow
			if definition != "" {
				var err error
				if w, err = loadWorkflow(cmd, definition, false); err != nil {
					return err
				}
			}
			opts := interpreter.RedriveOptions{Definition: w}
			if len(args) == 0 {
				return runBulk(cmd, store, &filter, bulkFlags{action: "redrive", requestID: requestID, yes: yes, asJSON: asJSON, redrive: opts})
			}
			if filter.given() {
				return failf(exitUsage, "give RUN or filters (--workflow, --status, --label, --after), not both")
			}
			return redriveOne(cmd, store, args[0], opts, asJSON)
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&definition, "definition", "", "continue on this revision of the workflow (a file), when it is compatible")
	addBulkFlags(cmd, &filter, &requestID, &yes, "retry")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"run": RUN, "redriven": true} (bulk: one object per run)`)
	return cmd
}

func newSkipCmd() *cobra.Command {
	var (
		store, output string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "skip RUN STEP",
		Short: "Record the step a run ended at, or waits at, as done with an output, and continue after it",
		Long: `skip continues a run that failed or was cancelled at STEP without running
STEP again: STEP is recorded as done (history: "skipped") with --output (a
JSON value, or @FILE; default null) as its output, and the run routes on
from it as the step would (its set, switch and next), with every other
step's output and the variables as they were.

An active run that waits at STEP (wait_signal, sleep) is skipped the same
way, at once: its wait ends without a signal, and a signal sent to its key
later is only buffered.

A step the run is not at is refused (exit 1), and so is an active run whose
step is running or not waiting, and a run retry refuses (see 'tqw-dsl retry
--help'). Like cancel, it goes to the live writer or
opens the store as its writer for the moment it takes.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, _, err := readJSONArg("--output", output, nil)
			if err != nil {
				return err
			}
			return redriveOne(cmd, store, args[0], interpreter.RedriveOptions{Skip: args[1], Output: v}, asJSON)
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&output, "output", "", "the step's output: JSON, or @FILE (default null)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"run": RUN, "redriven": true}`)
	return cmd
}

// redriveOne redrives (retry, skip) one run through the live writer or as
// the store's writer.
func redriveOne(cmd *cobra.Command, store, runID string, opts interpreter.RedriveOptions, asJSON bool) error {
	if err := runstate.ValidateRunID(runID); err != nil {
		return failf(exitUsage, "RUN: %v", err)
	}
	what := "retry run " + runID
	if opts.Skip != "" {
		what = fmt.Sprintf("skip step %s of run %s", opts.Skip, runID)
	}
	ctx := context.WithoutCancel(cmd.Context())
	done := func() error {
		if asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"run": runID, "redriven": true})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "run %s redriven\n", runID)
		return nil
	}
	if a := liveAPI(ctx, store); a != nil {
		err := redriveHTTP(ctx, a, runID, opts)
		if !errors.Is(err, errInlineRefused) {
			if err != nil {
				return err
			}
			return done()
		}
	}
	sess, err := openSession(ctx, store, engineOptions{name: "retry", brief: true})
	if err != nil {
		return err
	}
	defer sess.Close()
	if sess.e != nil {
		_, err = sess.e.it.Redrive(ctx, runID, opts)
	} else {
		var arg []byte
		if arg, err = interpreter.RedriveArg(ctx, sess.store, opts); err == nil {
			sctx, stopWatch := sess.watchWriter(ctx)
			err = sess.c.Redrive(sctx, runID, arg)
			stopWatch()
			if err != nil && !isRedriveRefusal(err) {
				return sess.remoteError(sctx, what, err)
			}
		}
	}
	if err != nil {
		return redriveError(what, err)
	}
	if err := sess.Close(); err != nil {
		return err
	}
	return done()
}

// redriveHTTP redrives through the live writer's HTTP API, sending a new
// definition inline (errInlineRefused when the server takes none).
func redriveHTTP(ctx context.Context, a *apiWriter, runID string, opts interpreter.RedriveOptions) error {
	var err error
	if opts.Skip != "" {
		var out []byte
		if out, err = json.Marshal(opts.Output); err != nil {
			return failf(exitUsage, "--output: %v", err)
		}
		_, err = a.c.Skip(ctx, runID, opts.Skip, out)
	} else {
		req := client.RetryRequest{}
		if opts.Definition != nil {
			req.YAML = string(opts.Definition.Main.Source)
		}
		_, err = a.c.Retry(ctx, runID, req)
	}
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Status == http.StatusForbidden && ce.Code == "inline_disabled":
		return errInlineRefused
	case errors.As(err, &ce) && (ce.Code == "not_redrivable" || ce.Code == "incompatible_definition" || ce.Status == http.StatusNotFound):
		return failf(exitFailed, "%s", ce.Message)
	case err != nil:
		return a.apiError("redrive run "+runID, err)
	}
	return nil
}

func isRedriveRefusal(err error) bool {
	return errors.Is(err, runtime.ErrNotRedrivable) || errors.Is(err, runtime.ErrRunNotFound)
}

// redriveError turns a refused or failed redrive into the command's
// failure; an incompatible definition lists its differences, one a line.
func redriveError(what string, err error) error {
	var ie *interpreter.IncompatibleError
	switch {
	case errors.As(err, &ie):
		return failf(exitFailed, "%s: the run cannot continue on the new definition:\n  %s", what, strings.Join(ie.Differences, "\n  "))
	case errors.Is(err, runtime.ErrRunNotFound):
		return failf(exitFailed, "%s: no such run (a finished run is kept for the writer's retention)", what)
	case errors.Is(err, dsl.ErrInputInvalid), errors.Is(err, interpreter.ErrInputTooLarge):
		return failf(exitUsage, "%s: --output: %v", what, err)
	}
	return failf(exitFailed, "%s: %v", what, err)
}

// bulkFlags are a bulk command's settings.
type bulkFlags struct {
	action, requestID string
	yes, asJSON       bool
	redrive           interpreter.RedriveOptions
	payload           []byte
}

func addBulkFlags(cmd *cobra.Command, f *runFilter, requestID *string, yes *bool, verb string) {
	f.addFlags(cmd, verb)
	cmd.Flags().StringVar(requestID, "request-id", "", "name the bulk request, to finish an interrupted one: no run is acted on twice (default a new id)")
	cmd.Flags().BoolVar(yes, "yes", false, "act on the selected runs (without it: a dry run that prints them)")
}

// bulkLine is a bulk item as --json prints it.
type bulkLine struct {
	RequestID string `json:"request_id,omitempty"`
	RunID     string `json:"run"`
	Outcome   string `json:"outcome"`
	Detail    string `json:"detail,omitempty"`
}

// runBulk applies a bulk action to the runs filter selects, through the
// live writer (HTTP API or inbox) or as the store's writer.
func runBulk(cmd *cobra.Command, store string, filter *runFilter, b bulkFlags) error {
	if !filter.given() {
		return failf(exitUsage, "give a RUN, or filters (--workflow, --status, --label, --after) to act on the runs they select")
	}
	opts, err := filter.options()
	if err != nil {
		return err
	}
	if b.requestID != "" && !b.yes {
		return failf(exitUsage, "--request-id names a request that acts: give --yes too")
	}
	if b.requestID == "" {
		b.requestID = ulid.Make().String()
	} else if err := remote.ValidateBulkID(b.requestID); err != nil {
		return failf(exitUsage, "--request-id: %v", err)
	}
	out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if b.yes {
		fmt.Fprintf(errOut, "request %s: run the same command with --request-id %s to finish it if it is interrupted\n", b.requestID, b.requestID)
	}
	var items []remote.BulkItem
	print := func(it remote.BulkItem) {
		items = append(items, it)
		printBulkItem(out, b, it)
	}
	ctx := context.WithoutCancel(cmd.Context())
	if a := liveAPI(ctx, store); a != nil {
		err := bulkHTTP(ctx, a, opts, b, print)
		if !errors.Is(err, errInlineRefused) {
			return bulkDone(errOut, b, items, err)
		}
	}
	sess, err := openSession(ctx, store, engineOptions{name: "bulk " + b.action, brief: true})
	if err != nil {
		return err
	}
	defer sess.Close()
	req := remote.BulkRequest{ID: b.requestID, Action: b.action, Filter: opts, Payload: b.payload, DryRun: !b.yes}
	if b.action == "redrive" {
		if req.Arg, err = interpreter.RedriveArg(ctx, sess.store, b.redrive); err != nil {
			return failf(exitFailed, "pinning --definition: %v", err)
		}
	}
	if sess.e != nil {
		req.OnRun = print
		_, err = remote.Bulk(ctx, sess.e.rt, req)
	} else {
		sctx, stopWatch := sess.watchWriter(ctx)
		var got []remote.BulkItem
		got, err = sess.c.Bulk(sctx, req)
		stopWatch()
		for _, it := range got {
			print(it)
		}
		if err != nil {
			return bulkDone(errOut, b, items, sess.remoteError(sctx, "bulk "+b.action, err))
		}
	}
	if err == nil {
		err = sess.Close()
	}
	return bulkDone(errOut, b, items, err)
}

// bulkHTTP sends the bulk request to the live writer's HTTP API.
func bulkHTTP(ctx context.Context, a *apiWriter, o runstate.ListOptions, b bulkFlags, print func(remote.BulkItem)) error {
	f := client.ListOptions{Cursor: o.After, Labels: o.Labels}
	for _, st := range o.States {
		f.Status = append(f.Status, st.String())
	}
	action := b.action
	if action == "redrive" {
		action = "retry"
	}
	req := client.BulkRequest{Action: action, RequestID: b.requestID, Apply: b.yes, Payload: b.payload}
	if b.redrive.Definition != nil {
		req.YAML = string(b.redrive.Definition.Main.Source)
	}
	res, err := a.c.Bulk(ctx, f, req)
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Status == http.StatusForbidden && ce.Code == "inline_disabled":
		return errInlineRefused
	case err != nil:
		return a.apiError("bulk "+b.action, err)
	}
	for _, r := range res.Runs {
		print(remote.BulkItem{RunID: r.RunID, Outcome: r.Outcome, Detail: r.Detail})
	}
	return nil
}

func printBulkItem(w io.Writer, b bulkFlags, it remote.BulkItem) {
	if b.asJSON {
		line := bulkLine{RunID: it.RunID, Outcome: it.Outcome, Detail: it.Detail}
		if b.yes {
			line.RequestID = b.requestID
		}
		_ = json.NewEncoder(w).Encode(line)
		return
	}
	if it.Detail != "" {
		fmt.Fprintf(w, "%s %s (%s)\n", it.RunID, it.Outcome, it.Detail)
		return
	}
	fmt.Fprintf(w, "%s %s\n", it.RunID, it.Outcome)
}

// bulkDone reports the end of a bulk request: the summary on stderr, exit
// 1 when it was cut short or skipped a run.
func bulkDone(w io.Writer, b bulkFlags, items []remote.BulkItem, err error) error {
	skipped := 0
	for _, it := range items {
		if it.Outcome == "skipped" {
			skipped++
		}
	}
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) {
			err = failf(exitFailed, "bulk %s: %v", b.action, err)
		}
		return failf(exitFailed, "%v\nrequest %s stopped after %s; run the same command with --request-id %s to finish it", err, b.requestID, plural(len(items), "run"), b.requestID)
	}
	if !b.yes {
		fmt.Fprintf(w, "dry run: %s selected; nothing changed (add --yes to %s them)\n", plural(len(items), "run"), b.action)
		return nil
	}
	if skipped > 0 {
		return failf(exitFailed, "request %s: %d of %s skipped", b.requestID, skipped, plural(len(items), "run"))
	}
	fmt.Fprintf(w, "request %s: %s done\n", b.requestID, plural(len(items), "run"))
	return nil
}

// newSignalsClearCmd is 'signals clear KEY'.
func newSignalsClearCmd() *cobra.Command {
	var (
		store  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "clear KEY",
		Short: "Discard the signal buffered under KEY",
		Long: `signals clear discards the signal buffered under KEY (sent while no step
waited on it), so the next step that waits on KEY does not receive it. It
prints whether one was buffered; none is not an error. Like signal, it goes
to the live writer (its HTTP API, or the store's inbox, which applies it
exactly once) or opens the store as its writer for the moment it takes.

--json prints {"key": KEY, "cleared": true|false}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := signal.CheckKey(key); err != nil {
				return failf(exitUsage, "KEY: %v", err)
			}
			ctx := context.WithoutCancel(cmd.Context())
			var cleared bool
			if a := liveAPI(ctx, store); a != nil {
				res, err := a.c.ClearSignal(ctx, key)
				if err != nil {
					return a.apiError(fmt.Sprintf("clear signal %q", key), err)
				}
				cleared = res.Cleared
			} else {
				sess, err := openSession(ctx, store, engineOptions{name: "signals clear", brief: true})
				if err != nil {
					return err
				}
				defer sess.Close()
				if sess.e != nil {
					cleared, err = sess.e.rt.ClearSignal(ctx, key)
				} else {
					sctx, stopWatch := sess.watchWriter(ctx)
					cleared, err = sess.c.ClearSignal(sctx, key)
					stopWatch()
					if err != nil {
						return sess.remoteError(sctx, fmt.Sprintf("clear signal %q", key), err)
					}
				}
				if err != nil {
					return failf(exitFailed, "clear signal %q: %v", key, err)
				}
				if err := sess.Close(); err != nil {
					return err
				}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"key": key, "cleared": cleared})
			}
			if cleared {
				fmt.Fprintf(cmd.OutOrStdout(), "signal %q cleared\n", key)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "no signal was buffered under %q\n", key)
			}
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"key": KEY, "cleared": true|false}`)
	return cmd
}
