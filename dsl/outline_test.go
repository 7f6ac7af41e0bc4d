package dsl

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestTokenEnd(t *testing.T) {
	src := "a: plain value # c\n" + // 1
		"b: \"quo\\\"ted\" # c\n" + // 2
		"c: 'it''s'\n" + // 3
		"d: {x: 1, y: [2, 3]}\n" + // 4
		"e: |\n  text\n" + // 5, 6
		"f:\n  - item\n" + // 7, 8
		"g: {k: v, l: w}\n" + // 9
		"é: ünï\n" + // 10
		"h: \"two\n  lines\"\n" // 11, 12
	li := newLineIndex([]byte(src))
	for _, c := range []struct{ at, want Pos }{
		{Pos{1, 1}, Pos{1, 2}},   // key a
		{Pos{1, 4}, Pos{1, 15}},  // plain value, comment excluded
		{Pos{2, 4}, Pos{2, 14}},  // double quoted with escape
		{Pos{3, 4}, Pos{3, 11}},  // single quoted with ''
		{Pos{4, 4}, Pos{4, 21}},  // flow map
		{Pos{4, 8}, Pos{4, 9}},   // a scalar inside a flow map
		{Pos{5, 4}, Pos{5, 5}},   // block indicator
		{Pos{8, 3}, Pos{8, 4}},   // "- "
		{Pos{8, 5}, Pos{8, 9}},   // item
		{Pos{9, 8}, Pos{9, 9}},   // v stops at the comma
		{Pos{10, 4}, Pos{10, 7}}, // code points, not bytes
		{Pos{11, 4}, Pos{12, 9}}, // a quoted scalar over two lines
		{Pos{99, 1}, Pos{99, 1}}, // past the end
	} {
		if got := li.tokenEnd(c.at); got != c.want {
			t.Errorf("tokenEnd(%v) = %v; want %v", c.at, got, c.want)
		}
	}
}

// TestColumnsAreCodePoints checks the unit the package promises against
// go.yaml.in/yaml/v3's columns.
func TestColumnsAreCodePoints(t *testing.T) {
	src := "tqw: v1\nname: t\nsteps:\n  - {id: a, description: ééé, bogus: 1}\n"
	_, diags, _ := Parse("c.yaml", []byte(src))
	if len(diags) != 1 || diags[0].Line != 4 || diags[0].Col != 31 || diags[0].EndLine != 4 || diags[0].EndCol != 36 {
		t.Fatalf("want one diagnostic at 4:31-4:36; got %+v", diags)
	}
}

func TestParseOutline(t *testing.T) {
	src := `tqw: v1
name: o
secrets: [TOKEN]
vars: {count: 0}
steps:
  - id: fetch
    action: http
    with: {url: "https://x/${ secrets.TOKEN }", headers: {A: "${ steps.fetch.output.status }"}}
    set: {status: "${ output.status }"}
    next: decide
  - id: decide
    switch:
      - when: steps.fetch.output.status == 200 && steps["decide"] != nil
        next: done
    catch:
      - next: fetch
        set: {reason: x}
    on_timeout: done
  - id: done
    succeed: "${ vars.status }"
`
	o := ParseOutline([]byte(src))
	if o == nil {
		t.Fatal("no outline")
	}
	if len(o.Steps) != 3 || o.Steps[0].ID != "fetch" || o.Steps[0].Kind != KindAction || o.Steps[0].Action != "http" || o.Steps[1].Kind != KindSwitch || o.Steps[2].Kind != KindSucceed {
		t.Fatalf("steps: %+v", o.Steps)
	}
	if s := o.Steps[0]; s.IDSpan != (Span{Pos{6, 9}, Pos{6, 14}}) || s.Span != (Span{Pos{6, 5}, Pos{10, 17}}) {
		t.Errorf("fetch spans: %+v", s)
	}
	if s := o.Steps[2]; s.Span.End != (Pos{20, 32}) {
		t.Errorf("done ends at %v", s.Span.End)
	}
	type ref struct {
		name, ctx string
		at        Pos
		step      int
	}
	var got []ref
	for _, r := range o.StepRefs {
		got = append(got, ref{r.Name, r.Context, r.Span.Start, r.Step})
	}
	want := []ref{
		{"decide", refNext, Pos{10, 11}, 0},
		{"done", refOnTimeout, Pos{18, 17}, 1},
		{"done", refSwitch, Pos{14, 15}, 1},
		{"fetch", refCatch, Pos{16, 15}, 1},
		{"fetch", refExpression, Pos{8, 72}, 0},
		{"fetch", refExpression, Pos{13, 21}, 1},
		{"decide", refExpression, Pos{13, 58}, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("refs %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ref %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	if len(o.Secrets) != 1 || o.Secrets[0].Span != (Span{Pos{3, 11}, Pos{3, 16}}) || len(o.SecretRefs) != 1 || o.SecretRefs[0].Span.Start != (Pos{8, 39}) {
		t.Errorf("secrets %+v refs %+v", o.Secrets, o.SecretRefs)
	}
	var vars []string
	for _, v := range o.Vars {
		vars = append(vars, v.Name)
	}
	if len(vars) != 3 || vars[0] != "count" || vars[1] != "status" || vars[2] != "reason" {
		t.Errorf("vars %v", vars)
	}
	if ParseOutline([]byte("a: [")) != nil {
		t.Error("broken YAML has an outline")
	}
}

// nestedOutlineSrc has every kind of nested block of LANG.md's syntax.
const nestedOutlineSrc = `tqw: v1
name: order
timeout: 2h
steps:
  - id: checks
    parallel:
      branches:
        credit:
          - id: score
            action: http
            with: {url: "https://x/${ input.id }"}
            next: judge
          - id: judge
            succeed: "${ steps.score.output.body }"
        fraud: [{id: screen, action: sleep, with: {duration: 1s}}]
      fail: all
  - id: charge_all
    map:
      items: "${ input.orders }"
      concurrency: 4
      steps:
        - id: charge
          action: http
          with: {url: "https://pay/${ item.id }"}
    next: done
  - id: done
    succeed: "${ steps.checks.output.credit }"
on_error:
  - id: refund
    action: http
    with: {url: "https://refund"}
finally:
  - id: notify
    action: sleep
    with: {duration: 1s}
`

func TestParseOutlineNestedBlocks(t *testing.T) {
	o := ParseOutline([]byte(nestedOutlineSrc))
	if o == nil {
		t.Fatal("no outline")
	}
	type step struct {
		id, block string
		kind      Kind
		parent    string
		span      Span
	}
	var got []step
	for _, s := range o.Steps {
		p := ""
		if s.Parent >= 0 {
			p = o.Steps[s.Parent].ID
		}
		got = append(got, step{s.ID, s.Block, s.Kind, p, s.Span})
	}
	want := []step{
		{"checks", "", "parallel", "", Span{Pos{5, 5}, Pos{16, 16}}},
		{"score", "checks/credit", KindAction, "checks", Span{Pos{9, 13}, Pos{12, 24}}},
		{"judge", "checks/credit", KindSucceed, "checks", Span{Pos{13, 13}, Pos{14, 52}}},
		{"screen", "checks/fraud", KindAction, "checks", Span{Pos{15, 17}, Pos{15, 66}}},
		{"charge_all", "", "map", "", Span{Pos{17, 5}, Pos{25, 15}}},
		{"charge", "charge_all/item", KindAction, "charge_all", Span{Pos{22, 11}, Pos{24, 50}}},
		{"done", "", KindSucceed, "", Span{Pos{26, 5}, Pos{27, 47}}},
		{"refund", "on_error", KindAction, "", Span{Pos{29, 5}, Pos{31, 34}}},
		{"notify", "finally", KindAction, "", Span{Pos{33, 5}, Pos{35, 25}}},
	}
	if len(got) != len(want) {
		t.Fatalf("steps %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	if b := o.Steps[0].Branches; len(b) != 2 || b[0] != "credit" || b[1] != "fraud" {
		t.Errorf("branches %v", b)
	}
	var blocks []string
	for _, b := range o.Blocks {
		blocks = append(blocks, fmt.Sprintf("%s %s %d %v-%v", b.Path, b.Name, b.Parent, b.Key.Start, b.Span.End))
	}
	wantBlocks := []string{
		"checks/credit credit 0 8:9-14:52",
		"checks/fraud fraud 0 15:9-15:66",
		"charge_all/item steps 4 21:7-24:50",
		"on_error on_error -1 28:1-31:34",
		"finally finally -1 32:1-35:25",
	}
	if !slices.Equal(blocks, wantBlocks) {
		t.Errorf("blocks\n%s\nwant\n%s", strings.Join(blocks, "\n"), strings.Join(wantBlocks, "\n"))
	}
	// References inside nested blocks belong to the innermost step.
	var refs []string
	for _, r := range o.StepRefs {
		refs = append(refs, fmt.Sprintf("%s %s %v %s", r.Name, r.Context, r.Span.Start, o.Steps[r.Step].ID))
	}
	wantRefs := []string{
		"judge next 12:19 score",
		"done next 25:11 charge_all",
		"score expression 14:32 judge",
		"checks expression 27:24 done",
	}
	if !slices.Equal(refs, wantRefs) {
		t.Errorf("refs\n%s\nwant\n%s", strings.Join(refs, "\n"), strings.Join(wantRefs, "\n"))
	}
	for _, c := range []struct {
		at   Pos
		want string
	}{{Pos{10, 20}, "score"}, {Pos{16, 9}, "checks"}, {Pos{20, 9}, "charge_all"}, {Pos{23, 11}, "charge"}, {Pos{28, 1}, ""}, {Pos{30, 9}, "refund"}} {
		got := ""
		if i := o.StepAt(c.at); i >= 0 {
			got = o.Steps[i].ID
		}
		if got != c.want {
			t.Errorf("StepAt(%v) = %q; want %q", c.at, got, c.want)
		}
	}
}
