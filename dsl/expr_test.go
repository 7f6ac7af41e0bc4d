package dsl

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func mustTemplate(t *testing.T, s string) *Template {
	t.Helper()
	tp, err := CompileTemplate(s)
	if err != nil {
		t.Fatalf("CompileTemplate(%q): %v", s, err)
	}
	return tp
}

func TestTemplateEval(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	env := &Env{
		Input:   map[string]any{"id": "A-1", "n": 3, "tags": []any{"x", "y"}, "nothing": nil},
		Vars:    map[string]any{"amount": 150.5},
		Steps:   map[string]StepState{"fetch": {Output: map[string]any{"status": 200}}},
		Run:     RunInfo{ID: "r1", Workflow: "wf", Step: "s", Attempt: 2},
		Secrets: map[string]string{"T": "tok"},
		Now:     func() time.Time { return now },
		UUID:    func() string { return "u-1" },
	}
	cases := []struct {
		in   string
		want any
	}{
		{"plain", "plain"},
		{"${ input.n }", 3},
		{"${input.n+1}", 4},
		{"  ${ input.tags }  ", `  ["x","y"]  `},
		{"${ input.nothing }", nil},
		{"n=${ input.n }", "n=3"},
		{"${ input.id }/${ vars.amount }", "A-1/150.5"},
		{"tags ${ input.tags }", `tags ["x","y"]`},
		{"[${ input.nothing }]", "[]"},
		{"${ {a: input.n} }", map[string]any{"a": 3}},
		{"x${ {'a': '}'}.a }y", "x}y"},
		{"$${ literal }", "${ literal }"},
		{"${ run.id }:${ run.attempt }", "r1:2"},
		{"${ steps.fetch.output.status == 200 }", true},
		{"${ secrets.T }", "tok"},
		{"${ now() }", now},
		{"at ${ now() }", "at 2026-01-02T03:04:05Z"},
		{"${ uuid() }", "u-1"},
		{"${ duration('1d2h') }", 26 * time.Hour},
		{"wait ${ duration('1d2h') }", "wait 1d2h0m0s"},
	}
	for _, c := range cases {
		got, err := mustTemplate(t, c.in).Eval(env)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q = %#v; want %#v", c.in, got, c.want)
		}
	}
}

func TestTemplateNestedAndStatic(t *testing.T) {
	src := "tqw: v1\nname: t\nsteps:\n  - id: a\n    succeed: {static: [1, two], dyn: {list: [\"${ input.x }\", 2], s: \"v=${ input.x }\"}}\n"
	w, _, err := Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	tp := w.Steps[0].Succeed
	if _, ok := tp.Static(); ok {
		t.Fatal("a template with expressions reports Static")
	}
	got, err := tp.Eval(&Env{Input: map[string]any{"x": 7}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"static": []any{int64(1), "two"}, "dyn": map[string]any{"list": []any{7, int64(2)}, "s": "v=7"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	if n := len(tp.Exprs()); n != 2 {
		t.Errorf("Exprs() has %d expressions; want 2", n)
	}
	lit := mustTemplate(t, "no expressions")
	if v, ok := lit.Static(); !ok || v != "no expressions" {
		t.Errorf("Static() = %v, %v", v, ok)
	}
}

func TestEvalErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"${ now() }", "Env.Now is not set"},
		{"${ uuid() }", "Env.UUID is not set"},
		{"${ input.a.b }", "cannot fetch b"},
		{"x ${ duration('bad') }", "duration"},
	} {
		_, err := mustTemplate(t, c.src).Eval(&Env{Input: map[string]any{}})
		if !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v; want ErrEval containing %q", c.src, err, c.want)
		}
		var ee *evalError
		if !errors.As(err, &ee) || ee.Source == "" {
			t.Errorf("%q: not an *evalError with its source: %v", c.src, err)
		}
	}
	e, err := CompileExpr("input.n > 1")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.EvalBool(&Env{Input: map[string]any{"n": 2}}); err != nil || !ok {
		t.Errorf("EvalBool = %v, %v", ok, err)
	}
	e, _ = CompileExpr("input.n")
	if _, err := e.EvalBool(&Env{Input: map[string]any{"n": 2}}); !errors.Is(err, ErrEval) {
		t.Errorf("EvalBool of a number: %v; want ErrEval", err)
	}
	if _, err := CompileExpr("input.n >"); err == nil {
		t.Error("CompileExpr accepted a syntax error")
	}
	if _, err := CompileTemplate("${ input.n "); err == nil {
		t.Error("CompileTemplate accepted an unterminated ${")
	}
}

func TestErrorEnvInCatch(t *testing.T) {
	src := `tqw: v1
name: t
steps:
  - id: a
    action: sleep
    with: {duration: 1s}
    catch:
      - on: [timeout]
        when: error.status == 504 && output == nil
        set: {why: "${ error.type }: ${ error.message }"}
        next: b
  - id: b
    fail: "${ vars.why }"
`
	w, diags, err := Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, diags)
	}
	r := w.Steps[0].Catch[0]
	env := &Env{Error: &ErrorInfo{Type: "timeout", Message: "slow", Status: 504}}
	if ok, err := r.When.EvalBool(env); err != nil || !ok {
		t.Fatalf("when = %v, %v", ok, err)
	}
	v, err := r.Set[0].Value.Eval(env)
	if err != nil || v != "timeout: slow" || r.Set[0].Name != "why" {
		t.Fatalf("set = %v, %v", v, err)
	}
	if !r.MatchesType("timeout") || r.MatchesType("shell.exit") {
		t.Error("MatchesType disagrees with on: [timeout]")
	}
}

func TestStringify(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{nil, ""}, {"s", "s"}, {true, "true"}, {3, "3"}, {int64(-4), "-4"}, {uint64(5), "5"},
		{2.5, "2.5"}, {1e21, "1000000000000000000000"}, {map[string]any{"a": 1}, `{"a":1}`},
		{[]any{1, "x"}, `[1,"x"]`}, {90 * time.Minute, "1h30m0s"},
	} {
		got, err := Stringify(c.in)
		if err != nil || got != c.want {
			t.Errorf("Stringify(%#v) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := Stringify(func() {}); err == nil {
		t.Error("Stringify of a func succeeded")
	}
}

// TestScopeNamesFitIdents guards the bit set compiled.idents keeps.
func TestScopeNamesFitIdents(t *testing.T) {
	var c compiled
	if limit := int(unsafe.Sizeof(c.idents)) * 8; len(scopeNames) > limit {
		t.Fatalf("%d scope names; compiled.idents holds %d", len(scopeNames), limit)
	}
}

// TestExprEnvTypes checks that the checker's view of the environment
// matches what Env.exprEnv fills, name by name.
func TestExprEnvTypes(t *testing.T) {
	env := (&Env{}).exprEnv()
	if len(env) != len(exprEnvTypes) {
		t.Fatalf("Env.exprEnv fills %d names; exprEnvTypes has %d", len(env), len(exprEnvTypes))
	}
	for name := range exprEnvTypes {
		if _, ok := env[name]; !ok {
			t.Errorf("Env.exprEnv does not fill %q", name)
		}
	}
	for _, src := range []string{"input.a.b", "output[0].x", "item.y", "error.retryable && error.status > 0", "steps.a.output.z", "run.attempt + index", "now() != nil", "uuid()", "duration('1s')"} {
		if _, err := CompileExpr(src); err != nil {
			t.Errorf("%s: %v", src, err)
		}
	}
	for _, src := range []string{"steps.a.outptu", "error.kind", "run.nope", "index.x", "nope"} {
		if _, err := CompileExpr(src); err == nil {
			t.Errorf("%s compiled; want a type error", src)
		}
	}
}

// A time fills a field that takes text, and a stored time read back with
// date() mixes with now(); without date() the load says why (issue 23:
// until: ${ now() } was "an object", and now() - vars.t0 failed at run
// time).
func TestTimesInTextFieldsAndStoredTimes(t *testing.T) {
	src := `
tqw: v1
name: times
steps:
  - id: mark
    set: {t0: "${ now() }"}
  - id: nap
    action: sleep
    with: {until: "${ now() + duration('1s') }"}
  - id: diff
    set: {took: "${ now() - date(vars.t0) }", late: "${ date(vars.t0) < now() }"}
  - id: done
    succeed: "${ vars.took }"
`
	if _, diags, err := Parse("times.yaml", []byte(src)); err != nil || len(diags) > 0 {
		t.Fatalf("Parse: %v\n%s", err, diags)
	}
	for _, bad := range []string{"now() - vars.t0", "vars.t0 < now()", "now() + vars.d", "duration('1h') == steps.mark.output"} {
		_, diags, err := Parse("times.yaml", []byte(strings.Replace(src, "now() - date(vars.t0)", bad, 1)))
		if err == nil || len(diags) == 0 || diags[0].Code != CodeExprTimeText {
			t.Errorf("%s: err %v, diagnostics %v; want %s", bad, err, diags, CodeExprTimeText)
		}
	}
}
