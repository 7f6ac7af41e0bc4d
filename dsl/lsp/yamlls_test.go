package lsp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"
)

// startYAMLLanguageServer starts Red Hat's yaml-language-server (the
// engine of VS Code's YAML extension), pinned in schemas/schemastore, and
// initializes it the way the extension does, with the SchemaStore
// catalog off (no network here).
func startYAMLLanguageServer(t *testing.T) *client {
	t.Helper()
	bin, _ := filepath.Abs("../../schemas/schemastore/node_modules/yaml-language-server/bin/yaml-language-server")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is missing: run scripts/tools.sh (it runs npm ci in schemas/schemastore); make test does", bin)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: run scripts/tools.sh; make test does")
	}
	cmd := exec.Command("node", bin, "--stdio")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, cmd: cmd, diags: map[string][]publishedDiagnostics{}, cond: make(chan struct{})}
	settings := map[string]any{"yaml": map[string]any{
		"validate": true, "hover": true, "completion": true,
		"schemaStore": map[string]any{"enable": false},
	}}
	handler := jsonrpc2.HandlerWithError(func(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
		if req.Method == "workspace/configuration" {
			// One answer per item asked for: the yaml section.
			return []any{settings["yaml"], settings["yaml"], settings["yaml"], settings["yaml"]}, nil
		}
		return c.handle(ctx, conn, req)
	})
	stream := jsonrpc2.NewBufferedStream(rwc{stdout, stdin}, jsonrpc2.VSCodeObjectCodec{})
	c.conn = jsonrpc2.NewConn(context.Background(), stream, handler)
	t.Cleanup(func() {
		c.conn.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var res map[string]any
	c.call("initialize", map[string]any{"processId": os.Getpid(), "rootUri": nil, "capabilities": map[string]any{
		"workspace":    map[string]any{"configuration": true},
		"textDocument": map[string]any{"publishDiagnostics": map[string]any{"relatedInformation": true}},
	}}, &res)
	c.notify("initialized", map[string]any{})
	c.notify("workspace/didChangeConfiguration", map[string]any{"settings": settings})
	return c
}

// TestYAMLLanguageServer runs the schema in yaml-language-server: every
// example (2020-12 schema, named by its modeline) is clean, and every
// SchemaStore negative test (the draft-07 rendering) is flagged on the
// line its "# want:" comment names.
func TestYAMLLanguageServer(t *testing.T) {
	c := startYAMLLanguageServer(t)
	good, _ := filepath.Glob("../../workflows/*.yaml")
	good = slices.DeleteFunc(good, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	bad, _ := filepath.Glob("../../schemas/schemastore/negative_test/*.yaml")
	if len(good) < 13 || len(bad) < 20 {
		t.Fatalf("%d examples, %d negative tests", len(good), len(bad))
	}
	for _, f := range append(good, bad...) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c.open(fileURI(f), string(src))
	}
	for _, f := range good {
		if d := c.firstDiagnostics(fileURI(f)); len(d) != 0 {
			t.Errorf("%s: yaml-language-server reports %+v", f, d)
		}
	}
	for _, f := range bad {
		src, _ := os.ReadFile(f)
		var code string
		var line, col int
		second := strings.Split(string(src), "\n")[1]
		if _, err := fmt.Sscanf(second, "# want: %s %d:%d", &code, &line, &col); err != nil {
			t.Fatalf("%s: second line %q: %v", f, second, err)
		}
		diags := c.firstDiagnostics(fileURI(f))
		found := false
		for _, d := range diags {
			if d.Range.Start.Line == line-1 || d.Range.Start.Line <= line-1 && d.Range.End.Line >= line-1 && d.Range.End.Line > d.Range.Start.Line {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want a diagnostic on line %d (%s); yaml-language-server reports %+v", filepath.Base(f), line, code, diags)
		}
	}
}
