package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeWorkflow writes src as a workflow file in the CLI's folder.
func (c *cli) writeWorkflow(name, src string) string {
	c.t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(src, "\n")), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// noMark fails the test if an injected command created the marker file
// in the folder the commands run in.
func (c *cli) noMark() {
	c.t.Helper()
	if _, err := os.Stat(filepath.Join(c.dir, "MARK")); err == nil {
		c.t.Fatal("an injected command ran: MARK exists")
	}
}

// validateBin runs the built binary's validate on path.
func validateBin(t *testing.T, path string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(tqwBin, "validate", path)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestShellInjectionIssueExample is the example of issue 12: the input
// used to become shell code and print "INJECTED root".
func TestShellInjectionIssueExample(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	p := c.writeWorkflow("greet.yaml", `
tqw: v1
name: greet
input: {type: object, properties: {name: {type: string}}}
steps:
  - id: greet
    action: shell
    with: {command: "echo hello ${ input.name }"}
  - id: done
    succeed: "${ output.stdout }"
`)
	out, _ := c.must(0, "run", p, "--input", `{"name": "bob; echo INJECTED $(id -un)"}`)
	if out != "hello bob; echo INJECTED $(id -un)\n\n" {
		t.Fatalf("stdout %q; want the name echoed as one literal word", out)
	}
	out, _ = c.must(0, "run", p, "--input", `{"name": "x; touch MARK"}`)
	if out != "hello x; touch MARK\n\n" {
		t.Fatalf("stdout %q", out)
	}
	c.noMark()
}

// TestShellInjectionHostileInputs runs hostile values through every
// place a script can hold a template (unquoted, double and single
// quotes, a here-document, a command substitution, a list of words) in a
// foreach: each step prints exactly its value and nothing injected runs.
func TestShellInjectionHostileInputs(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	p := c.writeWorkflow("hostile.yaml", `
tqw: v1
name: hostile
input: {type: object, properties: {values: {type: array, items: {type: string}}}}
steps:
  - id: each
    foreach:
      items: "${ input.values }"
      action: shell
      with:
        command: |
          printf '<%s>' ${ item } "[${ item }]" '[${ item }]' "$(printf %s ${ item })" ${ [item, item] }
          cat <<EOF
          {${ item }}
          EOF
  - id: done
    succeed: "${ map(output, .stdout) }"
`)
	values := []string{
		"bob; echo INJECTED $(id -un)", "; touch MARK", "$(touch MARK)", "`touch MARK`",
		"a && touch MARK", "a || touch MARK", "a | touch MARK", "x > MARK",
		`'; touch MARK; '`, `"; touch MARK; "`, `'"'"'; touch MARK`, `\'; touch MARK`,
		"one\ntouch MARK", "EOF\ntouch MARK", "* ? [a-z] ~ ~root /*", "$HOME ${PATH} $0 $$", "-n", "",
		"  spaces  ", "a\\b\\\\c", "}\"${TQW_ARG_1}'", "a[$(touch MARK)]", "été ✓",
	}
	in, _ := json.Marshal(map[string]any{"values": values})
	out, errOut := c.must(0, "run", p, "--input", string(in))
	var got []string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("result %q: %v\nstderr:\n%s", out, err, errOut)
	}
	if len(got) != len(values) {
		t.Fatalf("%d outputs for %d values: %q", len(got), len(values), got)
	}
	for i, v := range values {
		subst := strings.TrimRight(v, "\n") // $( ) drops trailing newlines
		want := "<" + v + "><[" + v + "]><[" + v + "]><" + subst + "><" + v + "><" + v + ">{" + v + "}\n"
		if got[i] != want {
			t.Errorf("value %q:\n got %q\nwant %q", v, got[i], want)
		}
	}
	c.noMark()
}

// TestShellInjectionValidate: validate rejects a template where no value
// is safe and warns about raw() on input, whose code run then runs as
// the workflow asked.
func TestShellInjectionValidate(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	unsafe := c.writeWorkflow("unsafe.yaml", `
tqw: v1
name: unsafe
steps:
  - id: a
    action: shell
    with:
      command: |
        cat <<'EOF'
        ${ input.name }
        EOF
`)
	code, out, _ := validateBin(t, unsafe)
	if code != 1 {
		t.Errorf("validate of an unsafe script: exit %d, want 1", code)
	}
	if !strings.Contains(out, "unsafe.yaml:9:9: error: shell script: ${ input.name } is inside a here-document whose delimiter is quoted") ||
		!strings.Contains(out, "[shell.unsafe-template]") || !strings.Contains(out, "hint: unquote the delimiter") {
		t.Errorf("validate:\n%s", out)
	}
	raw := c.writeWorkflow("raw.yaml", `
tqw: v1
name: raw
steps:
  - id: a
    action: shell
    with: {command: "${ raw(input.code) }"}
  - id: done
    succeed: "${ output.stdout }"
`)
	code, out, _ = validateBin(t, raw)
	if code != 0 {
		t.Errorf("validate with a warning only: exit %d, want 0", code)
	}
	if !strings.Contains(out, "raw.yaml:6:22: warning: ${ raw(input.code) } inserts data read from input into the shell script as code") ||
		!strings.Contains(out, "[shell.raw-external]") || !strings.Contains(out, "hint: drop raw()") {
		t.Errorf("validate:\n%s", out)
	}
	out, _ = c.must(0, "run", raw, "--input", `{"code": "printf '%s' code; printf ' ran'"}`)
	if out != "code ran\n" {
		t.Errorf("raw run: stdout %q", out)
	}
}
