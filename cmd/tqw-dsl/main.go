// Command tqw-dsl works with tqw workflow files: validate them, print the
// schema editors use, draw their step graph and evaluate expressions.
// Each subcommand lives in its own file and registers itself in init.
//
// Exit codes: 0 success, 1 an invalid workflow or a failed evaluation,
// 2 a usage error.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0
	exitInvalid = 1
	exitUsage   = 2
)

// exitError carries an exit code out of a command; its message, when not
// empty, has not been printed yet.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// failf returns an error that makes tqw-dsl exit with code after printing msg.
func failf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// commands are the constructors of every subcommand, added by init
// functions in the subcommands' files.
var commands []func() *cobra.Command

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "tqw-dsl",
		Short:         "Validate, inspect and run tqw workflow files",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return failf(exitUsage, "%v\nrun '%s --help' for usage", err, c.CommandPath())
	})
	for _, newCmd := range commands {
		root.AddCommand(newCmd())
	}
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
