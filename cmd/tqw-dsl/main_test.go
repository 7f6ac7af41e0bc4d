package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/schemas"
)

// runCLI runs tqw-dsl in process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidateExamples(t *testing.T) {
	files, _ := filepath.Glob("../../workflows/*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	if len(files) == 0 {
		t.Fatal("no example workflows")
	}
	code, out, errOut := runCLI(t, append([]string{"validate"}, files...)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if n := strings.Count(out, ": valid ("); n != len(files) {
		t.Errorf("%d files reported valid; want %d:\n%s", n, len(files), out)
	}
}

func TestValidateInvalid(t *testing.T) {
	bad := "../../dsl/testdata/invalid/schema_unknown_with_field.yaml"
	code, out, errOut := runCLI(t, "validate", "../../workflows/hello.yaml", bad)
	if code != exitInvalid {
		t.Fatalf("exit %d; want %d", code, exitInvalid)
	}
	want := bad + `:9:7: error: action http: unknown field "urll" in steps[0].with [schema.unknown-field]` + "\n\thint: did you mean \"url\"?"
	if !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if !strings.Contains(errOut, "1 of 2 files invalid") {
		t.Errorf("stderr = %q", errOut)
	}
	code, out, _ = runCLI(t, "validate", "--format", "json", bad, "../../workflows/hello.yaml")
	if code != exitInvalid {
		t.Fatalf("json: exit %d", code)
	}
	var rep struct {
		Valid bool
		Files []struct {
			File        string
			Valid       bool
			Hash        string
			Diagnostics []struct {
				Line, Col      int
				Severity, Code string
				Message, Hint  string
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Valid || len(rep.Files) != 2 || rep.Files[0].Valid || !rep.Files[1].Valid || rep.Files[1].Hash == "" {
		t.Fatalf("report = %+v", rep)
	}
	d := rep.Files[0].Diagnostics[0]
	if d.Line != 9 || d.Col != 7 || d.Code != "schema.unknown-field" || d.Severity != "error" || d.Hint == "" {
		t.Errorf("diagnostic = %+v", d)
	}
	code, _, _ = runCLI(t, "validate", "no/such/file.yaml")
	if code != exitInvalid {
		t.Errorf("missing file: exit %d; want %d", code, exitInvalid)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"validate"},
		{"validate", "--format", "xml", "x.yaml"},
		{"validate", "--bogus", "x.yaml"},
		{"nosuchcommand"},
		{"graph"},
		{"graph", "--format", "png", "../../workflows/hello.yaml"},
		{"eval"},
		{"eval", "1", "--data", "{not json"},
		{"eval", "1", "--data", `{"inputs": 1}`},
		{"eval", "1", "--data", "@/no/such/file"},
		{"schema", "extra"},
	} {
		if code, out, errOut := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d; want %d\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
}

func TestSchemaCommand(t *testing.T) {
	code, out, _ := runCLI(t, "schema")
	if code != exitOK || out != string(schemas.WorkflowJSON) {
		t.Fatalf("exit %d; output is not the embedded schema", code)
	}
	if !json.Valid([]byte(out)) {
		t.Error("schema output is not JSON")
	}
}

func TestGraphCommand(t *testing.T) {
	code, out, _ := runCLI(t, "graph", "../../workflows/refund.tqw.yaml")
	if code != exitOK || !strings.HasPrefix(out, "flowchart TD\n") || !strings.Contains(out, `s_decide -->|"vars.amount #gt; 100"| s_ask`) {
		t.Fatalf("mermaid: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "graph", "--format", "dot", "../../workflows/retry.tqw.yaml")
	if code != exitOK || !strings.HasPrefix(out, `digraph "retry" {`) || !strings.Contains(out, `"call" -> "already_done" [label="catch http.status_4xx if error.status == 409", style=dashed]`) {
		t.Fatalf("dot: exit %d\n%s", code, out)
	}
	code, _, errOut := runCLI(t, "graph", "../../dsl/testdata/invalid/step_unknown_next.yaml")
	if code != exitInvalid || !strings.Contains(errOut, "step.unknown-ref") {
		t.Fatalf("invalid file: exit %d\n%s", code, errOut)
	}
}

func TestEvalCommand(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(data, []byte(`{"input": {"id": 7}, "steps": {"fetch": {"output": {"n": 2}}}, "run": {"id": "r1"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "vars.amount > 100", "--data", `{"vars": {"amount": 250}}`}, "true"},
		{[]string{"eval", "order ${ input.id } run ${ run.id }", "--data", "@" + data}, `"order 7 run r1"`},
		{[]string{"eval", "${ steps.fetch.output }", "--data", "@" + data}, "{\n  \"n\": 2\n}"},
		{[]string{"eval", "now()", "--now", "2026-05-01T10:00:00Z"}, `"2026-05-01T10:00:00Z"`},
		{[]string{"eval", "duration('1d')"}, `"1d"`},
		{[]string{"eval", "len(item)", "--data", `{"item": [1, 2, 3]}`}, "3"},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code != exitOK || strings.TrimSpace(out) != c.want {
			t.Errorf("%v: exit %d, output %q; want %q\n%s", c.args, code, out, c.want, errOut)
		}
	}
	if code, _, errOut := runCLI(t, "eval", "input.x >"); code != exitInvalid || !strings.Contains(errOut, "unexpected token") {
		t.Errorf("syntax error: exit %d %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "eval", "input.a.b", "--data", `{"input": {}}`); code != exitInvalid || !strings.Contains(errOut, "cannot fetch") {
		t.Errorf("run-time error: exit %d %s", code, errOut)
	}
}

func TestRunInvalidCountsErrors(t *testing.T) {
	bad := "../../dsl/testdata/invalid/schema_unknown_with_field.yaml"
	code, _, errOut := runCLI(t, "run", bad, "--store", "mem://invalid-count")
	if code != exitUsage || !strings.Contains(errOut, "is not a valid workflow (1 error); see 'tqw-dsl validate") {
		t.Fatalf("run of an invalid workflow: exit %d, %s", code, errOut)
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 errors", 1: "1 error", 2: "2 errors"} {
		if got := plural(n, "error"); got != want {
			t.Errorf("plural(%d) = %q; want %q", n, got, want)
		}
	}
}
