package testfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/dsl"
)

func TestBadTestFilesGetAPositionAndACode(t *testing.T) {
	for _, c := range []struct {
		name, src, want string // want: "line:col code" of the first diagnostic
		msg             string
	}{
		{"yaml", "tqw: test/v1\ncases: [\n", "2:1 yaml.syntax", "YAML syntax"},
		{"empty", "", "1:1 yaml.empty", "empty"},
		{"unknown key", "tqw: test/v1\ncases:\n  - name: a\n    expect: {}\n    mockz: []\n", "5:5 schema.unknown-field", `unknown field "mockz"`},
		{"no cases", "tqw: test/v1\n", "1:1 schema.required", "cases"},
		{"version", "tqw: v1\ncases: [{name: a, expect: {}}]\n", "1:6 schema.enum", "test/v1"},
		{"mock without reply", "tqw: test/v1\ncases:\n  - name: a\n    mocks:\n      - step: s\n    expect: {}\n", "5:9 schema.one-of", ""},
		{"bad duration", "tqw: test/v1\ncases:\n  - name: a\n    signals:\n      - key: k\n        payload: 1\n        at: 3x\n    expect: {}\n", "7:13 test.duration", `at "3x"`},
		{"bad clock", "tqw: test/v1\ncases:\n  - name: a\n    clock: yesterday\n    expect: {}\n", "4:12 test.time", "RFC 3339"},
		{"duplicate case", "tqw: test/v1\ncases:\n  - {name: a, expect: {}}\n  - {name: a, expect: {}}\n", "4:12 test.duplicate", `"a"`},
		{"duplicate key", "tqw: test/v1\ntqw: test/v1\ncases: []\n", "2:1 yaml.duplicate-key", "tqw"},
		{"result schema", "tqw: test/v1\ncases:\n  - name: a\n    expect:\n      result_schema: {type: 3}\n", "5:22 test.result-schema", "at /type"},
		{"status", "tqw: test/v1\ncases:\n  - name: a\n    expect: {status: done}\n", "4:22 schema.enum", "succeeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, diags := Parse("t.test.yaml", []byte(c.src))
			if f != nil || !diags.HasErrors() {
				t.Fatalf("parsed; diagnostics %v", diags)
			}
			d := diags[0]
			if got := fmt.Sprintf("%d:%d", d.Line, d.Col) + " " + d.Code; got != c.want {
				t.Errorf("first diagnostic at %s; want %s\n%s", got, c.want, diags)
			}
			if d.File != "t.test.yaml" || !strings.Contains(d.Message, c.msg) {
				t.Errorf("diagnostic %s; want the file and %q", d, c.msg)
			}
		})
	}
}

func TestCheckNamesStepsTheWorkflowLacks(t *testing.T) {
	w, _, err := dsl.Parse("w.tqw.yaml", []byte(`tqw: v1
name: w
steps:
  - id: call
    action: http
    with: {url: "https://x.example/"}
  - id: nap
    action: sleep
    with: {duration: 1h}
  - id: done
    succeed: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	f, diags := Parse("w.test.yaml", []byte(`tqw: test/v1
cases:
  - name: a
    mocks:
      - step: cal
        output: 1
      - step: nap
        output: 1
      - action: sleep
        output: 1
    signals:
      - step: done
        payload: 1
    expect:
      path: [call, nope]
      attempts: {gone: 1}
`))
	if f == nil {
		t.Fatal(diags)
	}
	var got []string
	for _, d := range Check(f, w) {
		got = append(got, fmt.Sprintf("%d:%d", d.Line, d.Col)+" "+d.Code)
	}
	want := "5:9 test.unknown-step|7:9 test.step-kind|9:9 test.step-kind|12:9 test.step-kind|15:13 test.unknown-step|16:17 test.unknown-step"
	if strings.Join(got, "|") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
}

func TestDefaultWorkflowAndIs(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.tqw.yaml", "b.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got := DefaultWorkflow(filepath.Join(dir, "a.test.yaml")); got != filepath.Join(dir, "a.tqw.yaml") {
		t.Errorf("a: %s", got)
	}
	if got := DefaultWorkflow(filepath.Join(dir, "b.test.yaml")); got != filepath.Join(dir, "b.yaml") {
		t.Errorf("b: %s", got)
	}
	if !Is("x/a.test.yaml") || !Is("a.test.yml") || Is("a.tqw.yaml") || Is("test.yaml") {
		t.Error("Is")
	}
	f, diags := Parse(filepath.Join(dir, "c.test.yaml"), []byte("tqw: test/v1\nworkflow: sub/c.tqw.yaml\ncases: [{name: a, expect: {}}]\n"))
	if f == nil {
		t.Fatal(diags)
	}
	if f.Workflow != filepath.Join(dir, "sub", "c.tqw.yaml") || f.WorkflowPos != (dsl.Pos{Line: 2, Col: 11}) {
		t.Errorf("workflow %s at %v", f.Workflow, f.WorkflowPos)
	}
	c := f.Cases[0]
	if c.RunID != DefaultRunID || !c.Start.Equal(DefaultStart) {
		t.Errorf("defaults: %+v", c)
	}
}

func TestCheckKnowsTheStepsOfEveryBlock(t *testing.T) {
	w, _, err := dsl.Parse("w.tqw.yaml", []byte(`tqw: v1
name: w
steps:
  - id: both
    parallel:
      branches:
        a:
          - id: wait
            action: wait_signal
            with: {key: k, timeout: 1h}
        b:
          - id: fetch
            action: http
            with: {url: "https://x.example/"}
  - id: each
    map:
      items: [1, 2]
      steps:
        - id: charge
          action: http
          with: {url: "https://x.example/"}
on_error:
  - id: alert
    action: http
    with: {url: "https://x.example/"}
finally:
  - id: bye
    action: sleep
    with: {duration: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	f, diags := Parse("w.test.yaml", []byte(`tqw: test/v1
cases:
  - name: a
    mocks:
      - step: fetch
        output: 1
      - step: charge
        output: 1
      - step: alert
        output: 1
      - step: bye
        output: 1
      - step: nope
        output: 1
    signals:
      - step: wait
        payload: 1
    expect:
      path: [both, each, alert]
      attempts: {charge: 1, alert: 1}
`))
	if f == nil {
		t.Fatal(diags)
	}
	d := Check(f, w)
	var got []string
	for _, d := range d {
		got = append(got, fmt.Sprintf("%d:%d", d.Line, d.Col)+" "+d.Code)
	}
	if want := "11:9 test.step-kind|13:9 test.unknown-step|20:17 test.step-kind"; strings.Join(got, "|") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(got, "|"), want)
	}
	if msg := d[1].Message; !strings.Contains(msg, "both, each, wait, fetch, charge, alert, bye") {
		t.Errorf("the unknown step's message does not list the steps of every block: %s", msg)
	}
	if msg := d[2].Message; !strings.Contains(msg, `step "charge", which runs in block each/item, a child run of step each`) || !strings.Contains(msg, "name each instead") {
		t.Errorf("expect.attempts of a map's step: %s", msg)
	}
}
