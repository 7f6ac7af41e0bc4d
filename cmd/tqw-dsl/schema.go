package main

import (
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/schemas"
)

func init() { commands = append(commands, newSchemaCmd) }

func newSchemaCmd() *cobra.Command {
	var decls declLookup
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the workflow JSON Schema (for editors and CI)",
		Long: `schema prints the JSON Schema (2020-12) of workflow files. With action
declarations (--actions FILE, else the nearest tqw-actions.json in the
current folder or a parent) it adds a program's own actions: their names
and the schema of each one's with.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := decls.file("")
			if err != nil {
				return err
			}
			out := schemas.WorkflowJSON
			if f != nil && len(f.Actions) > 0 {
				if out, err = f.Schema(schemas.WorkflowJSON); err != nil {
					return failf(exitFailed, "%v", err)
				}
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	addActionsFlag(cmd, &decls)
	return cmd
}
