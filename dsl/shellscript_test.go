package dsl

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// scan runs the scanner on text, where each @ is a piece.
func scan(text string) []shellCtx {
	var sb strings.Builder
	var offsets []int
	for i := 0; i < len(text); i++ {
		if text[i] == '@' {
			offsets = append(offsets, sb.Len())
			sb.WriteByte(0)
			continue
		}
		sb.WriteByte(text[i])
	}
	return scanScript(sb.String(), offsets)
}

func TestScanScriptContexts(t *testing.T) {
	for _, c := range []struct {
		text string
		want []shellCtx
	}{
		{`echo a @ b`, []shellCtx{ctxWord}},
		{`echo --name=@ @x`, []shellCtx{ctxWord, ctxWord}},
		{`echo "a @ b"`, []shellCtx{ctxDouble}},
		{`echo 'a @' "@" @`, []shellCtx{ctxSingle, ctxDouble, ctxWord}},
		{`echo "it's" @ 'say "hi"' @`, []shellCtx{ctxWord, ctxWord}},
		{`echo don\'t @`, []shellCtx{ctxWord}},
		{"# don't @\necho @", []shellCtx{ctxComment, ctxWord}},
		{`echo a#@`, []shellCtx{ctxWord}},
		{`echo $(x)#@`, []shellCtx{ctxWord}},
		{`echo \@`, []shellCtx{ctxEscaped}},
		{`echo "\@"`, []shellCtx{ctxEscaped}},
		{`echo $'a\'@'`, []shellCtx{ctxDollarSingle}},
		{`echo "$'@'"`, []shellCtx{ctxDouble}},
		{`echo ${X:-@} "${X:-@}"`, []shellCtx{ctxParam, ctxParam}},
		{`echo $(( @ + 1 ))`, []shellCtx{ctxArith}},
		{`(( n = @ )); echo @`, []shellCtx{ctxArith, ctxWord}},
		{`echo $((1 + (2 * @))) @`, []shellCtx{ctxArith, ctxWord}},
		{"cat <<EOF\n\"@\" '@'\nEOF\necho @", []shellCtx{ctxHeredoc, ctxHeredoc, ctxWord}},
		{"cat <<'EOF'\n@\nEOF\necho @", []shellCtx{ctxQuotedHeredoc, ctxWord}},
		{"cat <<\"E F\"\n@\nE F\necho @", []shellCtx{ctxQuotedHeredoc, ctxWord}},
		{"cat <<\\EOF\n@\nEOF\n@", []shellCtx{ctxQuotedHeredoc, ctxWord}},
		{"cat <<-EOF\n\t@\n\tEOF\necho @", []shellCtx{ctxHeredoc, ctxWord}},
		{"cat <<EOF\nEOFx @\nEOF\n@", []shellCtx{ctxHeredoc, ctxWord}},
		{"cat <<A <<'B'; echo @\n@\nA\n@\nB\n@", []shellCtx{ctxWord, ctxHeredoc, ctxQuotedHeredoc, ctxWord}},
		{"cat <<EOF\n$(echo @) `echo @`\nEOF", []shellCtx{ctxWord, ctxWord}},
		{"cat <<@\nx\n", []shellCtx{ctxHeredocDelim}},
		{"cat <<< @", []shellCtx{ctxWord}},
		{"echo $(echo @ ')' \"@\") @", []shellCtx{ctxWord, ctxDouble, ctxWord}},
		{`echo "$(echo @ "@")"`, []shellCtx{ctxWord, ctxDouble}},
		{"echo `echo @` \"`echo @`\"", []shellCtx{ctxWord, ctxBacktickQuote}},
		{"f() { echo @; }; f @", []shellCtx{ctxWord, ctxWord}},
		{"if [ @ = x ]; then\n  echo \"@\"\nfi", []shellCtx{ctxWord, ctxDouble}},
		{`echo "unterminated @`, []shellCtx{ctxDouble}},
	} {
		if got := scan(c.text); !slices.Equal(got, c.want) {
			t.Errorf("%q: contexts %v, want %v", c.text, got, c.want)
		}
	}
}

// shellWorkflow is a workflow whose one step runs command (a script) with
// extra with fields.
func shellWorkflow(command, extra string) []byte {
	cmd, _ := json.Marshal(command) // a JSON string is a YAML double-quoted scalar
	return fmt.Appendf(nil, "tqw: v1\nname: t\nsteps:\n  - id: a\n    action: shell\n    with: {command: %s%s}\n", cmd, extra)
}

// render loads a one-step shell workflow and renders its with against input.
func render(t testing.TB, command, extra string, input any) (map[string]any, error) {
	t.Helper()
	w, diags, err := Parse("t.yaml", shellWorkflow(command, extra))
	if err != nil {
		t.Fatalf("%q: %v\n%s", command, err, diags)
	}
	v, err := w.Steps[0].With.Eval(&Env{Input: input})
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// runScript runs a rendered with's command under /bin/sh in dir and
// returns its stdout.
func runScript(t *testing.T, with map[string]any, dir string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", with["command"].(string))
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	env, _ := with["env"].(map[string]any)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v.(string))
	}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("script %q: %v: %s", with["command"], err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return string(out)
}

// hostile are values that would run code, split, glob or end a quote if
// a template inserted them into a script as text.
var hostile = []string{
	"bob; echo INJECTED $(id -un)",
	"; touch MARK", "$(touch MARK)", "`touch MARK`", "a && touch MARK", "a || touch MARK", "a | touch MARK",
	"'; touch MARK; '", `"; touch MARK; "`, `\"; touch MARK; \"`, "'\\''; touch MARK; '\\''",
	"line1\ntouch MARK", "\ntouch MARK\n", "x\r\ntouch MARK",
	"* ? [a-z] ~ ~root", "$HOME ${HOME} $1 $@ $# $$", "a\\b \\n \\\\ \\'", "-n", "-e \\c", "--",
	"EOF", "\nEOF\ntouch MARK\n", "  leading and trailing  ", "\ttab", "", "#comment", "!", "%s %d",
	"}\"${TQW_ARG_1}", "$(( 1 + 1 ))", "a[$(touch MARK)]", "x > MARK", "< /etc/passwd", "& touch MARK &",
	"été ✓ 日本", "\x01\x7f\xff",
}

// contextScript prints input.v in every context a script can hold it in
// and input.l, a list, as separate words.
const contextScript = `printf '<%s>\n' ${ input.v }
printf '<%s>\n' "[${ input.v }]"
printf '<%s>\n' '[${ input.v }]'
printf '<%s>\n' "$(printf %s ${ input.v })"
cat <<EOF
{${ input.v }}
EOF
cat <<-EOF
	{${ input.v }}
	EOF
printf '<%s>\n' ${ input.l }
# ${ input.v } in a comment does nothing
`

func wantContextOutput(v string, l []string) string {
	subst := strings.TrimRight(v, "\n") // $( ) drops trailing newlines
	s := fmt.Sprintf("<%s>\n<[%s]>\n<[%s]>\n<%s>\n{%s}\n{%s}\n", v, v, v, subst, v, v)
	for _, w := range l {
		s += "<" + w + ">\n"
	}
	return s
}

// TestShellScriptValuesAreData runs scripts rendered with hostile and
// random values under /bin/sh: each prints exactly the value, and no
// injected command runs.
func TestShellScriptValuesAreData(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("ab \t\n'\"`$(){}[]*?~\\;&|<>#!=%-^,.:/@\x01\x7fé✓")
	values := slices.Clone(hostile)
	n := 200
	if testing.Short() {
		n = 30
	}
	for range n {
		rs := make([]rune, r.IntN(24))
		for j := range rs {
			rs[j] = alphabet[r.IntN(len(alphabet))]
		}
		values = append(values, string(rs))
	}
	for i, v := range values {
		l := []string{v, values[(i+1)%len(values)], ""}
		with, err := render(t, contextScript, "", map[string]any{"v": v, "l": []any{l[0], l[1], l[2]}})
		if err != nil {
			t.Fatalf("value %q: %v", v, err)
		}
		if strings.Contains(with["command"].(string), "MARK") {
			t.Fatalf("value %q reached the script text: %q", v, with["command"])
		}
		if got, want := runScript(t, with, dir), wantContextOutput(v, l); got != want {
			t.Errorf("value %q:\n got %q\nwant %q", v, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "MARK")); err == nil {
		t.Fatal("an injected command ran: MARK exists")
	}
}

func TestShellScriptRendering(t *testing.T) {
	in := map[string]any{"name": "bob; id", "n": int64(42), "ok": true, "none": nil,
		"list": []any{"a b", int64(1)}, "map": map[string]any{"k": "v"}, "nested": []any{[]any{"x"}},
		"nul": "a\x00b", "argv": []any{"printf", "%s", "x"}, "code": "echo hi"}
	for _, c := range []struct {
		command, extra string
		script         string
		env            map[string]any
		err            string
	}{
		{command: "echo hello ${ input.name }", script: `echo hello "${TQW_ARG_1}"`, env: map[string]any{"TQW_ARG_1": "bob; id"}},
		{command: "echo ${ input.n } ${ input.ok } ${ input.none }", script: `echo "${TQW_ARG_1}" "${TQW_ARG_2}" "${TQW_ARG_3}"`,
			env: map[string]any{"TQW_ARG_1": "42", "TQW_ARG_2": "true", "TQW_ARG_3": ""}},
		{command: "printf %s ${ input.list } x", script: `printf %s "${TQW_ARG_1}" "${TQW_ARG_2}" x`,
			env: map[string]any{"TQW_ARG_1": "a b", "TQW_ARG_2": "1"}},
		{command: "printf %s ${ [] }.", script: `printf %s .`},
		{command: "${ input.name }", script: `"${TQW_ARG_1}"`, env: map[string]any{"TQW_ARG_1": "bob; id"}},
		{command: "echo $${HOME} ${ input.n }", extra: ", env: {A: x, B: \"${ input.name }\"}", script: `echo ${HOME} "${TQW_ARG_1}"`,
			env: map[string]any{"A": "x", "B": "bob; id", "TQW_ARG_1": "42"}},
		{command: "${ raw(input.code) } && echo ${ input.name }", script: `echo hi && echo "${TQW_ARG_1}"`, env: map[string]any{"TQW_ARG_1": "bob; id"}},
		{command: "echo $${HOME}", script: `echo ${HOME}`},
		{command: "echo ${ input.map }", err: "a map cannot be a shell word; insert its JSON text with toJSON(x)"},
		{command: "echo ${ toJSON(input.map) }", script: `echo "${TQW_ARG_1}"`, env: map[string]any{"TQW_ARG_1": "{\n  \"k\": \"v\"\n}"}},
		{command: "echo ${ run }", err: "a map cannot be a shell word"},
		{command: "echo \"${ input.list }\"", err: "a list inside quotes or a here-document"},
		{command: "echo ${ input.nested }", err: "list element 0: a nested list cannot be a shell word"},
		{command: "echo ${ input.nul }", err: "NUL byte"},
	} {
		with, err := render(t, c.command, c.extra, in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrEval) {
				t.Errorf("%q: error %v, want one containing %q", c.command, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.command, err)
			continue
		}
		env, _ := with["env"].(map[string]any)
		if with["command"] != c.script || fmt.Sprint(env) != fmt.Sprint(c.env) {
			t.Errorf("%q: command %q env %v; want %q %v", c.command, with["command"], env, c.script, c.env)
		}
	}
	// A whole ${ } that yields a list is the argv form, unchanged.
	with, err := render(t, "${ input.argv }", "", in)
	if err != nil || fmt.Sprint(with["command"]) != "[printf %s x]" || with["env"] != nil {
		t.Errorf("argv from a whole template: %v, %v", with, err)
	}
	// Argv, stdin and env values are never parsed by a shell: unchanged.
	w, diags, err := Parse("t.yaml", []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    action: shell\n"+
		"    with: {command: [echo, \"${ input.name }\"], stdin: \"${ input.name }\", env: {X: \"a ${ input.name }\"}}\n"))
	if err != nil {
		t.Fatalf("%v\n%s", err, diags)
	}
	v, err := w.Steps[0].With.Eval(&Env{Input: in})
	if got := fmt.Sprint(v); err != nil || got != "map[command:[echo bob; id] env:map[X:a bob; id] stdin:bob; id]" {
		t.Errorf("argv form: %s, %v", got, err)
	}
	// Other actions keep text templates.
	w, _, err = Parse("t.yaml", []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    action: http\n    with: {url: \"http://x/${ input.name }\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := w.Steps[0].With.Eval(&Env{Input: in}); fmt.Sprint(v) != "map[url:http://x/bob; id]" {
		t.Errorf("http with: %v", v)
	}
}

// TestShellScriptForeach checks that a foreach's shell with follows the
// same rule, reading item.
func TestShellScriptForeach(t *testing.T) {
	src := "tqw: v1\nname: t\nsteps:\n  - id: a\n    foreach:\n      items: \"${ input }\"\n      action: shell\n" +
		"      with: {command: \"printf %s ${ item }\"}\n"
	w, diags, err := Parse("t.yaml", []byte(src))
	if err != nil || len(diags) > 0 {
		t.Fatalf("%v\n%s", err, diags)
	}
	v, err := w.Steps[0].Foreach.With.Eval(&Env{Item: "$(id)"})
	if got := fmt.Sprint(v); err != nil || got != `map[command:printf %s "${TQW_ARG_1}" env:map[TQW_ARG_1:$(id)]]` {
		t.Errorf("foreach with: %s, %v", got, err)
	}
}

func TestShellScriptDiagnostics(t *testing.T) {
	for _, c := range []struct {
		src  string
		code string
		pos  Pos
		sev  Severity
	}{
		// The position is the ${ } itself, on its own line of a block scalar.
		{"tqw: v1\nname: t\nsteps:\n  - id: a\n    action: shell\n    with:\n      command: |\n        echo ok\n        cat <<'EOF'\n        hi ${ input.x }\n        EOF\n",
			CodeShellUnsafe, Pos{10, 12}, SeverityError},
		{string(shellWorkflow("echo $(( ${ input.n } + 1 ))", "")), CodeShellUnsafe, Pos{6, 31}, SeverityError},
		{string(shellWorkflow("echo \\${ input.n }", "")), CodeShellUnsafe, Pos{6, 29}, SeverityError},
		{string(shellWorkflow("echo ${ raw(input.n) + 'x' }", "")), CodeShellRawMisplaced, Pos{6, 27}, SeverityError},
		{string(shellWorkflow("echo ${ raw(raw(input.n)) }", "")), CodeShellRawMisplaced, Pos{6, 27}, SeverityError},
		{string(shellWorkflow("echo ${ raw(input.n) }", "")), CodeShellRawExternal, Pos{6, 27}, SeverityWarning},
		{string(shellWorkflow("echo ${ raw(steps.a.output.stdout) }", "")), CodeShellRawExternal, Pos{6, 27}, SeverityWarning},
		{string(shellWorkflow("echo hi", ", env: {TQW_ARG_1: x}")), CodeShellReservedEnv, Pos{6, 38}, SeverityError},
		{"tqw: v1\nname: t\nsteps:\n  - id: a\n    action: http\n    with: {url: \"${ raw(input.u) }\"}\n",
			CodeShellRawMisplaced, Pos{6, 17}, SeverityError},
		// A variable set from input, even through another variable, is external.
		{"tqw: v1\nname: t\nvars: {a: \"${ input.x }\"}\nsteps:\n  - id: s\n    set: {b: \"${ vars.a + '!' }\"}\n" +
			"  - id: a\n    action: shell\n    with: {command: \"${ raw(vars.b) }\"}\n", CodeShellRawExternal, Pos{9, 22}, SeverityWarning},
		{"tqw: v1\nname: t\nsteps:\n  - id: a\n    foreach:\n      items: \"${ input }\"\n      action: shell\n      with: {command: \"${ raw(item) }\"}\n",
			CodeShellRawExternal, Pos{8, 24}, SeverityWarning},
	} {
		w, diags, err := Parse("t.yaml", []byte(c.src))
		var found bool
		for _, d := range diags {
			if d.Code == c.code && d.Line == c.pos.Line && d.Col == c.pos.Col && d.Severity == c.sev && d.Hint != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: want %s %s at %s; got\n%s", c.src, c.sev, c.code, c.pos, diags)
		}
		if (c.sev == SeverityError) != (err != nil) || (w == nil) != (err != nil) {
			t.Errorf("%q: workflow %v, err %v", c.src, w != nil, err)
		}
	}
	// raw() of data the workflow wrote itself is not a warning.
	for _, src := range []string{
		"tqw: v1\nname: t\nvars: {cmd: \"ls -l\", n: \"${ run.id }\"}\nsteps:\n  - id: a\n    action: shell\n    with: {command: \"${ raw(vars.cmd) } ${ raw(vars.n) }\"}\n",
		"tqw: v1\nname: t\nsteps:\n  - id: a\n    foreach:\n      items: [ls, pwd]\n      action: shell\n      with: {command: \"${ raw(item) }\"}\n",
	} {
		if _, diags, err := Parse("t.yaml", []byte(src)); err != nil || len(diags) > 0 {
			t.Errorf("%q: %v\n%s", src, err, diags)
		}
	}
}

// FuzzShellScript renders arbitrary shell text in which each @ is
// ${ input.v }: loading never panics, and when it succeeds the script
// text never depends on the value, which reaches the script only
// through the environment, byte for byte.
func FuzzShellScript(f *testing.F) {
	f.Add(contextScript, "x")
	f.Add("echo @ \"@\" '@' $'@' ${X:-@} $(( @ )) \\@", "$(id)")
	f.Add("cat <<A <<'B'\n@\nA\n@\nB\n`@` \"`@`\" # @", "a'b\"c")
	f.Add("cat <<@\n", "\n")
	for _, h := range hostile {
		f.Add("echo @", h)
	}
	f.Fuzz(func(t *testing.T, text, value string) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				panic(fmt.Sprintf("rendering %q did not return within 20s", text))
			}
		}()
		text = strings.ReplaceAll(text, "${", "$${")
		text = strings.ReplaceAll(text, "@", "${ input.v }")
		w, diags, err := Parse("t.yaml", shellWorkflow(text, ""))
		for _, d := range diags {
			if d.Code == CodeInternal {
				t.Fatalf("loader bug: %s", d)
			}
		}
		if err != nil {
			return
		}
		other := "other"
		if value == other {
			other = "different"
		}
		var scripts [2]string
		for i, v := range []string{value, other} {
			got, err := w.Steps[0].With.Eval(&Env{Input: map[string]any{"v": v}})
			if err != nil {
				if strings.IndexByte(v, 0) >= 0 && strings.Contains(err.Error(), "NUL byte") {
					return
				}
				t.Fatalf("value %q: %v", v, err)
			}
			with := got.(map[string]any)
			s, ok := with["command"].(string)
			if !ok {
				t.Fatalf("command %T", with["command"])
			}
			scripts[i] = s
			env, _ := with["env"].(map[string]any)
			for k, e := range env {
				if strings.HasPrefix(k, shellArgPrefix) && e != v {
					t.Fatalf("%s = %q, want %q", k, e, v)
				}
			}
		}
		if scripts[0] != scripts[1] {
			t.Fatalf("the script depends on the value:\n%q\n%q", scripts[0], scripts[1])
		}
	})
}
