package dsl

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/dsl/dslgen"
)

// FuzzLoad feeds arbitrary bytes to the loader: it must never panic,
// must return either a workflow or an error diagnostic, and must finish
// in bounded time (aliases, depth and size are bounded).
func FuzzLoad(f *testing.F) {
	for _, pattern := range []string{"../workflows/*.yaml", "testdata/invalid/*.yaml", "testdata/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add(dslgen.Workflow(8))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("tqw: v1\nname: t\nsteps: [{id: a, next: \"${ }\"}]"))
	f.Add(nestedSetWorkflow(strings.Repeat("(", maxExprNesting+1) + "1" + strings.Repeat(")", maxExprNesting+1)))
	f.Add(nestedSetWorkflow("[{a: (1)}, '(((', `[[`]"))
	f.Fuzz(func(t *testing.T, src []byte) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				panic(fmt.Sprintf("Parse did not return within 20s on %q", src))
			}
		}()
		w, diags, err := Parse("fuzz.yaml", src)
		// A load is deterministic: the same file gives the same diagnostics
		// (no map order, no scheduling may change them).
		if _, again, _ := Parse("fuzz.yaml", src); !reflect.DeepEqual(diags, again) {
			t.Fatalf("two loads of one file disagree:\n%v\n%v", diags, again)
		}
		switch {
		case err != nil && w != nil:
			t.Fatal("both a workflow and an error")
		case err != nil && !diags.HasErrors():
			t.Fatalf("error %v without an error diagnostic", err)
		case err == nil && w == nil:
			t.Fatal("neither a workflow nor an error")
		}
		for _, d := range diags {
			if d.Code == CodeInternal {
				t.Fatalf("loader bug: %s", d)
			}
			if d.Line < 1 || d.Col < 1 || d.Code == "" || d.Message == "" {
				t.Fatalf("malformed diagnostic %+v", d)
			}
		}
		if w != nil {
			_ = w.Edges()
			if err := w.WriteMermaid(io.Discard); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteDOT(io.Discard); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzRules runs the rule checks (build) on any YAML tree, without the
// schema gate Parse puts in front of them: they must never panic, so the
// recover in checkRules stays a last resort.
func FuzzRules(f *testing.F) {
	for _, pattern := range []string{"../workflows/*.yaml", "testdata/invalid/*.yaml", "testdata/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	for _, s := range []string{
		"steps: [null, 1, {}]",
		"steps: [{id: a}, {id: a}, {next: a}]",
		"steps: [{foreach: null}, {call: null}, {call: 1}, {foreach: 1}]",
		"steps: [{action: wait_signal}, {action: llm, with: 1}, {action: sleep, with: {until: 1}}]",
		"steps: [{id: 1, action: http, with: [1], retry: {on: 1, max_attempts: x}, catch: [1, {on: [1]}]}]",
		"steps: [{id: a, switch: [1, {when: 1, next: 2}], set: [1], next: {a: 1}, timeout: 1, on_timeout: [1]}]",
		"defaults: {retry: 1, timeout: [1]}\nsecrets: {a: 1}\ninput: 1\nvars: [1]",
		"steps: {a: 1}",
		"tqw: 1\nname: [1]\nsteps: [{id: a, foreach: {items: 1, concurrency: x, action: 1, with: 1}}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		sink := &diagSink{file: "fuzz.yaml"}
		root := parseYAML(sink, src, DefaultLimits)
		if root == nil {
			return
		}
		build(&diagSink{file: "fuzz.yaml"}, root, src, Options{ExtraActions: map[string]json.RawMessage{"x": json.RawMessage(`{"type":"object"}`)}}, &exprCompiler{})
	})
}
