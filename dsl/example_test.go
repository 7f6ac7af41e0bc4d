package dsl_test

import (
	"fmt"

	"github.com/tqw-dsl/tqw/dsl"
)

func ExampleParse() {
	src := []byte(`tqw: v1
name: greet
steps:
  - id: greet
    action: shell
    with: {command: ["echo", "hello ${ input.name }"]}
  - id: done
    succeed: "${ trim(output.stdout) }"
`)
	w, diags, err := dsl.Parse("greet.yaml", src)
	if err != nil {
		fmt.Print(diags)
		return
	}
	with, _ := w.Step("greet").With.Eval(&dsl.Env{Input: map[string]any{"name": "Ada"}})
	fmt.Println(w.Steps[0].Kind, w.Steps[0].Action, with)
	fmt.Println(w.Steps[1].Kind, len(w.Hash))
	// Output:
	// action shell map[command:[echo hello Ada]]
	// succeed 64
}

func ExampleParse_diagnostics() {
	src := []byte(`tqw: v1
name: broken
steps:
  - id: fetch
    action: http
    with: {urll: https://example.com}
`)
	_, diags, _ := dsl.Parse("broken.yaml", src)
	fmt.Print(diags)
	// Output:
	// broken.yaml:6:11: error: action http: steps[0].with: missing required field "url" [schema.required]
	// broken.yaml:6:12: error: action http: unknown field "urll" in steps[0].with [schema.unknown-field]
	// 	hint: did you mean "url"? known fields: body, cache, expect_status, headers, max_response_bytes, method, query, timeout, url
}

func ExampleCompileTemplate() {
	t, _ := dsl.CompileTemplate("${ input.n * 2 }")
	v, _ := t.Eval(&dsl.Env{Input: map[string]any{"n": 21}})
	s, _ := dsl.CompileTemplate("n is ${ input.n * 2 }")
	text, _ := s.Eval(&dsl.Env{Input: map[string]any{"n": 21}})
	fmt.Printf("%T %v\n%q\n", v, v, text)
	// Output:
	// int 42
	// "n is 42"
}
