package wftest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
	"github.com/tqw-dsl/tqw/interpreter"
)

// runFiles writes a workflow and its test file into a temporary folder
// and runs every case.
func runFiles(t *testing.T, workflow, tests string) *FileResult {
	t.Helper()
	dir := t.TempDir()
	wp := filepath.Join(dir, "w.tqw.yaml")
	tp := filepath.Join(dir, "w.test.yaml")
	if err := os.WriteFile(wp, []byte(strings.TrimLeft(workflow, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tp, []byte(strings.TrimLeft(tests, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	f, diags := testfile.Read(tp)
	if f == nil {
		t.Fatalf("test file: %s", diags)
	}
	w, err := interpreter.Load(f.Workflow, dsl.Options{})
	if err != nil {
		t.Fatalf("workflow: %v", err)
	}
	if d := testfile.Check(f, w.Main, w.Tree()[1:]...); len(d) > 0 {
		t.Fatalf("check: %s", d)
	}
	return Run(context.Background(), f, w, Options{})
}

// wantPass fails the test unless every case passed.
func wantPass(t *testing.T, r *FileResult) {
	t.Helper()
	for _, c := range r.Cases {
		for _, f := range c.Failures {
			t.Errorf("case %q: %s: step %s: %s\nwant: %s\ngot:  %s", c.Name, f.Expect, f.Step, f.Message, f.Want, f.Got)
		}
	}
}

func TestAThirtyDaySleepTakesNoRealTime(t *testing.T) {
	r := runFiles(t, `
tqw: v1
name: long
steps:
  - id: wait
    action: sleep
    with: {duration: 30d}
  - id: done
    succeed: "${ now() }"
`, `
tqw: test/v1
cases:
  - name: sleeps a month
    clock: 2026-03-01T00:00:00Z
    expect:
      status: succeeded
      result: "2026-03-31T00:00:00Z"
      path: [wait, done]
`)
	wantPass(t, r)
}
