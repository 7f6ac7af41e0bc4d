package dsl

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/schemas"
)

// schemaCatches are the codes of rule checks the published schema also
// expresses (for editors), though the loader reports them itself.
var schemaCatches = map[string]bool{
	CodeStepConflict: true, CodeStepEmpty: true, CodeUnknownAction: true, CodeForeachWait: true,
	CodeErrorType: true, CodeWaitNoTimeout: true, CodeStepKey: true,
}

// TestPublishedSchema checks the schema editors get, as published:
// every file the loader accepts passes it, and it rejects every corpus
// file whose problem it can express (besides the loader's schema stage,
// the rule checks listed in schemaCatches and a when written with ${ }).
func TestPublishedSchema(t *testing.T) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.WorkflowJSON))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemas.WorkflowID, v); err != nil {
		t.Fatal(err)
	}
	published, err := c.Compile(schemas.WorkflowID)
	if err != nil {
		t.Fatal(err)
	}
	check := func(f string) error {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		root := parseYAML(&diagSink{}, src, DefaultLimits)
		if root == nil {
			return fmt.Errorf("not YAML")
		}
		return published.Validate(root.toAny())
	}
	good, _ := filepath.Glob("../workflows/*.yaml")
	good = slices.DeleteFunc(good, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	for _, f := range append(good, "testdata/kitchen_sink.yaml") {
		if err := check(f); err != nil {
			t.Errorf("%s: the published schema rejects a valid workflow: %v", f, err)
		}
	}
	bad, _ := filepath.Glob("testdata/invalid/*.yaml")
	caught := 0
	for _, f := range bad {
		src, _ := os.ReadFile(f)
		first, _, _ := strings.Cut(string(src), "\n")
		var code string
		fmt.Sscanf(first, "# want: %s", &code)
		_, diags, _ := Parse(f, src)
		if !diags.HasErrors() {
			continue
		}
		expressible := strings.HasPrefix(code, "schema.") || schemaCatches[code] || strings.Contains(f, "when_with_braces")
		if code == CodeStepKey && (strings.Contains(f, "call_template")) {
			expressible = false // call.workflow written as a template: a rule only
		}
		if !expressible {
			continue
		}
		if root := parseYAML(&diagSink{}, src, DefaultLimits); root == nil {
			continue
		}
		if err := check(f); err == nil {
			t.Errorf("%s (%s): the published schema accepts it", f, code)
			continue
		}
		caught++
	}
	if caught < 40 {
		t.Errorf("the published schema caught %d corpus files; the walk is broken", caught)
	}
}
