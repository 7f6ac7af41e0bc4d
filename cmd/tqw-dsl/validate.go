package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl"
)

func init() { commands = append(commands, newValidateCmd) }

// fileReport is one file's result in --format json.
type fileReport struct {
	File        string          `json:"file"`
	Valid       bool            `json:"valid"`
	Hash        string          `json:"hash,omitempty"`
	Diagnostics dsl.Diagnostics `json:"diagnostics"`
}

func newValidateCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check workflow files and print every diagnostic",
		Long: `validate loads each file, checks it against the schema and the language's
rules, and prints every problem as file:line:col: error|warning: message [code],
with a hint line where one helps. Exit code 0 means every file is valid
(warnings allowed), 1 that one is not, 2 a usage error.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return failf(exitUsage, "--format %q: want text or json", format)
			}
			out := cmd.OutOrStdout()
			var reports []fileReport
			invalid := 0
			for _, path := range args {
				w, diags, err := dsl.Load(path)
				if err != nil && diags == nil {
					diags = dsl.Diagnostics{{File: path, Line: 1, Col: 1, Severity: dsl.SeverityError, Code: dsl.CodeFileRead, Message: err.Error()}}
				}
				r := fileReport{File: path, Valid: w != nil, Diagnostics: diags}
				if r.Diagnostics == nil {
					r.Diagnostics = dsl.Diagnostics{}
				}
				if w != nil {
					r.Hash = w.Hash
				} else {
					invalid++
				}
				reports = append(reports, r)
				if format == "text" {
					fmt.Fprint(out, diags.String())
					if w != nil {
						fmt.Fprintf(out, "%s: valid (%s, %s)\n", path, plural(len(w.Steps), "step"), plural(len(diags), "warning"))
					}
				}
			}
			if format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"valid": invalid == 0, "files": reports}); err != nil {
					return err
				}
			}
			if invalid > 0 {
				return failf(exitInvalid, "%d of %d files invalid", invalid, len(args))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return cmd
}
