package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const declaredActions = `{"tqw": "actions/v1", "actions": {
  "charge": {"summary": "Charges a card.", "with": {"type": "object", "required": ["amount"], "additionalProperties": false,
             "properties": {"amount": {"type": "integer"}}}},
  "notify": {}
}}`

func payWorkflow(with string) string {
	return "tqw: v1\nname: pay\nsteps:\n  - id: pay\n    action: charge\n    with: " + with + "\n  - id: ping\n    action: notify\n"
}

// Workflows using an embedder's actions check like the built-in ones
// once the program's declarations sit beside them (issue 23: validate
// and lsp said "unknown action").
func TestValidateWithDeclaredActions(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "flows", "pay.yaml")
	bad := filepath.Join(dir, "flows", "bad.yaml")
	if err := os.MkdirAll(filepath.Dir(wf), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, src := range map[string]string{wf: payWorkflow("{amount: 5}"), bad: payWorkflow("{amount: five}")} {
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, _ := runCLI(t, "validate", wf); code != exitInvalid || !strings.Contains(out, "step.unknown-action") {
		t.Fatalf("without declarations: exit %d\n%s", code, out)
	}
	decl := filepath.Join(dir, "tqw-actions.json")
	if err := os.WriteFile(decl, []byte(declaredActions), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "validate", wf); code != exitOK {
		t.Fatalf("with the nearest declarations: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runCLI(t, "validate", bad); code != exitInvalid || !strings.Contains(out, "with.invalid") {
		t.Fatalf("a with breaking the declared schema: exit %d\n%s", code, out)
	}
	if code, out, errOut := runCLI(t, "graph", wf); code != exitOK || !strings.Contains(out, "pay") {
		t.Fatalf("graph: exit %d\n%s%s", code, out, errOut)
	}
	// An explicit file wins over the nearest one.
	other := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(other, []byte(`{"tqw": "actions/v1", "actions": {"charge": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(t, "validate", "--actions", other, wf); code != exitInvalid || !strings.Contains(out, `unknown action "notify"`) {
		t.Fatalf("--actions naming only charge: exit %d\n%s", code, out)
	}
	// A broken declarations file is a usage error naming it, and checks nothing.
	if err := os.WriteFile(decl, []byte(`{"tqw": "actions/v1", "actions": {"http": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "validate", wf); code != exitUsage || !strings.Contains(errOut, decl) || out != "" {
		t.Fatalf("broken declarations: exit %d\n%s%s", code, out, errOut)
	}
}

func TestSchemaWithDeclaredActions(t *testing.T) {
	decl := filepath.Join(t.TempDir(), "tqw-actions.json")
	if err := os.WriteFile(decl, []byte(declaredActions), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "schema", "--actions", decl)
	if code != exitOK || !strings.Contains(out, `"with.charge"`) || !strings.Contains(out, `"Charges a card."`) {
		t.Fatalf("schema --actions: exit %d\n%s", code, errOut)
	}
	code, base, _ := runCLI(t, "schema")
	if code != exitOK || strings.Contains(base, "with.charge") {
		t.Fatalf("schema without declarations: exit %d, has the declared action: %v", code, strings.Contains(base, "with.charge"))
	}
}
