package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/server/client"
)

func init() { commands = append(commands, newCancelCmd) }

func newCancelCmd() *cobra.Command {
	var (
		store, requestID string
		filter           runFilter
		yes, asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "cancel RUN | cancel [FILTERS] [--yes]",
		Short: "Cancel an active run",
		Long: `cancel ends an active run as cancelled: a pending, scheduled or waiting step
is removed at once. An unknown or finished run is an error (exit 1) and
writes nothing.

When a worker (or run) holds the store, the cancellation is sent to it
through the store's inbox and cancel waits for its answer (up to 2m;
without one it exits 1 and the command stays in the inbox until a writer
applies it). Otherwise cancel opens the store as its writer for the moment
it takes.

It prints "run RUN cancelled", or with --json {"run": RUN, "cancelled": true};
a step that was running is stopped, and the run ends as cancelled once it
has. A run whose workflow has on_error or finally runs them first (the
step it was at is discarded) and ends as cancelled when they end; a
cancel while they run ends it at once.
` + bulkHelp,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return runBulk(cmd, store, &filter, bulkFlags{action: "cancel", requestID: requestID, yes: yes, asJSON: asJSON})
			}
			if filter.given() {
				return failf(exitUsage, "give RUN or filters (--workflow, --status, --label, --after), not both")
			}
			runID := args[0]
			ctx := context.WithoutCancel(cmd.Context())
			if a := liveAPI(ctx, store); a != nil {
				return cancelHTTP(cmd, a, runID, asJSON)
			}
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
			sess, err := openSession(ctx, store, engineOptions{name: "cancel", brief: true})
			if err != nil {
				return err
			}
			defer sess.Close()
			var ok bool
			if sess.e != nil {
				ok, err = sess.e.rt.Cancel(ctx, runID)
			} else {
				sctx, stopWatch := sess.watchWriter(ctx)
				ok, err = sess.c.Cancel(sctx, runID)
				stopWatch()
				if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
					return sess.remoteError(sctx, "cancel run "+runID, err)
				}
			}
			if errors.Is(err, runtime.ErrRunNotFound) {
				ok, err = false, nil // it ended and was forgotten meanwhile
			}
			if err != nil {
				return failf(exitFailed, "cancel run %s: %v", runID, err)
			}
			if err := sess.Close(); err != nil {
				return err
			}
			if !ok {
				return failf(exitFailed, "run %s ended before it could be cancelled", runID)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"run": runID, "cancelled": true})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelled\n", runID)
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"run": RUN, "cancelled": true} (bulk: one object per run)`)
	addBulkFlags(cmd, &filter, &requestID, &yes, "cancel")
	return cmd
}

// cancelHTTP cancels the run through the live writer's HTTP API.
func cancelHTTP(cmd *cobra.Command, a *apiWriter, runID string, asJSON bool) error {
	_, err := a.c.Cancel(context.WithoutCancel(cmd.Context()), runID)
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Status == http.StatusNotFound:
		return failf(exitFailed, "%s", ce.Message)
	case errors.As(err, &ce) && ce.Code == "already_ended":
		return failf(exitFailed, "%s", ce.Message)
	case errors.As(err, &ce) && ce.Status == http.StatusBadRequest:
		return failf(exitUsage, "%s", ce.Message)
	case err != nil:
		return a.apiError("cancel run "+runID, err)
	}
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"run": runID, "cancelled": true})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "run %s cancelled\n", runID)
	return nil
}
