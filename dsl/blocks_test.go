package dsl

import (
	"slices"
	"testing"
)

const blocksSrc = `tqw: v1
name: blocks
finally:
  - {id: fin, succeed: 1}
steps:
  - id: both
    parallel:
      fail: all
      branches:
        left:
          - {id: l1, set: {x: 1}}
          - {id: l2, succeed: "${ vars.x }"}
        right:
          - id: each
            map:
              items: [1, 2, 3]
              tolerated_failures: "50%"
              steps:
                - {id: m1, set: {y: "${ item + index }"}}
                - {id: m2, succeed: "${ vars.y }"}
  - id: after
    succeed: "${ steps.both.output }"
on_error:
  - {id: oops, succeed: 2}
`

func TestBlocks(t *testing.T) {
	w, diags, err := Parse("blocks.yaml", []byte(blocksSrc))
	if err != nil || len(diags) > 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	var paths []string
	for _, b := range w.Blocks() {
		paths = append(paths, b.Path)
	}
	if want := []string{"", "finally", "both/left", "both/right", "each/item", "on_error"}; !slices.Equal(paths, want) {
		t.Errorf("Blocks() = %q; want %q (top level first, then in file order)", paths, want)
	}
	if len(w.Steps) != 2 || w.Steps[0].ID != "both" || w.Block("").Steps[1].ID != "after" {
		t.Errorf("top-level steps: %v", w.Steps)
	}
	m2 := w.Step("m2")
	if m2 == nil || m2.Block.Path != "each/item" || m2.Index != 1 || m2.Block.Owner != w.Step("each") {
		t.Fatalf("Step(m2) = %+v", m2)
	}
	if f := w.Following(w.Step("m1")); f != m2 {
		t.Errorf("Following(m1) = %v; want m2", f)
	}
	if f := w.Following(m2); f != nil {
		t.Errorf("Following(m2) = %v; want nil at the end of its block", f)
	}
	if i, ok := w.Index("l2"); !ok || i != 1 {
		t.Errorf("Index(l2) = %d, %v; want its position in its block", i, ok)
	}
	p := w.Step("both").Parallel
	if p.FailFast || len(p.Branches) != 2 || p.Branches[0].Name != "left" || p.Branches[1].Block != w.Block("both/right") {
		t.Errorf("parallel = %+v", p)
	}
	mp := w.Step("each").Map
	if mp.Concurrency != 1 || mp.MaxFailures(3) != 1 || mp.MaxFailures(10) != 5 || mp.Block != w.Block("each/item") {
		t.Errorf("map = %+v, MaxFailures(3) = %d", mp, mp.MaxFailures(3))
	}
	if w.OnError != w.Block("on_error") || w.Finally.Steps[0].ID != "fin" || w.OnError.Owner != nil {
		t.Errorf("on_error %+v finally %+v", w.OnError, w.Finally)
	}
	var ends []string
	for _, e := range w.Edges() {
		if e.Kind == EdgeEnd {
			ends = append(ends, e.From)
		}
	}
	// l1 falls to l2, in its block.
	for _, e := range w.Edges() {
		if e.From == "l1" && (e.To != "l2" || e.Kind != EdgeFall) {
			t.Errorf("edge from l1: %+v", e)
		}
	}
	if !slices.Equal(ends, []string{"each"}) {
		t.Errorf("end edges from %v; want [each], the last step of branch right", ends)
	}
}

func TestMapToleranceCount(t *testing.T) {
	w, diags, err := Parse("m.yaml", []byte(`tqw: v1
name: m
steps:
  - id: each
    map: {items: "${ input.xs }", concurrency: 8, tolerated_failures: 2, steps: [{id: one, succeed: "${ item }"}]}
`))
	if err != nil || len(diags) > 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	if m := w.Step("each").Map; m.MaxFailures(1000) != 2 || m.Concurrency != 8 {
		t.Errorf("map = %+v", m)
	}
}
