package wftest

import (
	"context"
	"fmt"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Coverage is what a file's cases reached of the workflow under test: its
// steps in every block, and its branches (switch cases and their fallback, catch rules,
// on_timeout). A branch is known by its step, kind and target, so two
// branches of one step to the same target are reached together; a
// branch whose target is computed (next: "${ ... }") is not counted.
type Coverage struct {
	wf      *dsl.Workflow
	reached map[string]bool
	taken   map[branchKey]bool
}

// Branch is one way out of a step (dsl.Edge).
type Branch struct {
	Step string `json:"step"`
	To   string `json:"to"`
	// Kind is case, else, catch or timeout.
	Kind string `json:"kind"`
	// Label is the case's condition or the catch's error types.
	Label string `json:"label,omitempty"`
}

func (b Branch) String() string {
	switch b.Kind {
	case "case":
		return fmt.Sprintf("%s: switch case %s -> %s", b.Step, b.Label, b.To)
	case "else":
		return fmt.Sprintf("%s: switch else -> %s", b.Step, b.To)
	case "timeout":
		return fmt.Sprintf("%s: on_timeout -> %s", b.Step, b.To)
	}
	return fmt.Sprintf("%s: %s -> %s", b.Step, b.Label, b.To)
}

type branchKey struct{ step, kind, to string }

func newCoverage(w *dsl.Workflow) *Coverage {
	return &Coverage{wf: w, reached: map[string]bool{}, taken: map[branchKey]bool{}}
}

// branches lists the workflow's branches in step order.
func (c *Coverage) branches() []Branch {
	var out []Branch
	for _, e := range c.wf.Edges() {
		if e.To == "" {
			continue
		}
		b := Branch{Step: e.From, To: e.To, Label: e.Label}
		switch e.Kind {
		case dsl.EdgeCase:
			b.Kind = "case"
		case dsl.EdgeCatch:
			b.Kind = "catch"
		case dsl.EdgeTimeout:
			b.Kind = "timeout"
		case dsl.EdgeNext, dsl.EdgeFall:
			if e.Label != "else" {
				continue // a plain next is not a branch: reaching the step takes it
			}
			b.Kind = "else"
		default:
			continue
		}
		out = append(out, b)
	}
	return out
}

// steps lists the workflow's steps in every block (branches, map steps,
// on_error, finally), the top level first.
func (c *Coverage) steps() []*dsl.Step {
	var out []*dsl.Step
	for _, b := range c.wf.Blocks() {
		out = append(out, b.Steps...)
	}
	return out
}

// Unreached returns the ids of the steps no case reached, in block order
// (the top level first, then each block in file order).
func (c *Coverage) Unreached() []string {
	var out []string
	for _, s := range c.steps() {
		if !c.reached[s.ID] {
			out = append(out, s.ID)
		}
	}
	return out
}

// Untaken returns the branches no case took, in step order.
func (c *Coverage) Untaken() []Branch {
	var out []Branch
	for _, b := range c.branches() {
		if !c.taken[branchKey{b.Step, b.Kind, b.To}] {
			out = append(out, b)
		}
	}
	return out
}

// Counts returns how many steps and branches the workflow has and how
// many of each the cases reached.
func (c *Coverage) Counts() (steps, reached, branches, taken int) {
	steps = len(c.steps())
	reached = steps - len(c.Unreached())
	all := c.branches()
	return steps, reached, len(all), len(all) - len(c.Untaken())
}

// mark notes what one run of the workflow did.
func (c *Coverage) mark(hist []interpreter.HistoryRecord) {
	for _, h := range hist {
		c.reached[h.Step] = true
		if h.Next == "" {
			continue
		}
		switch h.Outcome {
		case interpreter.OutcomeOK:
			for _, k := range []string{"case", "else"} {
				c.taken[branchKey{h.Step, k, h.Next}] = true
			}
		case interpreter.OutcomeCaught:
			s := c.wf.Step(h.Step)
			if s != nil && s.OnTimeout == h.Next && h.Error != nil && (h.Error.Type == "timeout" || h.Error.Type == "signal.timeout") {
				c.taken[branchKey{h.Step, "timeout", h.Next}] = true
			} else {
				c.taken[branchKey{h.Step, "catch", h.Next}] = true
			}
		}
	}
}

// cover marks what every run of the workflow under test in the case's
// store did: the case's run, and the child runs that execute its blocks.
func (r *caseRun) cover(ctx context.Context, store objstore.Store, cov *Coverage) error {
	opts := runstate.ListOptions{Limit: 1000}
	for {
		page, err := r.rt.ListRuns(ctx, opts)
		if err != nil {
			return fmt.Errorf("list the case's runs: %w", err)
		}
		for _, st := range page {
			if st.Headers[interpreter.HeaderDefinition] != r.w.Main.Hash {
				continue
			}
			hist, err := interpreter.History(ctx, r.q, store, st.RunID)
			if err != nil {
				return fmt.Errorf("read the history of run %s: %w", st.RunID, err)
			}
			cov.mark(hist)
		}
		if len(page) < opts.Limit {
			return nil
		}
		opts.After = page[len(page)-1].RunID
	}
}
