package testfile

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tqw-dsl/tqw/dsl"
)

// Actions the interpreter runs itself, on the virtual clock: a mock of
// them would not be called.
var clockActions = []string{"sleep", "wait_signal"}

// MockedAction is the action a mock of step s replaces ("" when s runs none
// a mock can answer: not an action or foreach step, or sleep and wait_signal).
func MockedAction(s *dsl.Step) string {
	a := s.Action
	if s.Kind == dsl.KindForeach && s.Foreach != nil {
		a = s.Foreach.Action
	}
	if s.Kind != dsl.KindAction && s.Kind != dsl.KindForeach || slices.Contains(clockActions, a) {
		return ""
	}
	return a
}

// Check reports what f says of w that names no step of w, or a step of
// the wrong kind. A mock or a signal may name a step of a workflow w
// calls (called), since it answers every run of the case.
func Check(f *File, w *dsl.Workflow, called ...*dsl.Workflow) dsl.Diagnostics {
	p := &parser{name: f.Path}
	anyStep := func(at dsl.Pos, id, what string) *dsl.Step {
		for _, c := range called {
			if s := c.Step(id); s != nil && w.Step(id) == nil {
				return s
			}
		}
		s := w.Step(id)
		if s == nil {
			p.errorf(at, CodeUnknownStep, "%s names step %q, which neither %s nor a workflow it calls has (steps: %s)", what, id, f.Workflow, stepList(w))
		}
		return s
	}
	// step resolves an expectation's step: one of the run's own (top
	// level, on_error, finally), as a branch's or a map item's steps are
	// in the history of a child run.
	step := func(at dsl.Pos, id, what string) *dsl.Step {
		s := w.Step(id)
		switch {
		case s == nil:
			p.errorf(at, CodeUnknownStep, "%s names step %q, which %s does not have (steps: %s)", what, id, f.Workflow, stepList(w))
		case s.Block != nil && s.Block.Owner != nil:
			p.errorf(at, CodeStepKind, "%s names step %q, which runs in block %s, a child run of step %s: %s lists the run's own steps (name %s instead)", what, id, s.Block.Path, s.Block.Owner.ID, what, topOwner(s).ID)
		}
		return s
	}
	for _, c := range f.Cases {
		for _, m := range c.Mocks {
			if m.Step == "" {
				if slices.Contains(clockActions, m.Action) {
					p.errorf(m.Pos, CodeStepKind, "%s runs on the virtual clock and cannot be mocked", m.Action)
				}
				continue
			}
			if s := anyStep(m.Pos, m.Step, "the mock"); s != nil && MockedAction(s) == "" {
				p.errorf(m.Pos, CodeStepKind, "step %q is a %s step that runs no action a mock can answer (sleep and wait_signal run on the virtual clock)", m.Step, kindOf(s))
			}
		}
		for _, sg := range c.Signals {
			if sg.Step == "" {
				continue
			}
			if s := anyStep(sg.Pos, sg.Step, "the signal"); s != nil && (s.Kind != dsl.KindAction || s.Action != "wait_signal") {
				p.errorf(sg.Pos, CodeStepKind, "step %q does not wait for a signal (it is a %s step)", sg.Step, kindOf(s))
			}
		}
		for _, id := range c.Expect.Path {
			step(c.Expect.Pos["path"], id, "expect.path")
		}
		for _, id := range sortedKeys(c.Expect.Attempts) {
			step(c.Expect.Pos["attempts"], id, "expect.attempts")
		}
	}
	return p.diags
}

// topOwner is the step of the run's own blocks that s runs under.
func topOwner(s *dsl.Step) *dsl.Step {
	for s.Block != nil && s.Block.Owner != nil {
		s = s.Block.Owner
	}
	return s
}

func kindOf(s *dsl.Step) string {
	if s.Kind == dsl.KindAction {
		return s.Action
	}
	return string(s.Kind)
}

// blockSteps lists w's steps in every block, the top level first.
func blockSteps(w *dsl.Workflow) []*dsl.Step {
	var out []*dsl.Step
	for _, b := range w.Blocks() {
		out = append(out, b.Steps...)
	}
	return out
}

func stepList(w *dsl.Workflow) string {
	var ids []string
	for _, s := range blockSteps(w) {
		ids = append(ids, s.ID)
	}
	if len(ids) > 20 {
		ids = append(ids[:20], "...")
	}
	return strings.Join(ids, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// maxCalled bounds the called workflows Load reads for Check.
const maxCalled = 100

// Load parses a test file's bytes and checks it against the workflow it
// tests, read from disk with opts (and the workflows that one calls,
// relative to their callers): the diagnostics of tqw-dsl validate and
// the language server. A workflow that cannot be loaded is one
// test.workflow diagnostic at the test file's workflow key (1:1 when it
// has none), whatever the workflow's own diagnostics say (validate
// reports those on the workflow). Cost: one read of each workflow file.
func Load(name string, src []byte, opts dsl.Options) (*File, dsl.Diagnostics) {
	f, diags := Parse(name, src)
	if f == nil {
		return nil, diags
	}
	w, _, err := dsl.LoadWith(f.Workflow, opts)
	if err != nil {
		at := f.WorkflowPos
		return nil, append(diags, dsl.Diagnostic{File: name, Line: at.Line, Col: at.Col, EndLine: at.Line, EndCol: at.Col + 1,
			Severity: dsl.SeverityError, Code: CodeWorkflow, Message: fmt.Sprintf("the workflow under test does not load: %s", firstProblem(err))})
	}
	var called []*dsl.Workflow
	seen := map[string]bool{filepath.Clean(f.Workflow): true}
	queue := []struct {
		path string
		w    *dsl.Workflow
	}{{f.Workflow, w}}
	for len(queue) > 0 && len(seen) <= maxCalled {
		cur := queue[0]
		queue = queue[1:]
		for _, s := range blockSteps(cur.w) {
			if s.Call == nil {
				continue
			}
			p := s.Call.Workflow
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(cur.path), p)
			}
			p = filepath.Clean(p)
			if seen[p] {
				continue
			}
			seen[p] = true
			if cw, _, err := dsl.LoadWith(p, opts); err == nil {
				called = append(called, cw)
				queue = append(queue, struct {
					path string
					w    *dsl.Workflow
				}{p, cw})
			}
		}
	}
	if d := Check(f, w, called...); len(d) > 0 {
		return nil, append(diags, d...)
	}
	return f, diags
}

func firstProblem(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
