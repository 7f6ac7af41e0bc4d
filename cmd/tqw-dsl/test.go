package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/interpreter/wftest"
)

func init() { commands = append(commands, newTestCmd) }

// testFlags are the flags of test.
type testFlags struct {
	run       string
	asJSON    bool
	junit     string
	cover     bool
	allowReal bool
	decls     declLookup
}

func newTestCmd() *cobra.Command {
	var f testFlags
	cmd := &cobra.Command{
		Use:   "test [FILE|DIR...]",
		Short: "Run the test cases of workflows with mocked actions and a virtual clock",
		Long: `test runs the cases of workflow test files (NAME.test.yaml beside NAME.tqw.yaml or
NAME.yaml; docs/TESTING.md, schemas/workflow-test.schema.json). A directory
stands for every *.test.yaml under it, a workflow file for its test file;
no argument means the current directory.

Each case is one run on a fresh in-memory store, with the real loader,
interpreter and runtime. Actions are mocked (by step id or by action); an
action a case does not mock fails the case, naming the step, unless
--allow-real runs the real one (http, llm, shell). The clock is virtual:
it jumps to the next timer whenever every run is idle, so a 3-day sleep
or a wait_signal timeout costs nothing.

It prints a line per case (ok or FAIL), and for a failure the test
file's line, the step and what differs (- want, + got); --json prints one
JSON report instead, --junit FILE also writes JUnit XML for CI, --cover
adds the steps and the switch, catch and on_timeout branches no case
reached. --run REGEX runs only the cases whose name matches.

Exit code 0 means every case passed, 1 that one failed, 2 a usage error or
a test file (or the workflow it tests) that does not load, reported as
file:line:col: error: message [code].`,
		RunE: func(cmd *cobra.Command, args []string) error { return runTests(cmd, args, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "run only the cases whose name matches this regular expression")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON report instead of text")
	fl.StringVar(&f.junit, "junit", "", "also write the results as JUnit XML to this file, for CI")
	fl.BoolVar(&f.cover, "cover", false, "print the steps and branches (switch cases, catch rules, on_timeout) no case reached")
	fl.BoolVar(&f.allowReal, "allow-real", false, "run the real action (http, llm, shell) for an attempt no mock answers, instead of failing the case")
	addActionsFlag(cmd, &f.decls)
	return cmd
}

// loadedTest is a test file ready to run.
type loadedTest struct {
	file *testfile.File
	w    *interpreter.Workflow
	opts dsl.Options
}

func runTests(cmd *cobra.Command, args []string, f *testFlags) error {
	var match *regexp.Regexp
	if f.run != "" {
		re, err := regexp.Compile(f.run)
		if err != nil {
			return failf(exitUsage, "--run %q: %v", f.run, err)
		}
		match = re
	}
	if len(args) == 0 {
		args = []string{"."}
	}
	paths, err := expandTestArgs(args)
	if err != nil {
		return err
	}
	// Every file loads before any case runs: a bad file is a usage error
	// and nothing ran.
	var tests []loadedTest
	var diags dsl.Diagnostics
	for _, p := range paths {
		t, d, err := loadTest(p, &f.decls)
		if err != nil {
			return err
		}
		diags = append(diags, d...)
		if t != nil {
			tests = append(tests, *t)
		}
	}
	if errs := diags.Errors(); len(errs) > 0 {
		fmt.Fprint(cmd.ErrOrStderr(), diags.String())
		return failf(exitUsage, "%s in the test files; nothing ran", plural(len(errs), "error"))
	}
	var real *actions.Registry
	if f.allowReal {
		real = builtin.New(builtin.Options{EnableShell: true})
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	began := time.Now()
	var results []*wftest.FileResult
	var elapsed []time.Duration
	out := cmd.OutOrStdout()
	for _, t := range tests {
		start := time.Now()
		r := wftest.Run(ctx, t.file, t.w, wftest.Options{DSL: t.opts, Real: real, Match: match})
		results = append(results, r)
		elapsed = append(elapsed, time.Since(start))
		if !f.asJSON {
			writeTestText(out, r, elapsed[len(elapsed)-1], f.cover)
		}
	}
	if f.asJSON {
		if err := writeTestJSON(out, results, f.cover); err != nil {
			return err
		}
	}
	if f.junit != "" {
		if err := writeJUnitFile(f.junit, results, elapsed, time.Since(began)); err != nil {
			return failf(exitUsage, "--junit %s: %v", f.junit, err)
		}
	}
	cases, failed := 0, 0
	for _, r := range results {
		cases += len(r.Cases)
		failed += r.Failed()
	}
	if cases == 0 && match != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "tqw-dsl test: no case matches --run %q\n", f.run)
	}
	if failed > 0 {
		return failf(exitFailed, "%d of %s failed", failed, plural(cases, "case"))
	}
	return nil
}

// expandTestArgs turns the arguments into test files: test files as
// given, a workflow file as its test file, a directory as the test files
// under it.
func expandTestArgs(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, failf(exitUsage, "%s: %v", a, errors.Unwrap(err))
		}
		if !st.IsDir() {
			if !testfile.Is(a) {
				t := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(a, ".yaml"), ".yml"), ".tqw") + testfile.Suffix
				if _, err := os.Stat(t); err != nil {
					return nil, failf(exitUsage, "%s is not a test file (NAME%s) and has none beside it (%s)", a, testfile.Suffix, t)
				}
				a = t
			}
			out = append(out, a)
			continue
		}
		found, err := filesUnder(a, testfile.Is)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, failf(exitUsage, "directory %s holds no test file (*%s)", a, testfile.Suffix)
		}
		out = append(out, found...)
	}
	return out, nil
}

// loadTest reads a test file and the workflow it tests; the diagnostics
// say what keeps it from running (testfile.Load's, as validate reports
// them, and the workflow's own when it does not load).
func loadTest(path string, decls *declLookup) (*loadedTest, dsl.Diagnostics, error) {
	src, _, err := dsl.ReadFile(nil, path, dsl.DefaultLimits)
	if err != nil {
		return nil, dsl.Diagnostics{{File: path, Line: 1, Col: 1, EndLine: 1, EndCol: 1, Severity: dsl.SeverityError,
			Code: dsl.CodeFileRead, Message: fmt.Sprintf("cannot read the file: %v", err)}}, nil
	}
	opts, err := decls.options(path)
	if err != nil {
		return nil, nil, err
	}
	f, diags := testfile.Load(path, src, opts)
	if f == nil {
		return nil, diags, nil
	}
	w, err := interpreter.Load(f.Workflow, opts)
	if err != nil {
		var le *interpreter.LoadError
		if errors.As(err, &le) && len(le.Diagnostics) > 0 {
			return nil, append(diags, le.Diagnostics...), nil
		}
		at := f.WorkflowPos
		return nil, append(diags, dsl.Diagnostic{File: path, Line: at.Line, Col: at.Col, EndLine: at.Line, EndCol: at.Col + 1,
			Severity: dsl.SeverityError, Code: testfile.CodeWorkflow, Message: fmt.Sprintf("the workflow under test does not load: %v", err)}), nil
	}
	return &loadedTest{file: f, w: w, opts: opts}, diags, nil
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func writeTestText(out io.Writer, r *wftest.FileResult, took time.Duration, cover bool) {
	name := r.File.Path
	for _, c := range r.Cases {
		if len(c.Failures) == 0 {
			fmt.Fprintf(out, "ok   %s: %s (%s)\n", name, c.Name, seconds(c.Elapsed))
			continue
		}
		fmt.Fprintf(out, "FAIL %s: %s (%s)\n", name, c.Name, seconds(c.Elapsed))
		for _, fl := range c.Failures {
			fmt.Fprintf(out, "    %s\n", failureLine(name, fl))
			if fl.Want != "" || fl.Got != "" {
				for _, l := range lineDiff(fl.Want, fl.Got) {
					fmt.Fprintf(out, "        %s\n", l)
				}
			}
		}
	}
	if n := r.Failed(); n > 0 {
		fmt.Fprintf(out, "FAIL %s: %d of %s failed (%s)\n", name, n, plural(len(r.Cases), "case"), seconds(took))
	} else {
		fmt.Fprintf(out, "ok   %s: %s passed (%s)\n", name, plural(len(r.Cases), "case"), seconds(took))
	}
	if cover {
		steps, reached, branches, taken := r.Coverage.Counts()
		fmt.Fprintf(out, "cover %s: %d of %d steps, %d of %d branches\n", name, reached, steps, taken, branches)
		for _, s := range r.Coverage.Unreached() {
			fmt.Fprintf(out, "    step not reached: %s\n", s)
		}
		for _, b := range r.Coverage.Untaken() {
			fmt.Fprintf(out, "    branch not taken: %s\n", b)
		}
	}
}

// failureLine is file:line:col: step S: expect: message.
func failureLine(file string, fl wftest.Failure) string {
	s := fmt.Sprintf("%s:%d:%d: ", file, fl.Pos.Line, fl.Pos.Col)
	if fl.Step != "" {
		s += "step " + fl.Step + ": "
	}
	return s + fl.Expect + ": " + fl.Message
}

// lineDiff renders want and got as a line diff: "  " for a line both
// have, "- " for want's, "+ " for got's (longest common subsequence).
func lineDiff(want, got string) []string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	if len(a)*len(b) > 1_000_000 { // too long to align: both in full
		var out []string
		for _, l := range a {
			out = append(out, "- "+l)
		}
		for _, l := range b {
			out = append(out, "+ "+l)
		}
		return out
	}
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	return out
}

// The --json report.
type (
	testReport struct {
		OK     bool             `json:"ok"`
		Cases  int              `json:"cases"`
		Failed int              `json:"failed"`
		Files  []testFileReport `json:"files"`
	}
	testFileReport struct {
		File     string           `json:"file"`
		Workflow string           `json:"workflow"`
		OK       bool             `json:"ok"`
		Cases    []testCaseReport `json:"cases"`
		Coverage *testCoverReport `json:"coverage,omitempty"`
	}
	testCaseReport struct {
		Name      string              `json:"name"`
		OK        bool                `json:"ok"`
		ElapsedMS float64             `json:"elapsed_ms"`
		VirtualMS int64               `json:"virtual_ms"`
		Status    string              `json:"status"`
		Result    json.RawMessage     `json:"result,omitempty"`
		Error     string              `json:"error,omitempty"`
		Path      []string            `json:"path"`
		Failures  []testFailureReport `json:"failures"`
	}
	testFailureReport struct {
		File    string `json:"file"`
		Line    int    `json:"line"`
		Col     int    `json:"col"`
		Expect  string `json:"expect"`
		Step    string `json:"step,omitempty"`
		Message string `json:"message"`
		Want    string `json:"want,omitempty"`
		Got     string `json:"got,omitempty"`
	}
	testCoverReport struct {
		Steps     int             `json:"steps"`
		Reached   int             `json:"reached"`
		Branches  int             `json:"branches"`
		Taken     int             `json:"taken"`
		Unreached []string        `json:"unreached_steps"`
		Untaken   []wftest.Branch `json:"untaken_branches"`
	}
)

func writeTestJSON(out io.Writer, results []*wftest.FileResult, cover bool) error {
	rep := testReport{OK: true, Files: []testFileReport{}}
	for _, r := range results {
		fr := testFileReport{File: r.File.Path, Workflow: r.File.Workflow, OK: r.Failed() == 0, Cases: []testCaseReport{}}
		for _, c := range r.Cases {
			cr := testCaseReport{Name: c.Name, OK: len(c.Failures) == 0, ElapsedMS: float64(c.Elapsed.Microseconds()) / 1000, VirtualMS: c.Virtual.Milliseconds(),
				Status: c.Status, Error: c.Error, Path: c.Path, Failures: []testFailureReport{}}
			if len(c.Result) > 0 {
				cr.Result = c.Result
			}
			for _, fl := range c.Failures {
				cr.Failures = append(cr.Failures, testFailureReport{File: r.File.Path, Line: fl.Pos.Line, Col: fl.Pos.Col,
					Expect: fl.Expect, Step: fl.Step, Message: fl.Message, Want: fl.Want, Got: fl.Got})
			}
			fr.Cases = append(fr.Cases, cr)
		}
		if cover {
			s, rs, b, tb := r.Coverage.Counts()
			fr.Coverage = &testCoverReport{Steps: s, Reached: rs, Branches: b, Taken: tb,
				Unreached: append([]string{}, r.Coverage.Unreached()...), Untaken: append([]wftest.Branch{}, r.Coverage.Untaken()...)}
		}
		rep.Cases += len(r.Cases)
		rep.Failed += r.Failed()
		rep.OK = rep.OK && fr.OK
		rep.Files = append(rep.Files, fr)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// JUnit XML, as CI systems read it (Jenkins' junit-10.xsd: testsuites,
// testsuite with name, tests, failures and errors, testcase with name,
// classname and time, failure with message and type).
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Errors   int          `xml:"errors,attr"`
		Time     string       `xml:"time,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name      string      `xml:"name,attr"`
		Tests     int         `xml:"tests,attr"`
		Failures  int         `xml:"failures,attr"`
		Errors    int         `xml:"errors,attr"`
		Time      string      `xml:"time,attr"`
		Timestamp string      `xml:"timestamp,attr"`
		File      string      `xml:"file,attr"`
		Cases     []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Time      string        `xml:"time,attr"`
		Failures  []junitReport `xml:"failure"`
	}
	junitReport struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}
)

func junitTime(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

func writeJUnit(out io.Writer, results []*wftest.FileResult, elapsed []time.Duration, total time.Duration) error {
	doc := junitSuites{Name: "tqw-dsl test", Time: junitTime(total)}
	for i, r := range results {
		s := junitSuite{Name: r.File.Path, Tests: len(r.Cases), Failures: r.Failed(), Time: junitTime(elapsed[i]),
			Timestamp: time.Now().UTC().Format("2006-01-02T15:04:05"), File: r.File.Path}
		for _, c := range r.Cases {
			jc := junitCase{Name: c.Name, Classname: strings.TrimSuffix(filepath.Base(r.File.Path), testfile.Suffix), Time: junitTime(c.Elapsed)}
			for _, fl := range c.Failures {
				text := failureLine(r.File.Path, fl)
				if fl.Want != "" || fl.Got != "" {
					text += "\n" + strings.Join(lineDiff(fl.Want, fl.Got), "\n")
				}
				jc.Failures = append(jc.Failures, junitReport{Message: fl.Message, Type: fl.Expect, Text: text})
			}
			s.Cases = append(s.Cases, jc)
		}
		doc.Tests += s.Tests
		doc.Failures += s.Failures
		doc.Suites = append(doc.Suites, s)
	}
	if _, err := io.WriteString(out, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(out)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(out, "\n")
	return err
}

func writeJUnitFile(path string, results []*wftest.FileResult, elapsed []time.Duration, total time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeJUnit(f, results, elapsed, total); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
