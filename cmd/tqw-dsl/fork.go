package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

func init() { commands = append(commands, newForkCmd) }

func newForkCmd() *cobra.Command {
	var (
		store, at, defFile, input, runID string
		asJSON, noShell                  bool
	)
	cmd := &cobra.Command{
		Use:   "fork RUN --at STEP",
		Short: "Start a new run from a step of an earlier run, with its variables and outputs",
		Long: `fork submits a new run that starts at STEP with the variables and step
outputs exactly as they were just before RUN first reached STEP, and prints
its id. RUN may be active or finished (sealed runs too). The new run is
linked to RUN: status, list and the API show "forked from RUN at STEP".

--definition FILE runs the fork on another revision of the workflow (it must
have STEP); --input JSON (or @FILE) replaces the input. An llm step whose
request is unchanged reuses the answer RUN paid for (history shows "answer
reused, saved ..."); a changed one asks the model.

A run recorded by a tqw before forks existed cannot be forked (its history
lacks the variables); fork says so and writes nothing. --run-id names the
fork: repeating the command with the same id (after it was killed, say) is
a no-op once the fork exists.

When a worker (or run) holds the store, the fork is sent to it through the
store's inbox; otherwise fork opens the store as its writer for the moment
it takes. Exit codes: 0 forked, 2 refused or a usage error (nothing is
written), 1 the store failed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			origin := args[0]
			if err := runstate.ValidateRunID(origin); err != nil {
				return failf(exitUsage, "%v", err)
			}
			if at == "" {
				return failf(exitUsage, "fork needs --at STEP: the step the new run starts at")
			}
			if runID != "" {
				if err := runstate.ValidateRunID(runID); err != nil {
					return failf(exitUsage, "--run-id: %v", err)
				}
			}
			if err := refuseMem(store, "fork"); err != nil {
				return err
			}
			ctx := context.WithoutCancel(cmd.Context())
			v, err := openView(ctx, store)
			if err != nil {
				return err
			}
			defer v.Close()
			if runID != "" {
				// A repeat (after a kill, say) of a fork that exists.
				if st, err := v.insp.Status(ctx, runID); err == nil && st.Headers[interpreter.HeaderForkFrom] == origin && st.Headers[interpreter.HeaderForkAt] == at {
					return printFork(cmd, runID, false, origin, at, asJSON)
				}
			}
			fp, err := forkPointOf(ctx, v, store, origin, at)
			if err != nil {
				return err
			}
			opts := interpreter.ForkOptions{RunID: runID, Reader: v.r}
			if defFile != "" {
				if opts.Workflow, err = loadWorkflow(cmd, defFile, noShell); err != nil {
					return err
				}
			}
			if input != "" {
				if opts.Input, _, err = readInputArg(input); err != nil {
					return err
				}
			}
			// Refused before the store is opened for writing.
			if err := v.defs.CheckFork(ctx, origin, fp, opts); err != nil {
				return forkError(origin, err)
			}
			_ = v.Close()
			opts.Reader = nil // checked; v is closed
			s, err := openSession(ctx, store, engineOptions{noShell: noShell, name: "fork", brief: true})
			if err != nil {
				return err
			}
			defer s.Close()
			var defs *interpreter.View
			if s.e != nil {
				defs = s.e.it.View
			} else if defs, err = interpreter.NewView(s.store, builtin.New(builtin.Options{})); err != nil {
				return err
			}
			spec, err := defs.PrepareFork(ctx, origin, fp, opts)
			if err != nil {
				return forkError(origin, err)
			}
			var sub runtime.SubmitOutcome
			if s.e != nil {
				sub, err = s.e.rt.Submit(ctx, spec)
			} else {
				sctx, stopWatch := s.watchWriter(ctx)
				sub, err = s.c.Submit(sctx, spec)
				stopWatch()
				if errors.Is(err, remote.ErrNoAnswer) {
					return s.remoteError(sctx, "submitting the fork", err)
				}
			}
			if err != nil {
				return submitError(runID, err)
			}
			if err := s.Close(); err != nil {
				return err
			}
			return printFork(cmd, sub.RunID, sub.NewlySubmitted, origin, at, asJSON)
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&at, "at", "", "the step the fork starts at (required)")
	cmd.Flags().StringVar(&defFile, "definition", "", "run the fork on this workflow file instead of RUN's pinned definition")
	cmd.Flags().StringVar(&input, "input", "", "replace the input: JSON, or @FILE")
	cmd.Flags().StringVar(&runID, "run-id", "", "the fork's run id (default: a new ULID)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"run": ID, "new": BOOL, "forked_from": RUN, "at": STEP}`)
	cmd.Flags().BoolVar(&noShell, "no-shell", false, "refuse workflows that use the shell action")
	return cmd
}

// forkPointOf reads the history of origin (live or sealed) and finds its
// state before it first reached at.
func forkPointOf(ctx context.Context, v *view, url, origin, at string) (*interpreter.ForkPoint, error) {
	recs, err := interpreter.History(ctx, v.records(), v.store, origin)
	if err != nil {
		return nil, failf(exitFailed, "history of run %s: %v", origin, err)
	}
	if len(recs) == 0 {
		if _, err := v.status(ctx, url, origin); err != nil {
			return nil, err
		}
		return nil, failf(exitUsage, "run %s has no step in its history yet: nothing to fork from", origin)
	}
	fp, err := interpreter.FindForkPoint(ctx, v.store, origin, recs, at)
	if err != nil {
		return nil, forkError(origin, err)
	}
	return fp, nil
}

// forkError maps a refused fork to exit 2, a failed one to 1.
func forkError(origin string, err error) error {
	if errors.Is(err, interpreter.ErrNotForkable) || errors.Is(err, dsl.ErrInputInvalid) || errors.Is(err, runstate.ErrInvalidRunID) || errors.Is(err, interpreter.ErrRunIDReused) {
		return failf(exitUsage, "fork of run %s refused: %v", origin, err)
	}
	return failf(exitFailed, "fork of run %s: %v", origin, err)
}

func printFork(cmd *cobra.Command, runID string, isNew bool, origin, at string, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"run": runID, "new": isNew, "forked_from": origin, "at": at})
	}
	fmt.Fprintln(cmd.OutOrStdout(), runID)
	return nil
}
