package lsp_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTestFilesInTheEditor: a test file (NAME.test.yaml) gets validate's
// diagnostics for it, and completion of its keys and of the tested
// workflow's step ids.
func TestTestFilesInTheEditor(t *testing.T) {
	dir := t.TempDir()
	wf, err := os.ReadFile("../../workflows/refund.tqw.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "refund.tqw.yaml"), wf, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := "tqw: test/v1\ncases:\n  - name: a\n    mocks:\n      - step: fech\n        output: 1\n    expect: {statuz: failed}\n"
	path := filepath.Join(dir, "refund.test.yaml")
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(binary, "validate", "--json", path).Output()
	var rep struct {
		Files []struct {
			Diagnostics []struct {
				Line, Col     int
				Code, Message string
			} `json:"diagnostics"`
		} `json:"files"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Files) != 1 || len(rep.Files[0].Diagnostics) == 0 {
		t.Fatalf("validate --json: %v\n%s", err, out)
	}
	c := startServer(t, "utf-32")
	uri := fileURI(path)
	c.open(uri, bad)
	got := c.diagnosticsFor(uri, 1)
	want := rep.Files[0].Diagnostics
	if len(got) != len(want) {
		t.Fatalf("server %+v\nvalidate %+v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.Range.Start != (position{w.Line - 1, w.Col - 1}) || string(g.Code) != w.Code || g.Message != w.Message {
			t.Errorf("server %+v\nvalidate %+v", g, w)
		}
	}
	if !strings.Contains(want[0].Message, "statuz") {
		t.Errorf("first diagnostic %+v", want[0])
	}

	good := "tqw: test/v1\ncases:\n  - name: a\n    mocks:\n      - step: \n    expect:\n      \n"
	uri2 := fileURI(filepath.Join(dir, "refund2.test.yaml"))
	if err := os.WriteFile(filepath.Join(dir, "refund2.test.yaml"), []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	// refund2.test.yaml tests refund2.tqw.yaml, which does not exist:
	// name the workflow.
	good = strings.Replace(good, "tqw: test/v1\n", "tqw: test/v1\nworkflow: refund.tqw.yaml\n", 1)
	c.open(uri2, good)
	steps := complete(t, c, uri2, "step: ", 0, good)
	if !slices.Contains(steps, "fetch") || !slices.Contains(steps, "escalate") {
		t.Errorf("step completion %v", steps)
	}
	keys := complete(t, c, uri2, "expect:\n      ", 0, good)
	for _, k := range []string{"status", "result", "result_schema", "path", "vars", "attempts", "error"} {
		if !slices.Contains(keys, k) {
			t.Errorf("expect keys %v lack %s", keys, k)
		}
	}
}

// TestTestFileCompletionOffersTheStepsOfEveryBlock: a mock or a signal
// may name a step of any block; an expectation only the run's own steps.
func TestTestFileCompletionOffersTheStepsOfEveryBlock(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.tqw.yaml"), []byte(blocksFixture), 0o600); err != nil {
		t.Fatal(err)
	}
	text := "tqw: test/v1\ncases:\n  - name: a\n    mocks:\n      - step: \n    expect:\n      path: [ ]\n"
	path := filepath.Join(dir, "w.test.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startServer(t)
	uri := fileURI(path)
	c.open(uri, text)
	c.diagnosticsFor(uri, 1)
	if got := complete(t, c, uri, "step: ", 0, text); !slices.Equal(got, strings.Fields("prepare checks charge_all done score judge screen charge receipt refund notify")) {
		t.Errorf("mock step completion %v; want every block's steps", got)
	}
	if got := complete(t, c, uri, "path: [", 0, text); !slices.Equal(got, strings.Fields("prepare checks charge_all done refund notify")) {
		t.Errorf("expect.path completion %v; want the run's own steps (no map item's)", got)
	}
}
