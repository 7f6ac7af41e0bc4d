package dsl

import (
	"strings"
	"testing"
)

// labels: loads in file order with compiled templates; EvalLabels gives
// strings only, and names the label and its position otherwise.
func TestLabelsLoadAndEvaluate(t *testing.T) {
	src := "tqw: v1\nname: t\nlabels:\n  team: payments\n  order: \"o-${ input.n }\"\n  raw: \"${ input.v }\"\n  id: \"${ run.id }\"\nsteps: [{id: a, succeed: 1}]\n"
	w, diags, err := Parse("l.yaml", []byte(src))
	if err != nil || len(diags) > 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	var keys []string
	for _, l := range w.Labels {
		keys = append(keys, l.Key)
	}
	if strings.Join(keys, " ") != "team order raw id" {
		t.Fatalf("labels %v; want them in file order", keys)
	}
	got, err := w.EvalLabels(&Env{Input: map[string]any{"n": int64(7), "v": "x"}, Run: RunInfo{ID: "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got["team"] != "payments" || got["order"] != "o-7" || got["raw"] != "x" || got["id"] != "r1" || len(got) != 4 {
		t.Fatalf("labels %v", got)
	}
	for v, want := range map[any]string{int64(3): "label raw at 6:8: the template evaluates to the number 3, not a string",
		true: "the boolean true", nil: "evaluates to null"} {
		if _, err := w.EvalLabels(&Env{Input: map[string]any{"n": 1, "v": v}}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("input.v = %v: %v; want %q", v, err, want)
		}
	}
}

// More labels than a run carries (with the workflow's name) is refused
// at load, at the map.
func TestTooManyLabels(t *testing.T) {
	var b strings.Builder
	b.WriteString("tqw: v1\nname: t\nlabels:\n")
	for i := range 16 {
		b.WriteString("  k" + string(rune('a'+i)) + ": v\n")
	}
	b.WriteString("steps: [{id: a, succeed: 1}]\n")
	_, diags, err := Parse("l.yaml", []byte(b.String()))
	if err == nil || len(diags) != 1 || diags[0].Code != CodeLabelInvalid || diags[0].Line != 4 {
		t.Fatalf("16 labels: %v %s; want one labels.invalid at line 4", err, diags)
	}
}

// outputs: compiles with output readable, and records its step reads.
func TestOutputsLoad(t *testing.T) {
	src := "tqw: v1\nname: t\noutputs: {a: \"${ steps.s.output }\", b: \"${ output }\"}\nsteps: [{id: s, succeed: 1}]\n"
	w, diags, err := Parse("o.yaml", []byte(src))
	if err != nil || len(diags) > 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	v, err := w.Outputs.Eval(&Env{Output: "o", Steps: map[string]StepState{"s": {Output: int64(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := v.(map[string]any)
	if m["a"] != int64(1) || m["b"] != "o" {
		t.Fatalf("outputs %v", v)
	}
}
