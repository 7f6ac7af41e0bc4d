package editors

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/schemas"
)

// TestVSCodeExtension builds and packages the VS Code extension with its
// pinned tools (npm run package: type check, bundle, vsce) and checks
// the .vsix: the manifest's contributions, the bundle, the vendored
// Mermaid and the schema, identical to the repository's. It also runs
// the extension's unit tests (node's test runner).
func TestVSCodeExtension(t *testing.T) {
	if testing.Short() {
		t.Skip("packaging the extension takes about 15 s")
	}
	if _, err := os.Stat("vscode/node_modules"); err != nil {
		t.Skip("editors/vscode/node_modules is missing: run scripts/tools.sh (it runs npm ci there); make test does")
	}
	npm := func(args ...string) {
		t.Helper()
		cmd := exec.Command("npm", args...)
		cmd.Dir = "vscode"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	npm("test")
	os.Remove("vscode/tqw.vsix")
	npm("run", "package")
	z, err := zip.OpenReader("vscode/tqw.vsix")
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	files := map[string][]byte{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		r.Close()
		files[f.Name] = b
	}
	for _, name := range []string{"extension.vsixmanifest", "extension/package.json", "extension/dist/extension.js", "extension/media/mermaid.min.js", "extension/schemas/workflow.schema.json"} {
		if files[name] == nil {
			t.Errorf("the .vsix lacks %s", name)
		}
	}
	for name := range files {
		if strings.Contains(name, "node_modules/") || strings.HasPrefix(name, "extension/src/") {
			t.Errorf("the .vsix ships %s", name)
		}
	}
	if !bytes.Equal(files["extension/schemas/workflow.schema.json"], schemas.WorkflowJSON) {
		t.Error("the .vsix's schema differs from schemas/workflow.schema.json")
	}
	var manifest struct {
		Main        string
		Contributes struct {
			YAMLValidation []struct {
				FileMatch []string
				URL       string
			} `json:"yamlValidation"`
			Commands []struct{ Command string }
		}
	}
	if err := json.Unmarshal(files["extension/package.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	yv := manifest.Contributes.YAMLValidation
	if manifest.Main != "./dist/extension.js" || len(yv) != 2 ||
		yv[0].URL != "./schemas/workflow.schema.json" || strings.Join(yv[0].FileMatch, " ") != "*.tqw.yaml *.tqw.yml" ||
		yv[1].URL != "./schemas/workflow-test.schema.json" || strings.Join(yv[1].FileMatch, " ") != "*.test.yaml *.test.yml" {
		t.Errorf("manifest: %+v", manifest)
	}
	if !bytes.Equal(files["extension/schemas/workflow-test.schema.json"], schemas.WorkflowTestJSON) {
		t.Error("the .vsix's test-file schema differs from schemas/workflow-test.schema.json")
	}
	var cmds []string
	for _, c := range manifest.Contributes.Commands {
		cmds = append(cmds, c.Command)
	}
	if strings.Join(cmds, " ") != "tqw.runWorkflow tqw.showGraph" {
		t.Errorf("commands %v", cmds)
	}
	bundle := string(files["extension/dist/extension.js"])
	for _, want := range []string{`"lsp"`, "tqw.showGraph", "mermaid.min.js", "Content-Security-Policy"} {
		if !strings.Contains(bundle, want) {
			t.Errorf("the bundle lacks %s", want)
		}
	}
	if strings.Contains(bundle, "cdn.jsdelivr") || strings.Contains(bundle, "unpkg.com") {
		t.Error("the bundle loads scripts from a CDN")
	}
}
