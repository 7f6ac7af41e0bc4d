package interpreter

import (
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"
)

const labelsYAML = `
tqw: v1
name: labelled
input: {type: object}
labels:
  team: payments
  order: "o-${ input.order }"
  who: "${ input.who }"
steps:
  - id: done
    succeed: ok
`

// The file's labels are evaluated at submit against the input and run,
// stored in the run label index (a listing by one finds the run), and a
// label given with the submission wins on its key.
func TestLabelsOfTheFileTagTheRun(t *testing.T) {
	e := newTestEnv(t)
	w := e.load(e.write("labels.yaml", labelsYAML))
	if _, err := e.it.Submit(e.ctx, w, map[string]any{"order": 7, "who": "ana"}, "r1", WithLabels(map[string]string{"who": "bob", "env": "test"})); err != nil {
		t.Fatal(err)
	}
	st, err := e.rt.Status(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"workflow": "labelled", "team": "payments", "order": "o-7", "who": "bob", "env": "test"}
	if len(st.Labels) != len(want) {
		t.Fatalf("labels %v; want %v", st.Labels, want)
	}
	for k, v := range want {
		if st.Labels[k] != v {
			t.Fatalf("labels %v; want %v", st.Labels, want)
		}
	}
	runs, err := e.rt.ListRuns(e.ctx, runstate.ListOptions{Labels: map[string]string{"order": "o-7"}})
	if err != nil || len(runs) != 1 || runs[0].RunID != "r1" {
		t.Fatalf("listing by order=o-7: %v %v; want r1", runs, err)
	}
}

// A label whose template gives no string, or a value the label rules
// refuse, refuses the submission naming the label, and writes nothing:
// no run, no definition.
func TestLabelsThatAreNotStringsRefuseTheSubmission(t *testing.T) {
	for name, c := range map[string]struct {
		input map[string]any
		want  string
	}{
		"number":   {map[string]any{"order": 1, "who": 7}, "label who at 7:8: the template evaluates to the number 7, not a string"},
		"null":     {map[string]any{"order": 1}, "label who at 7:8: the template evaluates to null"},
		"map":      {map[string]any{"order": 1, "who": map[string]any{"a": 1}}, "evaluates to a map"},
		"control":  {map[string]any{"order": 1, "who": "a\nb"}, "label who at 7:8: the value holds a control character"},
		"too long": {map[string]any{"order": 1, "who": strings.Repeat("x", 257)}, "want at most 256 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t)
			w := e.load(e.write("labels.yaml", labelsYAML))
			_, err := e.it.Submit(e.ctx, w, c.input, "r1")
			if !errors.Is(err, runstate.ErrInvalidLabel) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Submit: %v; want ErrInvalidLabel with %q", err, c.want)
			}
			if _, err := e.rt.Status(e.ctx, "r1"); err == nil {
				t.Fatal("a refused submission left a run")
			}
			if defs := e.objectKeys(defsPrefix); len(defs) != 0 {
				t.Fatalf("a refused submission pinned %v", defs)
			}
		})
	}
}

// More labels than a run carries, counting the file's and the
// submission's, refuse the submission too.
func TestLabelsOverTheBoundRefuseTheSubmission(t *testing.T) {
	e := newTestEnv(t)
	w := e.load(e.write("labels.yaml", labelsYAML))
	extra := map[string]string{}
	for _, k := range strings.Split("a b c d e f g h i j k l m", " ") {
		extra[k] = "v"
	}
	_, err := e.it.Submit(e.ctx, w, map[string]any{"order": 1, "who": "x"}, "r1", WithLabels(extra))
	if !errors.Is(err, runstate.ErrInvalidLabel) || !strings.Contains(err.Error(), "17 labels; at most 16") {
		t.Fatalf("Submit with 17 labels: %v", err)
	}
}

// A child run carries its own workflow's labels, not its parent's.
func TestChildRunCarriesItsOwnLabels(t *testing.T) {
	e := newTestEnv(t)
	e.write("child.yaml", `
tqw: v1
name: kid
input: {type: object}
labels: {part: "p-${ input.n }"}
steps:
  - id: done
    succeed: "${ input.n }"
`)
	parent := e.write("parent.yaml", `
tqw: v1
name: parent
labels: {team: payments}
steps:
  - id: call
    call: {workflow: ./child.yaml, input: {n: "3"}}
`)
	wantSucceeded(t, e.run(parent, map[string]any{}, "p1"), `"3"`)
	runs, err := e.rt.ListRuns(e.ctx, runstate.ListOptions{Labels: map[string]string{"workflow": "kid"}})
	if err != nil || len(runs) != 1 {
		t.Fatalf("child runs: %v %v", runs, err)
	}
	if l := runs[0].Labels; l["part"] != "p-3" || l["team"] != "" {
		t.Fatalf("child labels %v; want part=p-3 and no team", l)
	}
}

// outputs is the result of a run that succeeds, whichever way it does:
// at the end of the steps or at a succeed step (whose value is output);
// it reads steps, vars and input.
func TestOutputsAreTheResult(t *testing.T) {
	e := newTestEnv(t)
	const head = `
tqw: v1
name: outs
input: {type: object}
vars: {n: 2}
outputs:
  n: "${ vars.n }"
  in: "${ input.x }"
  echo: "${ steps.echo.output.stdout }"
  last: "${ output }"
steps:
  - id: echo
    action: shell
    with: {command: "printf hi"}
    set: {n: "${ vars.n + 1 }"}
`
	wantSucceeded(t, e.run(e.write("end.yaml", head), map[string]any{"x": 1}, "o1"),
		`{"echo":"hi","in":1,"last":{"exit_code":0,"stderr":"","stderr_truncated":false,"stdout":"hi","stdout_truncated":false},"n":3}`)
	wantSucceeded(t, e.run(e.write("succeed.yaml", head+`
  - id: done
    succeed: "finished ${ vars.n }"
`), map[string]any{"x": 2}, "o2"), `{"echo":"hi","in":2,"last":"finished 3","n":3}`)
}

// An outputs expression that fails fails the run with an expression
// error naming outputs; a failed run has no outputs.
func TestOutputsThatFailFailTheRun(t *testing.T) {
	e := newTestEnv(t)
	o := e.run(e.write("bad.yaml", `
tqw: v1
name: bad
outputs: {x: "${ fromJSON('not json') }"}
steps:
  - id: done
    succeed: ok
`), map[string]any{}, "b1")
	wantFailedWith(t, o, "step done: expression: outputs: ")
	h := e.wantHistory("b1", "done:failed")
	if h[0].Error == nil || !strings.HasPrefix(h[0].Error.Message, "outputs: ") {
		t.Fatalf("history error %+v; want the outputs expression", h[0].Error)
	}
}
