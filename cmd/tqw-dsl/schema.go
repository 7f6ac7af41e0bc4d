package main

import (
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/schemas"
)

func init() { commands = append(commands, newSchemaCmd) }

func newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the workflow JSON Schema (for editors and CI)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(schemas.WorkflowJSON)
			return err
		},
	}
}
