// Command multi_step runs a four-step run that carries a payload from step
// to step: parse an order, price it, add tax, and finish with a summary.
//
//	go run ./examples/multi_step --order "3 chair, 1 table"
//
// Each step returns ContinueNow with the next step's payload (here a JSON
// document); the runtime commits that payload with the step's
// acknowledgement, so the payload is the durable channel between steps. The
// last step returns Succeed. The default store is in memory; pass --store
// file://DIR to keep the records on disk.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
)

func main() { exampleenv.Main("multi_step", run) }

// prices in cents; the order may name only these.
var prices = map[string]int{"chair": 4000, "table": 12500, "lamp": 2999}

// taxPercent is applied to the subtotal.
const taxPercent = 20

// order is the payload every step reads and the next step receives.
type order struct {
	Text     string `json:"text"`
	Items    []item `json:"items,omitempty"`
	Subtotal int    `json:"subtotal_cents,omitempty"`
	Tax      int    `json:"tax_cents,omitempty"`
}

type item struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
	Cents int    `json:"cents,omitempty"`
}

// steps is the workflow: step n of a run is steps[n].
var steps = []func(o *order) error{parse, price, tax}

// runner decodes the payload, applies the step and continues, until the
// last step, which succeeds with a summary.
type runner struct{ out io.Writer }

func (r runner) RunStep(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	var o order
	if s.Number == 0 {
		o.Text = string(s.Payload)
	} else if err := json.Unmarshal(s.Payload, &o); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("step %d payload: %w", s.Number, err))
	}
	if s.Number == len(steps) {
		summary := fmt.Sprintf("%d items, total %s", len(o.Items), cents(o.Subtotal+o.Tax))
		fmt.Fprintf(r.out, "step %d: summary: %s\n", s.Number, summary)
		return runtime.Succeed([]byte(summary)), nil
	}
	if err := steps[s.Number](&o); err != nil {
		// A bad order is the runner's verdict, not an infrastructure error.
		return runtime.Fail(err.Error()), nil
	}
	next, err := json.Marshal(o)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	fmt.Fprintf(r.out, "step %d: %s\n", s.Number, next)
	return runtime.ContinueNow(next), nil
}

func parse(o *order) error {
	for part := range strings.SplitSeq(o.Text, ",") {
		f := strings.Fields(part)
		if len(f) != 2 {
			return fmt.Errorf("order line %q: want COUNT NAME", strings.TrimSpace(part))
		}
		n, err := strconv.Atoi(f[0])
		if err != nil || n < 1 {
			return fmt.Errorf("order line %q: count must be a positive number", strings.TrimSpace(part))
		}
		o.Items = append(o.Items, item{Name: f[1], Count: n})
	}
	return nil
}

func price(o *order) error {
	for i, it := range o.Items {
		p, ok := prices[it.Name]
		if !ok {
			return fmt.Errorf("no price for %q", it.Name)
		}
		o.Items[i].Cents = p * it.Count
		o.Subtotal += o.Items[i].Cents
	}
	return nil
}

func tax(o *order) error {
	o.Tax = o.Subtotal * taxPercent / 100
	return nil
}

func cents(c int) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// run parses args, runs one order through the steps and prints the outcome.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("multi_step", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://multi_step", "store URL (mem://NAME, file://DIR, s3://...)")
	text := fs.String("order", "3 chair, 1 table, 2 lamp", "the order: COUNT NAME, comma-separated (chair, table, lamp)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	out = exampleenv.SyncWriter(out)
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelWarn})
	if err != nil {
		return err
	}
	defer env.Close()

	rt, err := env.NewRuntime(runner{out: out}, "", runtime.Options{})
	if err != nil {
		return err
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))

	sub, err := rt.Submit(ctx, runtime.RunSpec{Input: []byte(*text)})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(out, "submitted run %s\n", sub.RunID)
	o, err := env.Await(ctx)
	if err != nil {
		return errors.New("interrupted before the run ended")
	}
	fmt.Fprintf(out, "run %s %s after step %d: %s%s\n", o.RunID, o.Status, o.Step, o.Result, o.Error)
	return exampleenv.Succeeded(o)
}
