package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func init() { commands = append(commands, newCancelCmd) }

func newCancelCmd() *cobra.Command {
	var store string
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel an active run",
		Long: `cancel ends an active run as cancelled: a pending, scheduled or waiting step
is removed at once. An unknown or finished run is an error (exit 1) and
writes nothing. It opens the store as its writer.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			runID := args[0]
			ctx := context.WithoutCancel(cmd.Context())
			v, err := openView(ctx, store)
			if err != nil {
				return err
			}
			st, err := v.status(ctx, store, runID)
			_ = v.Close()
			if err != nil {
				return err
			}
			if st.State.Terminal() {
				return failf(exitFailed, "run %s already ended: %s", runID, st.State)
			}
			e, err := openEngine(ctx, store, engineOptions{})
			if err != nil {
				return err
			}
			defer e.Close()
			ok, err := e.rt.Cancel(ctx, runID)
			if err != nil {
				return failf(exitFailed, "cancel run %s: %v", runID, err)
			}
			if err := e.Close(); err != nil {
				return err
			}
			if !ok {
				return failf(exitFailed, "run %s ended before it could be cancelled", runID)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelled\n", runID)
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	return cmd
}
