package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl"
)

func init() { commands = append(commands, newGraphCmd) }

func newGraphCmd() *cobra.Command {
	var format string
	var decls declLookup
	cmd := &cobra.Command{
		Use:   "graph FILE",
		Short: "Print a workflow's step graph as Mermaid or Graphviz DOT",
		Long: `graph prints the steps and every transition between them: next and
following-step edges, switch cases labelled with their condition (else for
the fallback), catch edges labelled with their error types and on_timeout
edges (dashed), and computed targets as a separate node. Nested blocks are
subgraphs: a parallel step forks into its branches and joins them, a map's
steps are marked with its concurrency, on_error is entered from failure and
finally from the end.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "mermaid" && format != "dot" {
				return failf(exitUsage, "--format %q: want mermaid or dot", format)
			}
			opts, err := decls.options(args[0])
			if err != nil {
				return err
			}
			w, diags, err := dsl.LoadWith(args[0], opts)
			if err != nil && !errors.Is(err, dsl.ErrInvalid) {
				return failf(exitUsage, "%v", err) // the file cannot be read
			}
			if err != nil {
				fmt.Fprint(cmd.ErrOrStderr(), diags.String())
				return failf(exitInvalid, "%v", err)
			}
			if format == "dot" {
				return w.WriteDOT(cmd.OutOrStdout())
			}
			return w.WriteMermaid(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&format, "format", "mermaid", "output format: mermaid or dot")
	addActionsFlag(cmd, &decls)
	return cmd
}
