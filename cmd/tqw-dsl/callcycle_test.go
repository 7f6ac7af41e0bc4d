package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Files that call each other: validate refuses them (exit 1) with a
// call.recursive error at the call step naming the cycle, as run refuses
// them (exit 2).
func TestValidateReportsARecursiveCallTree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := filepath.Join(dir, "a.tqw.yaml")
	files := map[string]string{
		"a.tqw.yaml": "tqw: v1\nname: a\nsteps:\n  - id: go\n    call: {workflow: b.tqw.yaml}\n  - id: done\n    succeed: ok\n",
		"b.tqw.yaml": "tqw: v1\nname: b\nsteps:\n  - id: back\n    call: {workflow: a.tqw.yaml}\n  - id: done\n    succeed: ok\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(tqwBin, "validate", a)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != exitInvalid || !strings.Contains(string(out), "a.tqw.yaml:4:5: error:") || !strings.Contains(string(out), "[call.recursive]") ||
		!strings.Contains(string(out), "a.tqw.yaml → b.tqw.yaml → a.tqw.yaml") {
		t.Fatalf("validate: exit %d:\n%s\nwant exit %d with call.recursive at a.tqw.yaml:4:5 naming the cycle", code, out, exitInvalid)
	}
}
