package lsp_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file whose call tree comes back to it gets a call.recursive error at
// the call step, naming the cycle (run refuses such a tree).
func TestRecursiveCallIsReported(t *testing.T) {
	dir := t.TempDir()
	a := "tqw: v1\nname: a\nsteps:\n  - id: go\n    call: {workflow: b.tqw.yaml}\n  - id: done\n    succeed: ok\n"
	b := "tqw: v1\nname: b\nsteps:\n  - id: back\n    call: {workflow: a.tqw.yaml}\n  - id: done\n    succeed: ok\n"
	for name, src := range map[string]string{"a.tqw.yaml": a, "b.tqw.yaml": b} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	uri := (&url.URL{Scheme: "file", Path: filepath.Join(dir, "a.tqw.yaml")}).String()
	c := startServer(t)
	c.open(uri, a)
	ds := c.diagnosticsFor(uri, 1)
	var found bool
	for _, d := range ds {
		if d.Code == "call.recursive" {
			found = true
			if d.Range.Start.Line != 3 || !strings.Contains(d.Message, "a.tqw.yaml → b.tqw.yaml → a.tqw.yaml") {
				t.Errorf("diagnostic %+v; want it on line 4 (the call step) naming the cycle", d)
			}
		}
	}
	if !found {
		t.Fatalf("no call.recursive diagnostic: %+v", ds)
	}
}
