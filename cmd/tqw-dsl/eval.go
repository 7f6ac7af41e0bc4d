package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/dsl"
)

func init() { commands = append(commands, newEvalCmd) }

// evalData is the shape of --data: one key per environment name.
type evalData struct {
	Input   any                             `json:"input"`
	Vars    map[string]any                  `json:"vars"`
	Steps   map[string]struct{ Output any } `json:"steps"`
	Output  any                             `json:"output"`
	Error   *dsl.ErrorInfo                  `json:"error"`
	Run     dsl.RunInfo                     `json:"run"`
	Item    any                             `json:"item"`
	Index   int                             `json:"index"`
	Secrets map[string]string               `json:"secrets"`
}

func newEvalCmd() *cobra.Command {
	var data, now string
	cmd := &cobra.Command{
		Use:   "eval EXPR",
		Short: "Evaluate an expression or template against sample data",
		Long: `eval evaluates EXPR against --data and prints the result as JSON. EXPR is an
expression (vars.amount > 100) or, when it contains ${ }, a template
("order ${ input.id }"). --data is a JSON object, or @FILE to read one,
with any of the keys input, vars, steps ({"id": {"output": ...}}), output,
error, run, item, index and secrets.`,
		Example: `  tqw-dsl eval 'vars.amount > 100' --data '{"vars": {"amount": 250}}'
  tqw-dsl eval 'order ${ input.id }' --data @sample.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw := []byte(data)
			if strings.HasPrefix(data, "@") {
				b, err := os.ReadFile(data[1:])
				if err != nil {
					return failf(exitUsage, "--data: %v", err)
				}
				raw = b
			}
			var d evalData
			if len(bytes.TrimSpace(raw)) > 0 {
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&d); err != nil {
					return failf(exitUsage, "--data: %v (want a JSON object with keys input, vars, steps, output, error, run, item, index, secrets)", err)
				}
			}
			clock := time.Now
			if now != "" {
				t, err := time.Parse(time.RFC3339, now)
				if err != nil {
					return failf(exitUsage, "--now: %v", err)
				}
				clock = func() time.Time { return t }
			}
			env := &dsl.Env{Input: d.Input, Vars: d.Vars, Output: d.Output, Error: d.Error, Run: d.Run,
				Item: d.Item, Index: d.Index, Secrets: d.Secrets, Now: clock, UUID: uuid.NewString}
			if d.Steps != nil {
				env.Steps = map[string]dsl.StepState{}
				ids := make([]string, 0, len(d.Steps))
				for id := range d.Steps {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				for _, id := range ids {
					env.Steps[id] = dsl.StepState{Output: d.Steps[id].Output}
				}
			}
			var v any
			var err error
			if strings.Contains(args[0], "${") {
				t, cerr := dsl.CompileTemplate(args[0])
				if cerr != nil {
					return failf(exitInvalid, "%v", cerr)
				}
				v, err = t.Eval(env)
			} else {
				e, cerr := dsl.CompileExpr(args[0])
				if cerr != nil {
					return failf(exitInvalid, "%v", cerr)
				}
				v, err = e.Eval(env)
			}
			if err != nil {
				return failf(exitInvalid, "%v", err)
			}
			if d, ok := v.(time.Duration); ok {
				v, _ = dsl.Stringify(d)
			}
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return failf(exitInvalid, "result %T cannot be printed as JSON: %v", v, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "sample data: a JSON object, or @FILE")
	cmd.Flags().StringVar(&now, "now", "", "the time now() returns (RFC 3339); default the wall clock")
	return cmd
}
