package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/dsl/testfile"
)

// TestEveryWorkflowHasATestFile: each example in workflows/ has its
// NAME.test.yaml, which tqw-dsl test (and make test) runs.
func TestEveryWorkflowHasATestFile(t *testing.T) {
	files, _ := filepath.Glob("../../workflows/*.yaml")
	var missing []string
	n := 0
	for _, f := range files {
		if testfile.Is(f) {
			continue
		}
		n++
		base := strings.TrimSuffix(strings.TrimSuffix(f, ".yaml"), ".tqw")
		if _, err := os.Stat(base + testfile.Suffix); err != nil {
			missing = append(missing, filepath.Base(f)+" (want "+filepath.Base(base+testfile.Suffix)+")")
		}
	}
	if n < 13 {
		t.Fatalf("%d workflows", n)
	}
	if len(missing) > 0 {
		t.Errorf("workflows without a test file: %s", strings.Join(missing, ", "))
	}
}

func TestTestRunsTheExamples(t *testing.T) {
	code, out, errOut := runCLI(t, "test", "../../workflows/")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "FAIL") || !strings.Contains(out, "ok   ../../workflows/refund.test.yaml: 5 cases passed") {
		t.Errorf("output:\n%s", out)
	}
}

// writeTest writes a workflow and its test file into a new folder and
// returns the test file's path.
func writeTest(t *testing.T, workflow, tests string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "w.tqw.yaml"), []byte(strings.TrimLeft(workflow, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "w.test.yaml")
	if err := os.WriteFile(p, []byte(strings.TrimLeft(tests, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const cliWorkflow = `
tqw: v1
name: w
steps:
  - id: fetch
    action: http
    with: {url: "https://shop.example/"}
    catch:
      - on: [http.status_4xx]
        next: missing
  - id: decide
    switch:
      - when: output.body.n > 1
        next: many
    next: one
  - id: many
    succeed: many
  - id: one
    succeed: one
  - id: missing
    fail: missing
`

const cliTests = `
tqw: test/v1
cases:
  - name: many
    mocks:
      - step: fetch
        output: {status: 200, body: {n: 5}}
    expect:
      result: many
      path: [fetch, decide, many]
  - name: wrong path
    mocks:
      - step: fetch
        output: {status: 200, body: {n: 0}}
    expect:
      result: many
      path: [fetch, decide, many]
`

func TestTestFailureNamesTheStepAndTheDiff(t *testing.T) {
	p := writeTest(t, cliWorkflow, cliTests)
	code, out, errOut := runCLI(t, "test", p)
	if code != exitFailed {
		t.Fatalf("exit %d; want %d\n%s%s", code, exitFailed, out, errOut)
	}
	for _, want := range []string{
		"ok   " + p + ": many (",
		"FAIL " + p + ": wrong path (",
		"    " + p + ":15:15: step one: result: the result differs",
		`        - "many"`,
		`        + "one"`,
		"    " + p + ":16:13: step one: path: the path differs: step 3 is one, want many",
		"          decide",
		"        - many",
		"        + one",
		"FAIL " + p + ": 1 of 2 cases failed",
	} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "1 of 2 cases failed") {
		t.Errorf("stderr: %s", errOut)
	}
}

func TestTestExitCodes(t *testing.T) {
	good := writeTest(t, cliWorkflow, cliTests)
	bad := writeTest(t, cliWorkflow, "tqw: test/v1\ncases:\n  - name: a\n    expect: {}\n    mockz: []\n")
	unknownStep := writeTest(t, cliWorkflow, "tqw: test/v1\ncases:\n  - name: a\n    mocks: [{step: fech, output: 1}]\n    expect: {}\n")
	noWorkflow := filepath.Join(t.TempDir(), "x.test.yaml")
	if err := os.WriteFile(noWorkflow, []byte("tqw: test/v1\ncases: [{name: a, expect: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"test", "--run", "^many$", good}, exitOK, ""},
		{[]string{"test", good}, exitFailed, "1 of 2 cases failed"},
		{[]string{"test", bad}, exitUsage, bad + `:5:5: error: at /cases/0: unknown field "mockz" [schema.unknown-field]`},
		{[]string{"test", unknownStep}, exitUsage, unknownStep + `:4:13: error: the mock names step "fech"`},
		{[]string{"test", noWorkflow}, exitUsage, "x.tqw.yaml"},
		{[]string{"test", "--run", "(", good}, exitUsage, "--run"},
		{[]string{"test", "--nope", good}, exitUsage, "unknown flag"},
		{[]string{"test", filepath.Join(t.TempDir(), "missing.test.yaml")}, exitUsage, "missing.test.yaml"},
		{[]string{"test", t.TempDir()}, exitUsage, "holds no test file"},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.err) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want %q)\n%s", c.args, code, c.code, errOut, c.err, out)
		}
	}
	// A bad file stops every file: nothing ran.
	code, out, _ := runCLI(t, "test", good, bad)
	if code != exitUsage || out != "" {
		t.Errorf("a good and a bad file: exit %d, output %q", code, out)
	}
}

func TestTestJSONReport(t *testing.T) {
	p := writeTest(t, cliWorkflow, cliTests)
	code, out, _ := runCLI(t, "test", "--json", "--cover", p)
	if code != exitFailed {
		t.Fatalf("exit %d", code)
	}
	var rep testReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.OK || rep.Cases != 2 || rep.Failed != 1 || len(rep.Files) != 1 {
		t.Fatalf("report %+v", rep)
	}
	f := rep.Files[0]
	c := f.Cases[1]
	if c.Name != "wrong path" || c.OK || c.Status != "succeeded" || string(c.Result) != `"one"` || strings.Join(c.Path, " ") != "fetch decide one" {
		t.Errorf("case %+v", c)
	}
	if len(c.Failures) != 2 || c.Failures[0].Expect != "result" || c.Failures[0].Line != 15 || c.Failures[0].Step != "one" {
		t.Errorf("failures %+v", c.Failures)
	}
	if f.Coverage == nil || strings.Join(f.Coverage.Unreached, " ") != "missing" || len(f.Coverage.Untaken) != 1 || f.Coverage.Untaken[0].Kind != "catch" {
		t.Errorf("coverage %+v", f.Coverage)
	}
}

func TestTestCover(t *testing.T) {
	p := writeTest(t, cliWorkflow, cliTests)
	_, out, _ := runCLI(t, "test", "--cover", "--run", "many", p)
	for _, want := range []string{
		"cover " + p + ": 3 of 5 steps, 1 of 3 branches",
		"    step not reached: one",
		"    step not reached: missing",
		"    branch not taken: fetch: catch http.status_4xx -> missing",
		"    branch not taken: decide: switch else -> one",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "wrong path") {
		t.Errorf("--run many ran another case:\n%s", out)
	}
}

func TestTestAllowRealCallsTheRealAction(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"n": 7}`)
	}))
	defer srv.Close()
	wf := strings.Replace(cliWorkflow, "https://shop.example/", srv.URL, 1)
	p := writeTest(t, wf, "tqw: test/v1\ncases:\n  - name: real\n    expect: {result: many}\n")
	code, out, _ := runCLI(t, "test", p)
	if code != exitFailed || !strings.Contains(out, "step fetch: mock: action http has no mock") {
		t.Errorf("without --allow-real: exit %d\n%s", code, out)
	}
	if code, out, errOut := runCLI(t, "test", "--allow-real", p); code != exitOK {
		t.Errorf("--allow-real: exit %d\n%s%s", code, out, errOut)
	}
}

func TestTestJUnitIsValid(t *testing.T) {
	p := writeTest(t, cliWorkflow, cliTests)
	junit := filepath.Join(t.TempDir(), "report.xml")
	if code, _, _ := runCLI(t, "test", "--junit", junit, p, "../../workflows/approval.test.yaml"); code != exitFailed {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkJUnit(b); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, want := range []string{`<testsuites name="tqw-dsl test" tests="5" failures="1" errors="0"`, `<testcase name="wrong path" classname="w"`,
		`<failure message="the result differs" type="result">`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %s:\n%s", want, b)
		}
	}
	// The checker itself refuses what the schema refuses.
	for _, bad := range []string{
		`<testsuites><testsuite tests="1" failures="0" errors="0"><testcase name="a"/></testsuite></testsuites>`,
		`<testsuites><testsuite name="s" tests="1" failures="0" errors="0" time="1s"><testcase name="a"/></testsuite></testsuites>`,
		`<testsuites><testsuite name="s" tests="1" failures="0" errors="0"><testcase name="a"><oops/></testcase></testsuite></testsuites>`,
		`<testsuites><testsuite name="s" tests="2" failures="0" errors="0"><testcase name="a"/></testsuite></testsuites>`,
	} {
		if checkJUnit([]byte(bad)) == nil {
			t.Errorf("checkJUnit accepted %s", bad)
		}
	}
}

// xmlElem is a parsed XML element.
type xmlElem struct {
	name     string
	attrs    map[string]string
	children []*xmlElem
}

func parseXML(b []byte) (*xmlElem, error) {
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	var stack []*xmlElem
	var root *xmlElem
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch x := tok.(type) {
		case xml.StartElement:
			e := &xmlElem{name: x.Name.Local, attrs: map[string]string{}}
			for _, a := range x.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(stack) > 0 {
				stack[len(stack)-1].children = append(stack[len(stack)-1].children, e)
			} else if root == nil {
				root = e
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	if root == nil {
		return nil, errors.New("no root element")
	}
	return root, nil
}

// junitRules are the elements of the JUnit XML schema CI systems read:
// Jenkins' xunit plugin's junit-10.xsd
// (github.com/jenkinsci/xunit-plugin, src/main/resources/org/jenkinsci/
// plugins/xunit/types/model/xsd/junit-10.xsd), restated as its allowed
// and required attributes and allowed children per element.
var junitRules = map[string]struct{ required, allowed, children []string }{
	"testsuites": {nil, []string{"name", "time", "tests", "failures", "errors"}, []string{"testsuite"}},
	"testsuite": {[]string{"name", "tests", "failures", "errors"},
		[]string{"name", "tests", "failures", "errors", "group", "time", "skipped", "timestamp", "hostname", "id", "package", "file", "log", "url"},
		[]string{"testsuite", "properties", "testcase", "system-out", "system-err"}},
	"testcase": {[]string{"name"}, []string{"name", "time", "classname", "group"},
		[]string{"skipped", "error", "failure", "rerunFailure", "rerunError", "flakyFailure", "flakyError", "system-out", "system-err"}},
	"failure":    {nil, []string{"type", "message"}, nil},
	"error":      {nil, []string{"type", "message"}, nil},
	"skipped":    {nil, []string{"type", "message"}, nil},
	"system-out": {nil, nil, nil},
	"system-err": {nil, nil, nil},
}

// surefireTime is the schema's SUREFIRE_TIME: the time attributes.
var surefireTime = regexp.MustCompile(`^(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]*)?$`)

// checkJUnit checks a report against junitRules, and that each suite's
// tests and failures count its test cases.
func checkJUnit(b []byte) error {
	root, err := parseXML(b)
	if err != nil {
		return err
	}
	if root.name != "testsuites" {
		return fmt.Errorf("root element %s; want testsuites", root.name)
	}
	var check func(e *xmlElem) error
	check = func(e *xmlElem) error {
		r, ok := junitRules[e.name]
		if !ok {
			return fmt.Errorf("element %s is not in the schema", e.name)
		}
		for _, a := range r.required {
			if _, ok := e.attrs[a]; !ok {
				return fmt.Errorf("%s lacks the required attribute %s", e.name, a)
			}
		}
		for a, v := range e.attrs {
			if !slices.Contains(r.allowed, a) {
				return fmt.Errorf("%s has attribute %s, which the schema does not allow", e.name, a)
			}
			if a == "time" && e.name != "testcase" && !surefireTime.MatchString(v) {
				return fmt.Errorf("%s time %q is not a SUREFIRE_TIME", e.name, v)
			}
		}
		cases, failed := 0, 0
		for _, c := range e.children {
			if !slices.Contains(r.children, c.name) {
				return fmt.Errorf("%s may not hold %s", e.name, c.name)
			}
			if c.name == "testcase" {
				cases++
				if slices.ContainsFunc(c.children, func(x *xmlElem) bool { return x.name == "failure" }) {
					failed++
				}
			}
			if err := check(c); err != nil {
				return err
			}
		}
		if e.name == "testsuite" && (e.attrs["tests"] != fmt.Sprint(cases) || e.attrs["failures"] != fmt.Sprint(failed)) {
			return fmt.Errorf("testsuite %s says tests=%s failures=%s; it holds %d cases, %d failed", e.attrs["name"], e.attrs["tests"], e.attrs["failures"], cases, failed)
		}
		return nil
	}
	return check(root)
}

// TestTestingDocExample: the test file docs/TESTING.md shows is
// workflows/refund.test.yaml, and every test-file example there parses.
func TestTestingDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/TESTING.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	n := 0
	for _, b := range blocks {
		if !strings.Contains(b[1], "tqw: test/v1") {
			continue
		}
		n++
		if f, diags := testfile.Parse("docs/TESTING.md", []byte(b[1])); f == nil {
			t.Errorf("example %d: %s", n, diags)
		}
		if n == 1 {
			want, err := os.ReadFile("../../workflows/refund.test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if b[1] != string(want) {
				t.Error("the first example of docs/TESTING.md differs from workflows/refund.test.yaml")
			}
		}
	}
	if n == 0 {
		t.Fatal("docs/TESTING.md shows no test file")
	}
}

// TestTestVirtualTime: a 3-day wait_signal timeout ends three virtual
// days after the case's start.
func TestTestVirtualTime(t *testing.T) {
	code, out, _ := runCLI(t, "test", "--json", "--run", "nobody answers", "../../workflows/approval.test.yaml")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	var rep testReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Files) != 1 || len(rep.Files[0].Cases) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	if c := rep.Files[0].Cases[0]; c.VirtualMS != 3*24*3600*1000 || c.Status != "failed" {
		t.Errorf("case %+v; want failed 3 virtual days in", c)
	}
}
