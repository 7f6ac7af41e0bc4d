package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/remote"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/server/client"
)

func init() { commands = append(commands, newSubmitCmd) }

func newSubmitCmd() *cobra.Command {
	var (
		store, input, runID string
		asJSON, noShell     bool
	)
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a run without working it; a worker runs it",
		Long: `submit validates FILE and the input, pins the file in the store and submits a
run, then prints its id. 'tqw-dsl worker' (or 'tqw-dsl run') runs it.

When a worker (or run) holds the store, the run is sent to it through the
store's inbox and submit waits for its answer (up to 2m); otherwise submit
opens the store as its writer for the moment it takes.

A mem:// store is refused (exit 2): it lives only in this process, so the
run would vanish when submit exits.

Exit codes: 0 submitted, 2 a usage, validation or input error (nothing is
written then), 1 the store failed or the live writer did not answer (the
command stays in the inbox and is applied when a writer drains it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseMem(store, "submit"); err != nil {
				return err
			}
			in, rawInput, err := readInputArg(input)
			if err != nil {
				return err
			}
			w, err := loadWorkflow(cmd, args[0], noShell)
			if err != nil {
				return err
			}
			if err := checkInput(w, in); err != nil {
				return err
			}
			if runID != "" {
				if err := runstate.ValidateRunID(runID); err != nil {
					return failf(exitUsage, "--run-id: %v", err)
				}
			}
			ctx := context.WithoutCancel(cmd.Context())
			if a := liveAPI(ctx, store); a != nil && !callsOthers(w) {
				// A serve without --allow-inline refuses the file's text;
				// this process holds the store's credentials, so it sends
				// the run through the store's inbox instead.
				if err := submitHTTP(cmd, a, w, rawInput, runID, asJSON); !errors.Is(err, errInlineRefused) {
					return err
				}
			}
			s, err := openSession(ctx, store, engineOptions{noShell: noShell, name: "submit", brief: true})
			if err != nil {
				return err
			}
			defer s.Close()
			var sub runtime.SubmitOutcome
			if s.e != nil {
				sub, err = s.e.it.Submit(ctx, w, in, runID)
			} else {
				var v *view
				if v, err = openView(ctx, store); err != nil {
					return err
				}
				sctx, stopWatch := s.watchWriter(ctx)
				sub, err = submitRemote(sctx, s, v, w, in, runID)
				stopWatch()
				_ = v.Close()
				if errors.Is(err, remote.ErrNoAnswer) {
					return s.remoteError(sctx, "submitting the run", err)
				}
			}
			if err != nil {
				return submitError(runID, err)
			}
			if err := s.Close(); err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"run": sub.RunID, "new": sub.NewlySubmitted})
			}
			fmt.Fprintln(cmd.OutOrStdout(), sub.RunID)
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().StringVar(&input, "input", "", "run input: JSON, or @FILE (default {})")
	cmd.Flags().StringVar(&runID, "run-id", "", "run id (default: a new ULID)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {\"run\": ID, \"new\": BOOL}")
	cmd.Flags().BoolVar(&noShell, "no-shell", false, "refuse workflows that use the shell action")
	return cmd
}

// submitRemote pins w in the store and sends the run to the live writer;
// v refuses the id of a finished run still retained first. Its errors go
// through submitError, as the writer's own.
func submitRemote(ctx context.Context, s *session, v *view, w *interpreter.Workflow, input any, runID string, opts ...interpreter.SubmitOption) (runtime.SubmitOutcome, error) {
	spec, err := interpreter.PrepareRun(ctx, s.store, v.r, w, input, runID, opts...)
	if err != nil {
		return runtime.SubmitOutcome{}, err
	}
	sub, err := s.c.Submit(ctx, spec)
	if err != nil && !errors.Is(err, runtime.ErrInputMismatch) && !errors.Is(err, runstate.ErrInvalidRunID) {
		return sub, fmt.Errorf("sent to %s: %w", s.holder, err)
	}
	return sub, err
}

// callsOthers reports whether w's file calls other workflow files, which
// only the store path pins from this machine's folder.
func callsOthers(w *interpreter.Workflow) bool {
	for _, b := range w.Main.Blocks() {
		for _, s := range b.Steps {
			if s.Call != nil {
				return true
			}
		}
	}
	return false
}

// errInlineRefused is submitHTTP's error when the server does not take
// workflows sent inline (serve without --allow-inline).
var errInlineRefused = errors.New("the server refuses inline workflows")

// submitHTTP submits the run through the live writer's HTTP API, sending
// the file's text, which the server validates again and pins.
func submitHTTP(cmd *cobra.Command, a *apiWriter, w *interpreter.Workflow, input []byte, runID string, asJSON bool) error {
	sub, err := a.c.Submit(context.WithoutCancel(cmd.Context()), client.SubmitRequest{YAML: string(w.Main.Source), Input: input, RunID: runID})
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Status == http.StatusForbidden && ce.Code == "inline_disabled":
		return errInlineRefused
	case errors.As(err, &ce) && ce.Status == http.StatusConflict:
		return failf(exitUsage, "%s", ce.Message)
	case err != nil:
		return a.apiError("submitting the run", err)
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"run": sub.RunID, "new": sub.New})
	}
	fmt.Fprintln(cmd.OutOrStdout(), sub.RunID)
	return nil
}
