package dsl

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/dsl/dslgen"
)

// loadResult is what a load reports, in a form two loads can be compared by.
type loadResult struct {
	Diags Diagnostics
	Err   string
	Valid bool
	Hash  string
	Steps int
	Edges []Edge
}

func loadWith(t *testing.T, name string, src []byte, lim Limits, minBytes int) loadResult {
	t.Helper()
	defer func(old int) { concurrentMinBytes = old }(concurrentMinBytes)
	concurrentMinBytes = minBytes
	w, diags, err := ParseWith(name, src, Options{Limits: lim})
	r := loadResult{Diags: diags}
	if err != nil {
		r.Err = err.Error()
	}
	if w != nil {
		r.Valid, r.Hash, r.Steps, r.Edges = true, w.Hash, len(w.Steps), w.Edges()
	}
	return r
}

// TestConcurrentLoadMatchesSequential loads every corpus and example file,
// and large generated files with errors of each stage, once on one
// goroutine and once with the stages run concurrently: the diagnostics,
// the error and the workflow must be the same.
func TestConcurrentLoadMatchesSequential(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	type input struct {
		name string
		src  []byte
		lim  Limits
	}
	var inputs []input
	for _, pattern := range []string{"testdata/invalid/*.yaml", "testdata/*.yaml", "../workflows/*.yaml", "../interpreter/testdata/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			inputs = append(inputs, input{name: f, src: src})
		}
	}
	if len(inputs) < 60 {
		t.Fatalf("found %d files; want the whole corpus", len(inputs))
	}
	gen := dslgen.Workflow(150)
	replace := func(old, new string, n int) []byte {
		out := bytes.Replace(gen, []byte(old), []byte(new), n)
		if bytes.Equal(out, gen) {
			t.Fatalf("generated workflow has no %q", old)
		}
		return out
	}
	schemaAndExpr := bytes.Replace(replace("steps:", "bogus: 1\nsteps:", 1), []byte("${"), []byte("${ )( + "), 3)
	inputs = append(inputs,
		input{name: "gen.yaml", src: gen},
		input{name: "gen-expr.yaml", src: replace("${", "${ )( + ", 5)},
		input{name: "gen-when.yaml", src: replace("when: ", "when: nope(", 2)},
		input{name: "gen-action.yaml", src: replace("action: http", "action: htp", 3)},
		input{name: "gen-schema.yaml", src: replace("timeout: 10s", "timeout: 10", 2)},
		input{name: "gen-with.yaml", src: replace("expect_status: [200, 201]", "expect_status: oops", 2)},
		input{name: "gen-schema-and-expr.yaml", src: schemaAndExpr},
		input{name: "gen-yaml.yaml", src: replace("steps:", "steps: [", 1)},
		input{name: "gen-steps.yaml", src: gen, lim: Limits{MaxSteps: 10}},
	)
	for _, in := range inputs {
		seq := loadWith(t, in.name, in.src, in.lim, 1<<30)
		con := loadWith(t, in.name, in.src, in.lim, 0)
		if !reflect.DeepEqual(seq, con) {
			t.Errorf("%s: concurrent load differs from sequential:\nsequential: %+v\nconcurrent: %+v", in.name, seq, con)
		}
		if bytes.Equal(in.src, gen) && in.lim == (Limits{}) && !seq.Valid {
			t.Errorf("%s: the generated workflow is invalid: %s", in.name, seq.Diags)
		}
	}
}

// TestSpeculativeSourcesGuessGeneratedWorkflow checks that the raw-text
// scan finds every expression of the benchmark's workflow, so a large load
// compiles them during the YAML parse, and that a stop ends the scan.
func TestSpeculativeSourcesGuessGeneratedWorkflow(t *testing.T) {
	src := dslgen.Workflow(300)
	root := parseYAML(&diagSink{file: "gen.yaml"}, src, DefaultLimits)
	want := expressionSources(root)
	var stop atomic.Bool
	guessed := map[string]bool{}
	for _, s := range speculativeSources(string(src), &stop) {
		guessed[s] = true
	}
	for _, s := range want {
		if !guessed[s] {
			t.Errorf("source %q not guessed", s)
		}
	}
	if len(want) < 300 {
		t.Fatalf("only %d sources in the generated workflow", len(want))
	}
	stop.Store(true)
	if got := speculativeSources(string(src), &stop); len(got) != 0 {
		t.Errorf("stopped scan returned %d sources", len(got))
	}
	quoted := "a: \"x ${ 'q' }\"\n- when: 'vars.a > 1'  # c\nwhen: \"a\\\"b\"\nwhen: plain == 1\n"
	got := fmt.Sprint(speculativeSources(quoted, new(atomic.Bool)))
	if want := "['q' vars.a > 1 plain == 1]"; got != want {
		t.Errorf("guesses %s, want %s", got, want)
	}
}

// TestSpeculationFinishIsIdempotent: the deferred finish after the one
// that hands the results over returns the same results and does not block.
func TestSpeculationFinishIsIdempotent(t *testing.T) {
	s := startSpeculation([]byte("x: ${ 1 + 1 }\nwhen: 2 > 1\ny: ${ nope( }\n"))
	first := s.finish()
	second := s.finish()
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("finish: %v then %v", first, second)
	}
	// finish may stop the goroutine before it compiles anything, but
	// any result present must be what a fresh compile gives.
	var c exprCompiler
	for src, r := range first {
		fresh := c.compile(src)
		if (r.err == nil) != (fresh.err == nil) || r.idents != fresh.idents || !reflect.DeepEqual(r.refs, fresh.refs) {
			t.Errorf("%q: speculative %+v, fresh %+v", src, r, fresh)
		}
	}
}

// FuzzConcurrentLoad: on any input, a load with the stages run
// concurrently reports exactly what the sequential load reports.
func FuzzConcurrentLoad(f *testing.F) {
	for _, pattern := range []string{"../workflows/*.yaml", "testdata/invalid/*.yaml", "testdata/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add(dslgen.Workflow(8))
	f.Add([]byte("tqw: v1\nname: t\nsteps: [{id: a, action: http, with: {url: 1}, next: \"${ x( }\"}]"))
	f.Fuzz(func(t *testing.T, src []byte) {
		if runtime.GOMAXPROCS(0) < 2 {
			t.Skip("needs 2 or more GOMAXPROCS")
		}
		seq := loadWith(t, "fuzz.yaml", src, Limits{}, 1<<30)
		con := loadWith(t, "fuzz.yaml", src, Limits{}, 0)
		if !reflect.DeepEqual(seq, con) {
			t.Fatalf("concurrent load differs from sequential:\nsequential: %+v\nconcurrent: %+v", seq, con)
		}
	})
}

// FuzzSpeculativeSources: the raw-text scan never panics and guesses only
// trimmed, non-empty, distinct sources.
func FuzzSpeculativeSources(f *testing.F) {
	f.Add(dslgen.Workflow(3))
	f.Add([]byte("when: '\nwhen: \"\"\n- when: x # y\na: ${ { } ${"))
	f.Fuzz(func(t *testing.T, src []byte) {
		seen := map[string]bool{}
		for _, s := range speculativeSources(string(src), new(atomic.Bool)) {
			if s == "" || s != strings.TrimSpace(s) || seen[s] {
				t.Fatalf("bad guess %q", s)
			}
			seen[s] = true
		}
	})
}
