package dsl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeCallFiles writes the files of a call tree into a new folder.
func writeCallFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func callCyclesOf(t *testing.T, path string, opts Options) Diagnostics {
	t.Helper()
	w, diags, err := LoadWith(path, opts)
	if err != nil {
		t.Fatalf("load %s: %v %v", path, err, diags)
	}
	return CallCycles(path, w, opts)
}

// A cycle through a symlink (another name of the calling file) is a
// cycle: the rule compares files, as run does, not their names.
func TestCallCyclesThroughASymlink(t *testing.T) {
	dir := writeCallFiles(t, map[string]string{
		"a.yaml": "tqw: v1\nname: a\nsteps:\n  - id: go\n    call: {workflow: b.yaml}\n  - id: done\n    succeed: ok\n",
		"b.yaml": "tqw: v1\nname: b\nsteps:\n  - id: back\n    call: {workflow: alias.yaml}\n  - id: done\n    succeed: ok\n",
	})
	if err := os.Symlink("a.yaml", filepath.Join(dir, "alias.yaml")); err != nil {
		t.Fatal(err)
	}
	d := callCyclesOf(t, filepath.Join(dir, "a.yaml"), Options{})
	if len(d) != 1 || d[0].Code != CodeRecursiveCall || !strings.Contains(d[0].Message, "a.yaml → b.yaml → alias.yaml") {
		t.Fatalf("CallCycles = %v; want one call.recursive naming a.yaml → b.yaml → alias.yaml", d)
	}
}

// A called file that uses an embedder's declared action is read with the
// same options, so a cycle through it is found.
func TestCallCyclesThroughAFileWithAnExtraAction(t *testing.T) {
	dir := writeCallFiles(t, map[string]string{
		"a.yaml": "tqw: v1\nname: a\nsteps:\n  - id: go\n    call: {workflow: b.yaml}\n  - id: done\n    succeed: ok\n",
		"b.yaml": "tqw: v1\nname: b\nsteps:\n  - id: mine\n    action: my_action\n  - id: back\n    call: {workflow: a.yaml}\n  - id: done\n    succeed: ok\n",
	})
	opts := Options{ExtraActions: map[string]json.RawMessage{"my_action": nil}}
	d := callCyclesOf(t, filepath.Join(dir, "a.yaml"), opts)
	if len(d) != 1 || d[0].Code != CodeRecursiveCall || !strings.Contains(d[0].Message, "a.yaml → b.yaml → a.yaml") {
		t.Fatalf("CallCycles = %v; want one call.recursive naming a.yaml → b.yaml → a.yaml", d)
	}
}

// A file called twice, but not by itself, is no cycle.
func TestCallCyclesAcceptsADiamond(t *testing.T) {
	dir := writeCallFiles(t, map[string]string{
		"a.yaml": "tqw: v1\nname: a\nsteps:\n  - id: one\n    call: {workflow: b.yaml}\n  - id: two\n    call: {workflow: c.yaml}\n  - id: done\n    succeed: ok\n",
		"b.yaml": "tqw: v1\nname: b\nsteps:\n  - id: leaf\n    call: {workflow: c.yaml}\n  - id: done\n    succeed: ok\n",
		"c.yaml": "tqw: v1\nname: c\nsteps:\n  - id: done\n    succeed: ok\n",
	})
	if d := callCyclesOf(t, filepath.Join(dir, "a.yaml"), Options{}); len(d) != 0 {
		t.Fatalf("CallCycles = %v; want none for a diamond", d)
	}
}
