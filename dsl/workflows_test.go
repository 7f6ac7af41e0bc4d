package dsl

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const schemaLine = "# yaml-language-server: $schema=../schemas/workflow.schema.json"

// TestExampleWorkflows checks that every example in workflows/ loads with
// no diagnostic at all and names the schema for editors.
func TestExampleWorkflows(t *testing.T) {
	files, err := filepath.Glob("../workflows/*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 13 {
		t.Fatalf("found %d example workflows; want at least 13", len(files))
	}
	actions := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(src), schemaLine+"\n") {
			t.Errorf("%s: does not start with %q", f, schemaLine)
		}
		w, diags, err := Load(f)
		if err != nil || len(diags) > 0 {
			t.Errorf("%s: %v\n%s", f, err, diags)
			continue
		}
		for _, s := range w.Steps {
			actions[s.Action] = true
			if s.Foreach != nil {
				actions[s.Foreach.Action] = true
			}
		}
	}
	for _, a := range BuiltinActions {
		if !actions[a] {
			t.Errorf("no example workflow uses action %s", a)
		}
	}
}

var yamlBlockRE = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestDocsExamples checks that every complete workflow in docs/DSL.md
// (a yaml block starting with the schema line) is valid, and that the
// first one is exactly workflows/refund.tqw.yaml.
func TestDocsExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/DSL.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range yamlBlockRE.FindAllStringSubmatch(string(doc), -1) {
		block := m[1]
		if !strings.HasPrefix(block, schemaLine) {
			continue
		}
		n++
		if _, diags, err := Parse("docs/DSL.md", []byte(block)); err != nil || len(diags) > 0 {
			t.Errorf("docs/DSL.md example %d: %v\n%s", n, err, diags)
		}
		if n == 1 {
			refund, err := os.ReadFile("../workflows/refund.tqw.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if block != string(refund) {
				t.Errorf("the first example in docs/DSL.md differs from workflows/refund.tqw.yaml")
			}
		}
	}
	if n == 0 {
		t.Fatal("docs/DSL.md has no complete workflow example")
	}
}
