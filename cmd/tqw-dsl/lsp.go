package main

import (
	"context"
	"errors"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl/duration"
	"github.com/tqw-dsl/tqw/dsl/lsp"
)

func init() { commands = append(commands, newLSPCmd) }

func newLSPCmd() *cobra.Command {
	var debounce, actionsFile string
	cmd := &cobra.Command{
		Use:   "lsp",
		Short: "Run the workflow language server on standard input and output",
		Long: `lsp speaks the Language Server Protocol over standard input and output,
for editors: the loader's diagnostics as you type, go to definition, find
references and rename for step ids, an outline, completion, hovers and quick
fixes. Workflows using a program's own actions are checked with its action
declarations (--actions FILE, else the nearest tqw-actions.json). --stdio is accepted for editors that pass it. Logs go to standard
error. It exits 0 after the client's shutdown and exit, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDebounce(debounce)
			if err != nil {
				return failf(exitUsage, "--debounce %q: %v", debounce, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM)
			defer stop()
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			err = lsp.Serve(ctx, cmd.InOrStdin(), cmd.OutOrStdout(), lsp.Options{Debounce: d, Logger: logger, LoadOptions: freshDecls(actionsFile, logger.Warn)})
			if err != nil && !errors.Is(err, context.Canceled) {
				return failf(exitInvalid, "%v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&debounce, "debounce", "150ms", "quiet time after a change before diagnostics are recomputed (0 for none)")
	cmd.Flags().StringVar(&actionsFile, "actions", "", "declarations of a program's own actions (default: the nearest tqw-actions.json of each workflow, read again as it changes)")
	cmd.Flags().Bool("stdio", true, "talk over standard input and output (the only transport)")
	return cmd
}

// parseDebounce reads --debounce: a duration, 0 meaning none.
func parseDebounce(s string) (time.Duration, error) {
	d, err := duration.Parse(s)
	if err != nil {
		return 0, err
	}
	if d == 0 {
		return -1, nil // lsp.Options: negative is no wait, zero the default
	}
	return d, nil
}
