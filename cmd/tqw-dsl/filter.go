package main

import (
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// runFilter is the selection of runs by list's flags, which the bulk
// forms of cancel, retry and signal take too.
type runFilter struct {
	status, workflow, after string
	labels                  []string
}

// addFlags adds --status, --workflow, --label and --after to cmd; verb
// says what the command does with the runs ("list", "cancel", ...).
func (f *runFilter) addFlags(cmd *cobra.Command, verb string) {
	cmd.Flags().StringVar(&f.status, "status", "", verb+" only runs in these states (comma-separated): pending, running, waiting, scheduled, cancelling, succeeded, failed, cancelled")
	cmd.Flags().StringVar(&f.workflow, "workflow", "", verb+" only runs of this workflow (through the workflow label's index)")
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, verb+" only runs carrying this label, as key=value (repeatable; through the first label's index)")
	cmd.Flags().StringVar(&f.after, "after", "", verb+" runs whose id sorts after this one (the last id of the previous page)")
}

// given reports whether any of the filter's flags is set.
func (f *runFilter) given() bool {
	return f.status != "" || f.workflow != "" || f.after != "" || len(f.labels) > 0
}

// options parses the flags into ListRuns's options (no limit), a usage
// error naming the flag when one is malformed.
func (f *runFilter) options() (runstate.ListOptions, error) {
	states, err := parseStates(f.status)
	if err != nil {
		return runstate.ListOptions{}, err
	}
	want, err := parseLabels(f.labels)
	if err != nil {
		return runstate.ListOptions{}, err
	}
	if f.workflow != "" {
		want[interpreter.LabelWorkflow] = f.workflow
	}
	if err := runstate.ValidateLabels(want); err != nil {
		return runstate.ListOptions{}, failf(exitUsage, "--label/--workflow: %v", err)
	}
	if f.after != "" {
		if err := runstate.ValidateRunID(f.after); err != nil {
			return runstate.ListOptions{}, failf(exitUsage, "--after: %v", err)
		}
	}
	return runstate.ListOptions{States: states, After: f.after, Labels: want}, nil
}
