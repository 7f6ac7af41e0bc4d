// Command tqw-dsl works with tqw workflow files and the stores that run
// them. On files: validate, schema (for editors), graph, eval and lsp (a
// language server). On a store: run (works the store until the run ends;
// started again after a crash, it resumes the run it left), worker,
// submit, signal, cancel; the read-only status, list, history and
// signals; and store check/truncate for a damaged write-ahead log. A
// command that changes a store either holds its writer lease or sends the
// change to the live writer through the store inbox.
// Each subcommand lives in its own file and registers itself in init.
//
// Exit codes and environment variables: see exitCodes and envVars in
// help.go, printed by 'tqw-dsl --help' and tabled in README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// exitError carries an exit code out of a command; its message, when not
// empty, has not been printed yet.
type exitError struct {
	code  int
	msg   string
	cause error // for errors.Is, when a caller branches on why
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) Unwrap() error { return e.cause }

// failf returns an error that makes tqw-dsl exit with code after printing msg.
func failf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// commands are the constructors of every subcommand, added by init
// functions in the subcommands' files.
var commands []func() *cobra.Command

func newRoot() *cobra.Command {
	bi, ok := debug.ReadBuildInfo()
	root := &cobra.Command{
		Use:   "tqw-dsl",
		Short: "Validate, inspect and run tqw workflow files",
		Long: `tqw-dsl validates, inspects and runs tqw workflow files (docs/DSL.md). A run
lives in a store (--store, else TQW_STORE, else ` + defaultStore + `): every finished
step is durable there, so 'tqw-dsl run' again or 'tqw-dsl worker' finishes
what a crash interrupted. status, list, history and store check only read
the store: they create and change nothing.`,
		Version:       versionText(bi, ok),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Record where --store came from, for errors that name the store.
		PersistentPreRun: func(c *cobra.Command, _ []string) {
			if f := c.Flags().Lookup("store"); f != nil {
				c.SetContext(context.WithValue(c.Context(), storeSourceKey{}, storeSource(f.Changed)))
			}
		},
	}
	// Declared here so cobra does not add -v, which stays free.
	root.Flags().Bool("version", false, "print the version, the VCS revision it was built from and the Go toolchain")
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return failf(exitUsage, "%v\nrun '%s --help' for usage", err, c.CommandPath())
	})
	for _, newCmd := range commands {
		root.AddCommand(newCmd())
	}
	installHelp(root)
	return root
}

// run executes tqw-dsl with args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "tqw-dsl:", ee.msg)
		}
		return ee.code
	}
	// Everything else comes from cobra: unknown commands, wrong argument counts.
	fmt.Fprintln(stderr, "tqw-dsl:", err)
	fmt.Fprintln(stderr, "run 'tqw-dsl --help' for usage")
	return exitUsage
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
