package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/runtime"
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
It opens the store as its writer, so stop a worker on the same store first.
Exit codes: 0 submitted, 2 a usage, validation or input error (nothing is
written then), 1 the store failed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, _, err := readJSONArg("--input", input, map[string]any{})
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
				if err := runtime.ValidateRunID(runID); err != nil {
					return failf(exitUsage, "--run-id: %v", err)
				}
			}
			ctx := context.WithoutCancel(cmd.Context())
			e, err := openEngine(ctx, store, engineOptions{noShell: noShell})
			if err != nil {
				return err
			}
			defer e.Close()
			sub, err := e.it.Submit(ctx, w, in, runID)
			if err != nil {
				return submitError(runID, err)
			}
			if err := e.Close(); err != nil {
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
