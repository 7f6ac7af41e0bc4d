package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/wire"
)

func init() { commands = append(commands, newDiffCmd) }

func newDiffCmd() *cobra.Command {
	var (
		store  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "diff RUN_A RUN_B",
		Short: "Show where two runs took a different path or produced a different output (read-only)",
		Long: `diff compares the steps two runs finished, in order, and prints the first
place where they took a different path (a step only one of them ran) or a
step produced a different output or outcome, then each later difference.
Steps are aligned by their longest common sequence, so a step inserted or
skipped is one difference. A fork is compared with its origin as if it had
run from the start: the steps it inherited are its origin's. Times and
attempts are not compared.

It prints "no difference" when there is none. --json prints
{"run_a", "run_b", "differences": [...]}. It only reads the store. Exit
codes: 0 compared (whether or not they differ), 1 a run is unknown or the
store failed, 2 a usage error.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, id := range args {
				if err := runstate.ValidateRunID(id); err != nil {
					return failf(exitUsage, "%v", err)
				}
			}
			ctx := context.WithoutCancel(cmd.Context())
			v, err := openView(ctx, store)
			if err != nil {
				return err
			}
			defer v.Close()
			var hist [2][]interpreter.HistoryRecord
			var sts [2]runstate.Status
			for i, id := range args {
				if sts[i], err = v.status(ctx, store, id); err != nil {
					return err
				}
				if hist[i], err = interpreter.History(ctx, v.records(), v.store, id); err != nil {
					return failf(exitFailed, "history of run %s: %v", id, err)
				}
			}
			// A fork of the other run inherits its origin's steps.
			for i := range 2 {
				o := 1 - i
				if sts[i].Headers[interpreter.HeaderForkFrom] != args[o] {
					continue
				}
				fp, err := interpreter.FindForkPoint(ctx, v.store, args[o], hist[o], sts[i].Headers[interpreter.HeaderForkAt])
				if err == nil {
					hist[i] = append(append([]interpreter.HistoryRecord{}, hist[o][:fp.Index]...), hist[i]...)
				}
			}
			d := server.RunDiffOf(args[0], args[1], interpreter.DiffHistories(hist[0], hist[1]))
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(d)
			}
			printDiff(cmd.OutOrStdout(), d)
			return nil
		},
	}
	addStoreFlag(cmd, &store)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the differences as JSON")
	return cmd
}

func printDiff(w io.Writer, d wire.RunDiff) {
	if len(d.Differences) == 0 {
		fmt.Fprintf(w, "no difference between %s and %s\n", d.RunA, d.RunB)
		return
	}
	for i, x := range d.Differences {
		prefix := "  "
		if i == 0 {
			prefix = "first "
		}
		switch x.Kind {
		case "only_a":
			fmt.Fprintf(w, "%sstep %d %s: only %s ran it (%s)\n", prefix, x.Index, x.Step, d.RunA, x.A.Outcome)
		case "only_b":
			fmt.Fprintf(w, "%sstep %d %s: only %s ran it (%s)\n", prefix, x.Index, x.Step, d.RunB, x.B.Outcome)
		case "outcome":
			fmt.Fprintf(w, "%sstep %d %s: outcome %s\n", prefix, x.Index, x.Step, sides(describeOutcome(x.A), describeOutcome(x.B)))
		case "output":
			fmt.Fprintf(w, "%sstep %d %s: output %s\n", prefix, x.Index, x.Step, sides(compact(x.A.Output), compact(x.B.Output)))
		}
	}
}

func sides(a, b string) string { return a + "  ≠  " + b }

func describeOutcome(s *wire.DiffSide) string {
	out := s.Outcome
	if s.ErrorType != "" {
		out += " (" + s.ErrorType + ")"
	}
	if s.Next != "" {
		out += " → " + s.Next
	}
	return out
}

// compact renders an output on one line, cut at 200 bytes.
func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}
