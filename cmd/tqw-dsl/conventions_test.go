package main

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// tableRow is one row of the exit-code or environment table: its key (a
// code, or the variables joined by ", ") and its text.
type tableRow struct{ key, text string }

// helpTables parses the two tables out of the root --help.
func helpTables(t *testing.T, help string) (codes, env []tableRow) {
	t.Helper()
	section := func(title string) []string {
		i := strings.Index(help, "\n"+title+"\n")
		if i < 0 {
			t.Fatalf("the root --help has no %q section:\n%s", title, help)
		}
		body, _, _ := strings.Cut(help[i+len(title)+2:], "\n\n")
		return strings.Split(strings.TrimRight(body, "\n"), "\n")
	}
	codeLine := regexp.MustCompile(`^  (\d+) +(.*)$`)
	for _, line := range section("Exit codes (the same for every command):") {
		if m := codeLine.FindStringSubmatch(line); m != nil {
			codes = append(codes, tableRow{m[1], m[2]})
		} else if len(codes) > 0 && strings.HasPrefix(line, "      ") {
			codes[len(codes)-1].text += " " + strings.TrimSpace(line)
		} else {
			t.Fatalf("unexpected line in the exit codes of --help: %q", line)
		}
	}
	for _, line := range section("Environment variables:") {
		switch {
		case strings.HasPrefix(line, "      ") && len(env) > 0:
			r := &env[len(env)-1]
			r.text = strings.TrimSpace(r.text + " " + strings.TrimSpace(line))
		case strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   "):
			env = append(env, tableRow{key: strings.TrimSpace(line)})
		default:
			t.Fatalf("unexpected line in the environment of --help: %q", line)
		}
	}
	return codes, env
}

// readmeTable parses the two-column markdown table under the README
// heading, with code spans unquoted.
func readmeTable(t *testing.T, readme, heading string) []tableRow {
	t.Helper()
	var rows []tableRow
	for _, cells := range readmeCells(t, readme, heading)[1:] { // after the header
		if len(cells) != 2 {
			t.Fatalf("README.md %s: row %q has %d cells, want 2", heading, cells, len(cells))
		}
		unquote := func(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "`", "")) }
		rows = append(rows, tableRow{unquote(cells[0]), unquote(cells[1])})
	}
	return rows
}

// readmeCells returns the rows of the first markdown table under the
// README heading, the header row first, each cell trimmed.
func readmeCells(t *testing.T, readme, heading string) [][]string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	var rows [][]string
	separator := regexp.MustCompile(`^\|[-| ]+\|$`)
	for _, line := range strings.Split(readme[i+len(heading)+2:], "\n") {
		if strings.HasPrefix(line, "#") || len(rows) > 0 && !strings.HasPrefix(line, "|") {
			break
		}
		if !strings.HasPrefix(line, "|") || separator.MatchString(line) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("README.md %s holds no table", heading)
	}
	return rows
}

// TestHelpTablesMatchREADME checks that the exit-code and environment
// tables of the root --help and of README.md say the same, row by row.
func TestHelpTablesMatchREADME(t *testing.T) {
	code, help, errOut := runCLI(t, "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d %s", code, errOut)
	}
	codes, env := helpTables(t, help)
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, c := range []struct {
		name         string
		help, readme []tableRow
	}{
		{"exit codes", codes, readmeTable(t, readme, "### Exit codes")},
		{"environment variables", env, readmeTable(t, readme, "### Environment variables")},
	} {
		if !slices.Equal(c.help, c.readme) {
			t.Errorf("the %s of --help and README.md differ:\n--help:\n%s\nREADME.md:\n%s", c.name, rowsText(c.help), rowsText(c.readme))
		}
	}
	if len(codes) != len(exitCodes) || len(env) != len(envVars) {
		t.Fatalf("--help shows %d exit codes and %d variables; the tables hold %d and %d", len(codes), len(env), len(exitCodes), len(envVars))
	}
	for i, e := range exitCodes {
		if codes[i].key != strconv.Itoa(e.code) {
			t.Errorf("exit code row %d is %s, want %d", i, codes[i].key, e.code)
		}
	}
	// Every other command's help points at the tables.
	for _, args := range [][]string{{"run", "--help"}, {"status", "--help"}, {"store", "check", "--help"}, {"validate", "--help"}} {
		if _, out, _ := runCLI(t, args...); !strings.HasSuffix(out, rootHelpFooter+"\n") {
			t.Errorf("tqw-dsl %s does not end with %q:\n%s", strings.Join(args, " "), rootHelpFooter, out)
		}
	}
}

func rowsText(rows []tableRow) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString("  " + r.key + " | " + r.text + "\n")
	}
	return b.String()
}

// envReadsOf finds, in the non-test Go files of this module's packages
// that tqw-dsl links, every call that reads the environment (a function
// or method named Getenv, LookupEnv or Environ, whatever it is called
// through): the names read as a literal or a string constant, and the
// packages that read names known only at run time.
func envReadsOf(t *testing.T) (static map[string][]string, dynamic map[string][]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "github.com/tqw-dsl/tqw"}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}{{end}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		path   string
		files  []*ast.File
		consts map[string]string
	}
	fset := token.NewFileSet()
	pkgs := map[string]*pkg{}
	for _, line := range strings.Fields(string(out)) {
		parts := strings.Split(line, "|")
		p := &pkg{path: parts[0], consts: map[string]string{}}
		for _, name := range strings.Split(parts[2], ",") {
			f, err := parser.ParseFile(fset, filepath.Join(parts[1], name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			p.files = append(p.files, f)
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								p.consts[n.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
		pkgs[p.path] = p
	}
	static, dynamic = map[string][]string{}, map[string][]string{}
	for _, p := range pkgs {
		for _, f := range p.files {
			imports := map[string]string{}
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				name := filepath.Base(path)
				if im.Name != nil {
					name = im.Name.Name
				}
				imports[name] = path
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var name string
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				lower := strings.ToLower(name)
				if lower != "getenv" && lower != "lookupenv" && name != "Environ" {
					return true
				}
				site := fset.Position(call.Pos()).String()
				var env string
				resolved := false
				if len(call.Args) == 1 {
					switch a := call.Args[0].(type) {
					case *ast.BasicLit:
						env, _ = strconv.Unquote(a.Value)
						resolved = a.Kind == token.STRING
					case *ast.Ident:
						env, resolved = p.consts[a.Name]
					case *ast.SelectorExpr:
						if x, ok := a.X.(*ast.Ident); ok && pkgs[imports[x.Name]] != nil {
							env, resolved = pkgs[imports[x.Name]].consts[a.Sel.Name]
						}
					}
				}
				if resolved {
					static[env] = append(static[env], site)
				} else {
					dynamic[p.path] = append(dynamic[p.path], site)
				}
				return true
			})
		}
	}
	return static, dynamic
}

// TestEnvTableCoversTheCode checks the environment table against the
// code: the variables it says are read by name are exactly those the
// code reads by name, and every read of a name known only at run time is
// in a package whose reads a row of the table describes.
func TestEnvTableCoversTheCode(t *testing.T) {
	t.Parallel()
	static, dynamic := envReadsOf(t)
	var read, listed []string
	for name := range static {
		read = append(read, name)
	}
	hows := map[int]bool{}
	for _, v := range envVars {
		hows[v.how] = true
		if v.how == readByName {
			listed = append(listed, v.names...)
		}
	}
	sort.Strings(read)
	sort.Strings(listed)
	if !slices.Equal(read, listed) {
		t.Errorf("the code reads %v by name; the table lists %v as read by name", read, listed)
		for _, name := range read {
			if !slices.Contains(listed, name) {
				t.Errorf("  %s is read at %v: add it to envVars in help.go and to README.md", name, static[name])
			}
		}
	}
	for pkg, sites := range dynamic {
		how, ok := dynamicReaders[pkg]
		if !ok || !hows[how] {
			t.Errorf("%s reads variables named at run time (%v): describe them in envVars and dynamicReaders", pkg, sites)
		}
	}
	for pkg := range dynamicReaders {
		if dynamic[pkg] == nil {
			t.Errorf("dynamicReaders names %s, which reads no variable named at run time any more", pkg)
		}
	}
	if len(read) < 5 {
		t.Fatalf("the scan found only %v: it is broken", read)
	}
}

// TestVersion checks --version against the build information the Go
// toolchain reads from the same binary, and the format of a build from a
// repository with uncommitted changes.
func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := runBin(t, t.TempDir(), nil, nil, "--version")
	if code != exitOK {
		t.Fatalf("--version: exit %d", code)
	}
	info, err := exec.Command("go", "version", "-m", tqwBin).Output()
	if err != nil {
		t.Fatal(err)
	}
	field := func(re string) string {
		if m := regexp.MustCompile(re).FindSubmatch(info); m != nil {
			return string(m[1])
		}
		return ""
	}
	version, rev := field(`(?m)^\tmod\t\S+\t(\S+)`), field(`(?m)^\tbuild\tvcs\.revision=(\S+)`)
	if version == "" || !strings.HasPrefix(out, "tqw-dsl "+version+" (module github.com/tqw-dsl/tqw)\n") {
		t.Errorf("--version = %q; go version -m says the module version is %q", out, version)
	}
	if rev != "" && !strings.Contains(out, "revision "+rev) || rev == "" && !strings.Contains(out, "revision unknown: built without version control information") {
		t.Errorf("--version = %q; go version -m says the revision is %q", out, rev)
	}
	if goVersion := field(`^\S+: (go\S+)`); !strings.Contains(out, goVersion+" ") {
		t.Errorf("--version = %q; built with %s", out, goVersion)
	}

	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/tqw-dsl/tqw", Version: "v0.0.0-20260102100000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-01-02T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := versionText(bi, true)
	if !strings.HasPrefix(got, "tqw-dsl v0.0.0-20260102100000-0123456789ab+dirty (module github.com/tqw-dsl/tqw)\nrevision 0123456789abcdef (2026-01-02T10:00:00Z), with uncommitted changes\ngo1.26.0 ") {
		t.Errorf("versionText of a dirty build = %q", got)
	}
	if got := versionText(nil, false); !strings.Contains(got, "no build information") {
		t.Errorf("versionText without build information = %q", got)
	}
}

// TestStoreErrorsAreNotUsageErrors checks that a store that cannot be
// opened is a failure (1) and a URL that names no store a usage error (2).
func TestStoreErrorsAreNotUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hello := abs(t, "../../workflows/hello.yaml")
	for _, args := range [][]string{{"run", hello}, {"submit", hello}, {"worker"}} {
		code, _, errOut := runBin(t, dir, []string{"TQW_STORE="}, nil, append(args, "--store", "file://"+blocker+"/store")...)
		if code != exitFailed || !strings.Contains(errOut, blocker) {
			t.Errorf("tqw-dsl %s on a folder that cannot be made: exit %d, want %d\n%s", args[0], code, exitFailed, errOut)
		}
	}
	for _, args := range [][]string{{"run", hello}, {"list"}, {"status", "r1"}} {
		code, _, errOut := runBin(t, dir, []string{"TQW_STORE="}, nil, append(args, "--store", "gs://bucket")...)
		if code != exitUsage || !strings.Contains(errOut, `unknown scheme "gs"`) {
			t.Errorf("tqw-dsl %s --store gs://bucket: exit %d, want %d\n%s", args[0], code, exitUsage, errOut)
		}
	}
}

// TestUnreadableFilesAreUsageErrors checks that a workflow file that
// cannot be read is a usage error for the commands that take one, except
// validate, which reports it as a finding and goes on with the others.
func TestUnreadableFilesAreUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, args := range [][]string{{"graph", missing}, {"run", missing, "--store", "mem://unreadable"}, {"submit", missing, "--store", "file://" + filepath.Dir(missing)}} {
		if code, _, errOut := runCLI(t, args...); code != exitUsage || !strings.Contains(errOut, "no such file") {
			t.Errorf("tqw-dsl %s: exit %d, want %d\n%s", strings.Join(args, " "), code, exitUsage, errOut)
		}
	}
	if code, out, _ := runCLI(t, "validate", missing, "../../workflows/hello.yaml"); code != exitInvalid || !strings.Contains(out, "cannot read the file") || !strings.Contains(out, "hello.yaml: valid") {
		t.Errorf("validate of a missing and a valid file: exit %d\n%s", code, out)
	}
}

// TestMemStoreRefusedForDetachedRuns checks that submit and run --detach
// refuse a mem:// store, which the run would not outlive, and write
// nothing.
func TestMemStoreRefusedForDetachedRuns(t *testing.T) {
	hello := "../../workflows/hello.yaml"
	name := freshMemName("detached")
	for _, args := range [][]string{{"submit", hello}, {"run", hello, "--detach"}, {"run", hello, "--detach", "--json"}} {
		code, out, errOut := runCLI(t, append(args, "--store", "mem://"+name)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "mem:// store lives only in this process, so the run would vanish when it exits") {
			t.Errorf("tqw-dsl %s --store mem://%s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), name, code, out, errOut)
		}
	}
	if objs, err := mem.Named(name).List(context.Background(), "", "", 0); err != nil || len(objs) != 0 {
		t.Fatalf("the refused commands wrote %v (%v)", objs, err)
	}
	// run without --detach works the run itself, so mem:// is fine.
	if code, out, errOut := runCLI(t, "run", hello, "--store", "mem://"+name); code != exitOK || out != "Hello, world!\n" {
		t.Fatalf("run on mem://: exit %d %q %s", code, out, errOut)
	}
}

// TestCancelJSON checks cancel --json.
func TestCancelJSON(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "run", abs(t, testdata+"e2e_wait.yaml"), "--detach", "--run-id", "c1")
	out, _ := c.must(0, "cancel", "c1", "--json")
	var got struct {
		Run       string `json:"run"`
		Cancelled bool   `json:"cancelled"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Run != "c1" || !got.Cancelled || strings.Count(out, "\n") != 1 {
		t.Fatalf("cancel --json printed %q (%v)", out, err)
	}
	if code, out, _ := c.run("cancel", "c1", "--json"); code != exitFailed || out != "" {
		t.Fatalf("cancel --json of an ended run: exit %d, stdout %q", code, out)
	}
}

// TestInvalidRunIDEchoedSafely gives the read-only verbs run ids with
// bytes that are not UTF-8 and control characters: the error shows them
// escaped, in valid UTF-8, with no raw control byte.
func TestInvalidRunIDEchoedSafely(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "run", abs(t, "../../workflows/hello.yaml"), "--run-id", "r1")
	for _, c2 := range []struct{ id, want string }{
		{"caf\xc3\xa9", `"café": character 'é' not allowed`},
		{"r\xc3", `"r\xc3": byte 0xc3 (not UTF-8) not allowed`},
		{"x\x1b[2Jy", `"x\x1b[2Jy": character '\x1b' not allowed`},
	} {
		for _, verb := range []string{"status", "history", "cancel"} {
			code, _, errOut := c.run(verb, c2.id)
			if code != exitUsage || !strings.Contains(errOut, c2.want) || !utf8.ValidString(errOut) || strings.ContainsAny(errOut, "\x1b\u00c3") {
				t.Errorf("tqw-dsl %s %q: exit %d, stderr %q; want exit %d and %s", verb, c2.id, code, errOut, exitUsage, c2.want)
			}
		}
		if code, _, errOut := c.run("run", abs(t, "../../workflows/hello.yaml"), "--run-id", c2.id); code != exitUsage || !strings.Contains(errOut, c2.want) {
			t.Errorf("run --run-id %q: exit %d, stderr %q", c2.id, code, errOut)
		}
	}
}

// TestHistoryOfARunWithNoStepYet checks that history says so instead of
// printing nothing.
func TestHistoryOfARunWithNoStepYet(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "submit", abs(t, "../../workflows/hello.yaml"), "--run-id", "fresh")
	out, errOut := c.must(0, "history", "fresh")
	if out != "" || !strings.Contains(errOut, "run fresh has no step in its history yet (it is pending)") || !strings.Contains(errOut, "tqw-dsl worker") {
		t.Fatalf("history of a submitted run: stdout %q, stderr %q", out, errOut)
	}
	if out, errOut := c.must(0, "history", "fresh", "--json"); out != "" || errOut != "" {
		t.Fatalf("history --json of a submitted run: stdout %q, stderr %q; want nothing", out, errOut)
	}
}

// TestListShowsUntil checks that list's DETAIL says when a sleeping run
// resumes.
func TestListShowsUntil(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "run", abs(t, "testdata/sleep_long.yaml"), "--detach", "--run-id", "napper")
	c.must(0, "worker", "--idle-exit")
	out, _ := c.must(0, "status", "napper", "--json")
	var st struct {
		State string `json:"state"`
		Until string `json:"until"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.State != "scheduled" || st.Until == "" {
		t.Fatalf("status of the sleeping run: %s (%v)", out, err)
	}
	list, _ := c.must(0, "list")
	until, err := time.Parse(time.RFC3339Nano, st.Until)
	if err != nil {
		t.Fatal(err)
	}
	want := "until " + until.UTC().Format(time.RFC3339)
	if !regexp.MustCompile(`napper +sleep-long +scheduled +\S+ +` + regexp.QuoteMeta(want) + `\n`).MatchString(list) {
		t.Fatalf("list does not show %q for the sleeping run:\n%s", want, list)
	}
}

// TestListByWorkflowAndAfter checks list's --workflow (through the
// workflow label's index) and --after (the cursor).
func TestListByWorkflowAndAfter(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "run", abs(t, "testdata/sleep_long.yaml"), "--detach", "--run-id", "nap-1")
	c.must(0, "run", abs(t, "testdata/sleep_long.yaml"), "--detach", "--run-id", "nap-2")
	c.must(0, "run", abs(t, "../../workflows/hello.yaml"), "--detach", "--run-id", "hi-1")
	ids := func(out string) string {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Fields(line)[0])
		}
		return strings.Join(got, " ")
	}
	if out, _ := c.must(0, "list", "--workflow", "sleep-long"); ids(out) != "nap-1 nap-2" {
		t.Fatalf("list --workflow sleep-long:\n%s", out)
	}
	if out, _ := c.must(0, "list", "--label", "workflow=sleep-long", "--after", "nap-1"); ids(out) != "nap-2" {
		t.Fatalf("list --label workflow=sleep-long --after nap-1:\n%s", out)
	}
	if out, _ := c.must(0, "list", "--after", "hi-1", "--limit", "1"); ids(out) != "nap-1" {
		t.Fatalf("list --after hi-1 --limit 1:\n%s", out)
	}
	c.must(2, "list", "--label", "novalue")
}

// memNames numbers the mem:// stores freshMemName hands out.
var memNames atomic.Int64

// freshMemName returns a mem:// store name no other test (nor an earlier
// repeat of this one under -count) has used: named stores live as long
// as the test process.
func freshMemName(base string) string {
	return fmt.Sprintf("%s-%d", base, memNames.Add(1))
}
