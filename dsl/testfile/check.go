package testfile

import (
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
	step := func(at dsl.Pos, id, what string) *dsl.Step {
		s := w.Step(id)
		if s == nil {
			p.errorf(at, CodeUnknownStep, "%s names step %q, which %s does not have (steps: %s)", what, id, f.Workflow, stepList(w))
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

func kindOf(s *dsl.Step) string {
	if s.Kind == dsl.KindAction {
		return s.Action
	}
	return string(s.Kind)
}

func stepList(w *dsl.Workflow) string {
	var ids []string
	for _, s := range w.Steps {
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
