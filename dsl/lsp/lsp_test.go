package lsp_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// fixture exercises every navigation feature.
const fixture = `# yaml-language-server: $schema=../schemas/workflow.schema.json
tqw: v1
name: nav
secrets: [SHOP_TOKEN]
vars: {tries: 0}
steps:
  - id: fetch
    action: http
    with:
      url: "https://shop.example/${ secrets.SHOP_TOKEN }"
    set: {amount: "${ output.body.amount }"}
    catch:
      - on: [http.status_4xx]
        next: give_up
  - id: decide
    switch:
      - when: steps.fetch.output.status == 200
        next: ask
    next: give_up
  - id: ask
    action: wait_signal
    with: {timeout: 72h, schema: {type: object, properties: {approved: {type: boolean}, by: {type: string}}}}
    on_timeout: give_up
  - id: done
    succeed: "${ steps.fetch.output.body }"
  - id: give_up
    fail: "no luck after ${ vars.tries } tries"
`

// at returns the LSP position (UTF-16, which equals bytes here: the text
// is ASCII) of the n-th (from 1) occurrence of needle in text, plus delta
// characters.
func at(t *testing.T, text, needle string, n, delta int) (int, int) {
	t.Helper()
	off := -1
	for i := 0; i < n; i++ {
		j := strings.Index(text[off+1:], needle)
		if j < 0 {
			t.Fatalf("occurrence %d of %q not found", n, needle)
		}
		off += 1 + j
	}
	off += delta
	line := strings.Count(text[:off], "\n")
	return line, off - (strings.LastIndex(text[:off], "\n") + 1)
}

func rangeText(text string, r lspRange) string {
	lines := strings.Split(text, "\n")
	if r.Start.Line != r.End.Line {
		return "<multi-line>"
	}
	return lines[r.Start.Line][r.Start.Character:r.End.Character]
}

const fixtureURI = "file:///work/nav.tqw.yaml"

func openFixture(t *testing.T) *client {
	c := startServer(t)
	c.open(fixtureURI, fixture)
	if d := c.diagnosticsFor(fixtureURI, 1); len(d) != 0 {
		t.Fatalf("the fixture has diagnostics: %+v", d)
	}
	return c
}

func TestDefinition(t *testing.T) {
	c := openFixture(t)
	l, ch := at(t, fixture, "id: give_up", 1, 4)
	for _, src := range []struct {
		needle string
		n      int
	}{
		{"next: give_up", 1},       // catch[].next
		{"next: give_up", 2},       // next
		{"on_timeout: give_up", 1}, // on_timeout
	} {
		line, char := at(t, fixture, src.needle, src.n, strings.Index(src.needle, "give_up")+2)
		var locs []location
		c.call("textDocument/definition", docPos(fixtureURI, line, char), &locs)
		if len(locs) != 1 || locs[0].URI != fixtureURI || locs[0].Range.Start.Line != l || locs[0].Range.Start.Character != ch || rangeText(fixture, locs[0].Range) != "give_up" {
			t.Errorf("definition from %q #%d: %+v; want line %d char %d", src.needle, src.n, locs, l, ch)
		}
	}
	// switch[].next and steps.<id> inside an expression.
	for _, src := range []struct {
		needle, target string
		delta          int
	}{
		{"next: ask", "id: ask", 7},
		{"steps.fetch.output.status", "id: fetch", 8},
		{"steps.fetch.output.body", "id: fetch", 6},
	} {
		line, char := at(t, fixture, src.needle, 1, src.delta)
		var locs []location
		c.call("textDocument/definition", docPos(fixtureURI, line, char), &locs)
		wl, wc := at(t, fixture, src.target, 1, 4)
		if len(locs) != 1 || locs[0].Range.Start.Line != wl || locs[0].Range.Start.Character != wc {
			t.Errorf("definition from %q: %+v; want %d:%d", src.needle, locs, wl, wc)
		}
	}
	// Nothing to go to from a plain value.
	line, char := at(t, fixture, "action: http", 1, 9)
	var locs []location
	c.call("textDocument/definition", docPos(fixtureURI, line, char), &locs)
	if len(locs) != 0 {
		t.Errorf("definition from an action name: %+v", locs)
	}
}

func TestReferencesAndRename(t *testing.T) {
	c := openFixture(t)
	line, char := at(t, fixture, "id: fetch", 1, 5)
	var locs []location
	c.call("textDocument/references", map[string]any{"textDocument": map[string]any{"uri": fixtureURI},
		"position": map[string]any{"line": line, "character": char}, "context": map[string]any{"includeDeclaration": true}}, &locs)
	if len(locs) != 3 {
		t.Fatalf("references to fetch: %+v; want the id and two expressions", locs)
	}
	for _, l := range locs {
		if rangeText(fixture, l.Range) != "fetch" {
			t.Errorf("reference range %+v covers %q", l.Range, rangeText(fixture, l.Range))
		}
	}

	line, char = at(t, fixture, "next: give_up", 2, 8)
	var prep lspRange
	c.call("textDocument/prepareRename", docPos(fixtureURI, line, char), &prep)
	if rangeText(fixture, prep) != "give_up" {
		t.Errorf("prepareRename covers %q", rangeText(fixture, prep))
	}
	var edit struct {
		Changes map[string][]struct {
			Range   lspRange `json:"range"`
			NewText string   `json:"newText"`
		} `json:"changes"`
	}
	params := docPos(fixtureURI, line, char)
	params["newName"] = "escalate"
	c.call("textDocument/rename", params, &edit)
	edits := edit.Changes[fixtureURI]
	if len(edits) != 4 {
		t.Fatalf("rename give_up: %d edits; want the id, catch next, next and on_timeout: %+v", len(edits), edits)
	}
	// Apply the edits, last first, and check the file loads with the new id.
	lines := strings.Split(fixture, "\n")
	sort.Slice(edits, func(i, j int) bool {
		a, b := edits[i].Range.Start, edits[j].Range.Start
		return a.Line > b.Line || a.Line == b.Line && a.Character > b.Character
	})
	for _, e := range edits {
		l := lines[e.Range.Start.Line]
		lines[e.Range.Start.Line] = l[:e.Range.Start.Character] + e.NewText + l[e.Range.End.Character:]
	}
	renamed := strings.Join(lines, "\n")
	if strings.Contains(renamed, "give_up") || strings.Count(renamed, "escalate") != 4 {
		t.Errorf("renamed text:\n%s", renamed)
	}
	c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": fixtureURI, "version": 2},
		"contentChanges": []map[string]any{{"text": renamed}}})
	if d := c.diagnosticsFor(fixtureURI, 2); len(d) != 0 {
		t.Errorf("renamed file has diagnostics: %+v", d)
	}

	for _, bad := range []string{"9lives", "fetch"} {
		params["newName"] = bad
		line, char = at(t, renamed, "id: escalate", 1, 5)
		params["position"] = map[string]any{"line": line, "character": char}
		if err := c.callErr("textDocument/rename", params); err == nil {
			t.Errorf("rename to %q accepted", bad)
		}
	}
}

func TestDocumentSymbols(t *testing.T) {
	c := openFixture(t)
	var syms []struct {
		Name           string   `json:"name"`
		Detail         string   `json:"detail"`
		Kind           int      `json:"kind"`
		Range          lspRange `json:"range"`
		SelectionRange lspRange `json:"selectionRange"`
	}
	c.call("textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": fixtureURI}}, &syms)
	var got []string
	for _, s := range syms {
		got = append(got, s.Name+"="+s.Detail)
		if rangeText(fixture, s.SelectionRange) != s.Name {
			t.Errorf("%s: selection range covers %q", s.Name, rangeText(fixture, s.SelectionRange))
		}
		if s.Range.Start.Line > s.SelectionRange.Start.Line || s.Range.End.Line < s.SelectionRange.End.Line {
			t.Errorf("%s: range %+v does not hold its id", s.Name, s.Range)
		}
	}
	want := []string{"fetch=action http", "decide=switch", "ask=action wait_signal", "done=succeed", "give_up=fail"}
	if !slices.Equal(got, want) {
		t.Errorf("symbols %v; want %v", got, want)
	}
}

// complete returns the labels offered at the end of the first occurrence
// of needle (plus delta) in text, after replacing the fixture with text.
func complete(t *testing.T, c *client, uri, needle string, delta int, text string) []string {
	t.Helper()
	line, char := at(t, text, needle, 1, len(needle)+delta)
	var res struct {
		Items []struct {
			Label string `json:"label"`
		} `json:"items"`
	}
	c.call("textDocument/completion", docPos(uri, line, char), &res)
	var out []string
	for _, it := range res.Items {
		out = append(out, it.Label)
	}
	return out
}

func TestCompletion(t *testing.T) {
	c := startServer(t)
	version := 0
	edit := func(text string) {
		version++
		uri := "file:///work/complete.tqw.yaml"
		if version == 1 {
			c.open(uri, text)
		} else {
			c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": uri, "version": version},
				"contentChanges": []map[string]any{{"text": text}}})
		}
		c.diagnosticsFor(uri, version)
	}
	uri := "file:///work/complete.tqw.yaml"
	has := func(name string, got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: %q not offered; got %v", name, w, got)
			}
		}
	}
	lacks := func(name string, got []string, bad ...string) {
		t.Helper()
		for _, b := range bad {
			if slices.Contains(got, b) {
				t.Errorf("%s: %q offered; got %v", name, b, got)
			}
		}
	}
	edit(fixture)
	has("next", complete(t, c, uri, "    next: ", 0, fixture), "fetch", "decide", "ask", "done", "give_up")
	lacks("next", complete(t, c, uri, "    next: ", -1, fixture), "refund")
	has("on_timeout", complete(t, c, uri, "on_timeout: ", 0, fixture), "give_up", "fetch")
	has("secrets.", complete(t, c, uri, "${ secrets.", 0, fixture), "SHOP_TOKEN")
	has("vars.", complete(t, c, uri, "${ vars.", 0, fixture), "tries", "amount")
	has("steps.", complete(t, c, uri, "when: steps.", 0, fixture), "fetch", "decide", "ask")
	has("steps.fetch.", complete(t, c, uri, "when: steps.fetch.", 0, fixture), "output")
	has("steps.fetch.output.", complete(t, c, uri, "when: steps.fetch.output.", 0, fixture), "status", "headers", "body")
	has("output.", complete(t, c, uri, "${ output.", 0, fixture), "status", "body")
	payload := strings.Replace(fixture, "succeed: \"${ steps.fetch.output.body }\"", "succeed: \"${ steps.ask.output. }\"", 1)
	edit(payload)
	has("wait_signal payload", complete(t, c, uri, "${ steps.ask.output.", 0, payload), "approved", "by")
	has("catch on", complete(t, c, uri, "- on: [", 0, fixture), "http.status_4xx", "timeout", "signal.timeout")
	has("expression start", complete(t, c, uri, "when: ", 0, fixture), "steps", "vars", "input", "now", "uuid", "duration", "len")

	// Typing a new step: action names, then with keys for that action.
	typing := strings.Replace(fixture, "  - id: done\n", "  - id: mail\n    action: \n", 1)
	edit(typing)
	has("action", complete(t, c, uri, "id: mail\n    action: ", 0, typing), "http", "llm", "shell", "wait_signal", "sleep")
	typing = strings.Replace(fixture, "  - id: done\n", "  - id: mail\n    action: llm\n    with:\n      mo\n", 1)
	edit(typing)
	got := complete(t, c, uri, "with:\n      mo", 0, typing)
	has("llm with keys", got, "model", "prompt", "messages", "api_key_secret")
	lacks("llm with keys", got, "url", "command")
	typing = strings.Replace(fixture, "  - id: done\n", "  - id: mail\n    action: shell\n    with: {command: ls, }\n", 1)
	edit(typing)
	has("shell flow with keys", complete(t, c, uri, "with: {command: ls, ", 0, typing), "env", "dir", "stdin")
	// Step keys on a new line of a step.
	typing = strings.Replace(fixture, "    on_timeout: give_up\n", "    on_timeout: give_up\n    re\n", 1)
	edit(typing)
	has("step keys", complete(t, c, uri, "on_timeout: give_up\n    re", 0, typing), "retry", "catch", "set", "timeout")
	// error. in a catch rule's when.
	typing = strings.Replace(fixture, "      - on: [http.status_4xx]\n", "      - on: [http.status_4xx]\n        when: error.\n", 1)
	edit(typing)
	has("error.", complete(t, c, uri, "when: error.", 0, typing), "type", "message", "status", "retryable")
	// A list item under retry.on.
	typing = strings.Replace(fixture, "    set: {amount", "    retry:\n      on:\n        - \n    set: {amount", 1)
	edit(typing)
	has("retry.on item", complete(t, c, uri, "on:\n        - ", 0, typing), "http.status_5xx", "timeout")
}

func TestHover(t *testing.T) {
	c := openFixture(t)
	hoverAt := func(needle string, n, delta int) string {
		t.Helper()
		line, char := at(t, fixture, needle, n, delta)
		var h *struct {
			Contents struct {
				Kind  string `json:"kind"`
				Value string `json:"value"`
			} `json:"contents"`
		}
		c.call("textDocument/hover", docPos(fixtureURI, line, char), &h)
		if h == nil {
			return ""
		}
		if h.Contents.Kind != "markdown" {
			t.Errorf("hover kind %q", h.Contents.Kind)
		}
		return h.Contents.Value
	}
	for _, c := range []struct {
		needle string
		n      int
		delta  int
		want   []string
	}{
		{"action: http", 1, 10, []string{"action `http`", "`url` (required)", "`method`", "status", "headers", "body"}},
		{"steps.fetch.output.status", 1, 8, []string{"step `fetch`", "line 7", "`steps.fetch.output`", "status"}},
		{"on_timeout: give_up", 1, 3, []string{"On timeout", "signal.timeout"}},
		{"url: \"https", 1, 1, []string{"URL", "template"}},
		{"    switch:", 1, 6, []string{"Switch", "Cases tried in order"}},
	} {
		got := hoverAt(c.needle, c.n, c.delta)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("hover on %q: %q lacks %q", c.needle, got, w)
			}
		}
	}
}

func TestCodeActions(t *testing.T) {
	c := startServer(t)
	const uri = "file:///work/fix.tqw.yaml"
	text := "tqw: v1\nname: fix\nsecrets: [A]\nsteps:\n  - id: get\n    action: http\n    with:\n      urll: \"https://x/${ secrets.TOKEN }\"\n"
	c.open(uri, text)
	diags := c.diagnosticsFor(uri, 1)
	if len(diags) != 2 || diags[1].Code != "schema.unknown-field" {
		t.Fatalf("diagnostics: %+v", diags)
	}
	diags = diags[1:] // the other is url missing, which has no fix
	actions := func(text string, d diagnostic) []struct {
		Title string `json:"title"`
		Edit  struct {
			Changes map[string][]struct {
				Range   lspRange `json:"range"`
				NewText string   `json:"newText"`
			} `json:"changes"`
		} `json:"edit"`
	} {
		var out []struct {
			Title string `json:"title"`
			Edit  struct {
				Changes map[string][]struct {
					Range   lspRange `json:"range"`
					NewText string   `json:"newText"`
				} `json:"changes"`
			} `json:"edit"`
		}
		c.call("textDocument/codeAction", map[string]any{"textDocument": map[string]any{"uri": uri}, "range": d.Range,
			"context": map[string]any{"diagnostics": []diagnostic{d}}}, &out)
		return out
	}
	acts := actions(text, diags[0])
	if len(acts) != 1 || acts[0].Title != `Change to "url"` {
		t.Fatalf("code actions: %+v", acts)
	}
	e := acts[0].Edit.Changes[uri][0]
	if rangeText(text, e.Range) != "urll" || e.NewText != "url" {
		t.Errorf("edit %+v replaces %q", e, rangeText(text, e.Range))
	}
	text = strings.Replace(text, "urll", "url", 1)
	c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": uri, "version": 2}, "contentChanges": []map[string]any{{"text": text}}})
	diags = c.diagnosticsFor(uri, 2)
	if len(diags) != 1 || diags[0].Code != "secret.undeclared" {
		t.Fatalf("after the fix: %+v", diags)
	}
	acts = actions(text, diags[0])
	if len(acts) != 1 || acts[0].Title != "Declare secret TOKEN" {
		t.Fatalf("code actions: %+v", acts)
	}
	e = acts[0].Edit.Changes[uri][0]
	lines := strings.Split(text, "\n")
	l := lines[e.Range.Start.Line]
	lines[e.Range.Start.Line] = l[:e.Range.Start.Character] + e.NewText + l[e.Range.End.Character:]
	text = strings.Join(lines, "\n")
	if !strings.Contains(text, "secrets: [A, TOKEN]") {
		t.Fatalf("after declaring:\n%s", text)
	}
	c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": uri, "version": 3}, "contentChanges": []map[string]any{{"text": text}}})
	if d := c.diagnosticsFor(uri, 3); len(d) != 0 {
		t.Errorf("after both fixes: %+v", d)
	}
}

// TestPositionEncodings checks UTF-16 (the default) and UTF-32 columns on
// a line with characters outside the BMP.
func TestPositionEncodings(t *testing.T) {
	text := "tqw: v1\nname: enc\nsteps:\n  - {id: a, description: \"𝄞é\", bogus: 1}\n"
	for enc, char := range map[string]int{"utf-16": 32, "utf-32": 31, "utf-8": 35} {
		var c *client
		if enc == "utf-16" {
			c = startServer(t)
		} else {
			c = startServer(t, enc)
		}
		c.open("file:///work/enc.yaml", text)
		d := c.diagnosticsFor("file:///work/enc.yaml", 1)
		if len(d) != 1 || d[0].Range.Start.Character != char || d[0].Range.End.Character != char+5 {
			t.Errorf("%s: %+v; want start %d", enc, d, char)
		}
	}
}

// TestDiagnosticsMatchValidate opens every corpus file and example and
// checks that the server publishes exactly what validate --json reports:
// ranges, severities, codes, messages and hints.
func TestDiagnosticsMatchValidate(t *testing.T) {
	bad, _ := filepath.Glob("../testdata/invalid/*.yaml")
	good, _ := filepath.Glob("../../workflows/*.yaml")
	files := append(bad, good...)
	if len(bad) < 60 || len(good) < 13 {
		t.Fatalf("corpus: %d invalid, %d examples", len(bad), len(good))
	}
	out, _ := exec.Command(binary, append([]string{"validate", "--json"}, files...)...).Output()
	var rep struct {
		Files []struct {
			File        string `json:"file"`
			Diagnostics []struct {
				Line, Col     int
				EndLine       int `json:"end_line"`
				EndCol        int `json:"end_col"`
				Severity      string
				Code, Message string
				Hint          string
			} `json:"diagnostics"`
		} `json:"files"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Files) != len(files) {
		t.Fatalf("validate --json: %v (%d files)", err, len(rep.Files))
	}
	c := startServer(t, "utf-32")
	total := 0
	for i, f := range rep.Files {
		src, err := os.ReadFile(files[i])
		if err != nil {
			t.Fatal(err)
		}
		uri := fileURI(f.File)
		c.open(uri, string(src))
		got := c.diagnosticsFor(uri, 1)
		if len(got) != len(f.Diagnostics) {
			t.Errorf("%s: server %d diagnostics, validate %d", f.File, len(got), len(f.Diagnostics))
			continue
		}
		for j, w := range f.Diagnostics {
			g := got[j]
			sev := map[string]int{"error": 1, "warning": 2}[w.Severity]
			hint := ""
			if len(g.RelatedInformation) == 1 {
				hint = strings.TrimPrefix(g.RelatedInformation[0].Message, "hint: ")
				if g.RelatedInformation[0].Location.URI != uri || g.RelatedInformation[0].Location.Range != g.Range {
					t.Errorf("%s: related information elsewhere: %+v", f.File, g.RelatedInformation[0].Location)
				}
			}
			wantRange := lspRange{position{w.Line - 1, w.Col - 1}, position{w.EndLine - 1, w.EndCol - 1}}
			if g.Range != wantRange || g.Severity != sev || string(g.Code) != w.Code || g.Message != w.Message || hint != w.Hint || g.Source != "tqw" {
				t.Errorf("%s: server %+v\nvalidate %+v", f.File, g, w)
			}
			total++
		}
	}
	if total < 60 {
		t.Errorf("compared %d diagnostics; the corpus should give more", total)
	}
}

// TestShutdownExit checks the lifecycle: exit after shutdown ends the
// process with status 0.
func TestShutdownExit(t *testing.T) {
	c := startServer(t)
	var res json.RawMessage
	c.call("shutdown", nil, &res)
	c.notify("exit", nil)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("tqw-dsl lsp after shutdown and exit: %v", err)
	}
}

// A workflow using a program's own actions gets no unknown-action
// diagnostic once tqw-actions.json sits beside it, and its with is
// checked against the declared schema.
func TestDeclaredActionsInTheEditor(t *testing.T) {
	dir := t.TempDir()
	decl := `{"tqw": "actions/v1", "actions": {"charge": {"with": {"type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}}}}}`
	if err := os.WriteFile(filepath.Join(dir, "tqw-actions.json"), []byte(decl), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startServer(t)
	good, bad := fileURI(filepath.Join(dir, "good.yaml")), fileURI(filepath.Join(dir, "bad.yaml"))
	c.open(good, "tqw: v1\nname: pay\nsteps:\n  - id: pay\n    action: charge\n    with: {amount: 5}\n")
	c.open(bad, "tqw: v1\nname: pay\nsteps:\n  - id: pay\n    action: charge\n    with: {amount: five}\n")
	if d := c.diagnosticsFor(good, 1); len(d) != 0 {
		t.Errorf("a valid use of a declared action: %+v", d)
	}
	d := c.diagnosticsFor(bad, 1)
	if len(d) != 1 || d[0].Code != "with.invalid" {
		t.Errorf("a with breaking the declared schema: %+v; want one with.invalid", d)
	}
}
