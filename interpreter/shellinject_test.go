package interpreter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShellTemplatesAreData runs a script step and a foreach of script
// steps whose templates read hostile input: each value arrives as one
// word, printed exactly, and nothing it holds runs.
func TestShellTemplatesAreData(t *testing.T) {
	e := newTestEnv(t, withEnv("TOKEN", "s3cr3t-value"))
	p := e.write("inject.yaml", `
tqw: v1
name: inject
secrets: [TOKEN]
steps:
  - id: one
    action: shell
    with:
      dir: "${ input.dir }"
      command: |
        printf '<%s>' ${ input.values } "${ input.values[0] }" '${ input.values[1] }'
        cat <<EOF
        {${ input.values[2] }}
        EOF
        [ ${ secrets.TOKEN } = s3cr3t-value ] && printf 'token ok'
  - id: each
    foreach:
      items: "${ input.values }"
      action: shell
      with: {command: "printf '%s' ${ item }", dir: "${ input.dir }"}
  - id: done
    succeed: "${ [steps.one.output.stdout, output[0].stdout, output[1].stdout, output[2].stdout] }"
`)
	values := []any{"bob; touch MARK; echo INJECTED $(id -un)", `'"; touch MARK; "'` + "`touch MARK`", "x\nEOF\ntouch MARK\n* ~ $HOME"}
	o := e.run(p, map[string]any{"dir": e.dir, "values": values}, "r1")
	v0, v1, v2 := values[0].(string), values[1].(string), values[2].(string)
	want, _ := json.Marshal([]string{
		fmt.Sprintf("<%s><%s><%s><%s><%s>{%s}\ntoken ok", v0, v1, v2, v0, v1, v2),
		v0, v1, v2,
	})
	wantSucceeded(t, o, string(want))
	if _, err := os.Stat(filepath.Join(e.dir, "MARK")); err == nil {
		t.Fatal("an injected command ran: MARK exists")
	}
}

// TestShellTemplateErrorsAreCatchable: a value that cannot be a shell
// word fails the step with an expression error, which catch handles like
// any other.
func TestShellTemplateErrorsAreCatchable(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("map.yaml", `
tqw: v1
name: map
steps:
  - id: a
    action: shell
    with: {command: "echo ${ input }"}
    catch:
      - on: [expression]
        set: {why: "${ error.message }"}
        next: caught
  - id: caught
    succeed: "${ vars.why }"
`)
	o := e.run(p, map[string]any{"k": "v"}, "r1")
	if o.Result == nil || !strings.Contains(string(o.Result), "a map cannot be a shell word") {
		t.Fatalf("outcome %+v", o)
	}
}

// TestShellRawRunsCode: raw() is the explicit way to insert code.
func TestShellRawRunsCode(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("raw.yaml", `
tqw: v1
name: raw
vars: {cmd: "printf '%s-%s' a b"}
steps:
  - id: a
    action: shell
    with: {command: "${ raw(vars.cmd) }; printf ' %s' ${ vars.cmd }"}
  - id: done
    succeed: "${ output.stdout }"
`)
	wantSucceeded(t, e.run(p, nil, "r1"), `"a-b printf '%s-%s' a b"`)
}
