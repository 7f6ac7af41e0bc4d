package lsp_test

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// blocksFixture nests steps in every kind of block: parallel branches, a
// map's steps, on_error and finally.
const blocksFixture = `tqw: v1
name: order
timeout: 2h
steps:
  - id: prepare
    action: sleep
    with: {duration: 1s}
  - id: checks
    parallel:
      branches:
        credit:
          - id: score
            action: http
            with: {url: "https://credit.example/${ input.order_id }"}
            catch:
              - on: [http.status_4xx]
                next: judge
          - id: judge
            succeed: "${ steps.score.output.body }"
        fraud:
          - id: screen
            action: http
            with: {url: "https://fraud.example/${ steps.prepare.output.slept }"}
      fail: all
  - id: charge_all
    map:
      items: "${ input.orders }"
      concurrency: 4
      tolerated_failures: 1
      steps:
        - id: charge
          action: http
          with: {url: "https://pay.example/${ item.id }"}
          next: receipt
        - id: receipt
          succeed: "${ steps.charge.output.status }"
    next: done
  - id: done
    succeed: "${ steps.charge_all.output.done }"
on_error:
  - id: refund
    action: http
    with: {url: "https://refund.example/${ steps.checks.output.fraud }"}
finally:
  - id: notify
    action: sleep
    with: {duration: 1s}
`

const blocksURI = "file:///work/blocks.tqw.yaml"

func openBlocks(t *testing.T) *client {
	c := startServer(t)
	c.open(blocksURI, blocksFixture)
	if d := c.diagnosticsFor(blocksURI, 1); len(d) != 0 {
		t.Fatalf("the fixture has diagnostics: %+v", d)
	}
	return c
}

func TestDefinitionInNestedBlocks(t *testing.T) {
	c := openBlocks(t)
	for _, src := range []struct {
		needle, target string
		delta          int
	}{
		{"next: judge", "id: judge", 7},                       // catch[].next inside a branch
		{"steps.score.output", "id: score", 7},                // steps.X inside a branch
		{"steps.prepare.output", "id: prepare", 7},            // a branch reading an earlier top-level step
		{"next: receipt", "id: receipt", 7},                   // next inside a map's steps
		{"steps.charge.output", "id: charge\n", 7},            // steps.X inside a map's steps
		{"steps.checks.output.fraud", "id: checks", 7},        // on_error reading a parallel step
		{"steps.charge_all.output.done", "id: charge_all", 7}, // a top-level step reading a map step
	} {
		line, char := at(t, blocksFixture, src.needle, 1, src.delta)
		var locs []location
		c.call("textDocument/definition", docPos(blocksURI, line, char), &locs)
		wl, wc := at(t, blocksFixture, src.target, 1, 4)
		if len(locs) != 1 || locs[0].Range.Start.Line != wl || locs[0].Range.Start.Character != wc {
			t.Errorf("definition from %q: %+v; want %d:%d", src.needle, locs, wl, wc)
		}
	}
}

func TestRenameInNestedBlocks(t *testing.T) {
	c := openBlocks(t)
	version := 1
	for _, r := range []struct {
		from, to string
		want     int // the id and its references
	}{
		{"judge", "verdict", 2},
		{"charge", "bill", 2},
		{"checks", "vet", 2},
		{"notify", "tell", 1},
	} {
		line, char := at(t, blocksFixture, "id: "+r.from+"\n", 1, 5)
		params := docPos(blocksURI, line, char)
		params["newName"] = r.to
		var edit struct {
			Changes map[string][]struct {
				Range   lspRange `json:"range"`
				NewText string   `json:"newText"`
			} `json:"changes"`
		}
		c.call("textDocument/rename", params, &edit)
		edits := edit.Changes[blocksURI]
		if len(edits) != r.want {
			t.Errorf("rename %s: %d edits; want %d: %+v", r.from, len(edits), r.want, edits)
			continue
		}
		lines := strings.Split(blocksFixture, "\n")
		sort.Slice(edits, func(i, j int) bool {
			a, b := edits[i].Range.Start, edits[j].Range.Start
			return a.Line > b.Line || a.Line == b.Line && a.Character > b.Character
		})
		for _, e := range edits {
			if got := rangeText(blocksFixture, e.Range); got != r.from {
				t.Errorf("rename %s: an edit covers %q", r.from, got)
			}
			l := lines[e.Range.Start.Line]
			lines[e.Range.Start.Line] = l[:e.Range.Start.Character] + e.NewText + l[e.Range.End.Character:]
		}
		renamed := strings.Join(lines, "\n")
		if strings.Count(renamed, r.to) != r.want {
			t.Errorf("rename %s: text\n%s", r.from, renamed)
		}
		// The renamed file loads: every reference followed the id.
		version++
		c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": blocksURI, "version": version},
			"contentChanges": []map[string]any{{"text": renamed}}})
		if d := c.diagnosticsFor(blocksURI, version); len(d) != 0 {
			t.Errorf("rename %s: the renamed file has diagnostics: %+v", r.from, d)
		}
		version++
		c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": blocksURI, "version": version},
			"contentChanges": []map[string]any{{"text": blocksFixture}}})
		c.diagnosticsFor(blocksURI, version)
	}
	// An id of a nested step is taken: step ids are unique across the file.
	line, char := at(t, blocksFixture, "id: done", 1, 5)
	params := docPos(blocksURI, line, char)
	params["newName"] = "score"
	if err := c.callErr("textDocument/rename", params); err == nil {
		t.Error("renaming done to a branch step's id was accepted")
	}
}

type symbol struct {
	Name           string   `json:"name"`
	Detail         string   `json:"detail"`
	Kind           int      `json:"kind"`
	Range          lspRange `json:"range"`
	SelectionRange lspRange `json:"selectionRange"`
	Children       []symbol `json:"children"`
}

// tree renders symbols as name(children...), checking that each holds
// its children and that its selection range names it.
func tree(t *testing.T, text string, syms []symbol) string {
	t.Helper()
	var parts []string
	for _, s := range syms {
		if got := rangeText(text, s.SelectionRange); got != s.Name {
			t.Errorf("%s: selection range covers %q", s.Name, got)
		}
		for _, ch := range s.Children {
			if ch.Range.Start.Line < s.Range.Start.Line || ch.Range.End.Line > s.Range.End.Line {
				t.Errorf("%s (%+v) does not hold its child %s (%+v)", s.Name, s.Range, ch.Name, ch.Range)
			}
		}
		p := s.Name
		if len(s.Children) > 0 {
			p += "(" + tree(t, text, s.Children) + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func TestDocumentSymbolsNest(t *testing.T) {
	c := openBlocks(t)
	var syms []symbol
	c.call("textDocument/documentSymbol", map[string]any{"textDocument": map[string]any{"uri": blocksURI}}, &syms)
	got := tree(t, blocksFixture, syms)
	want := "prepare checks(credit(score judge) fraud(screen)) charge_all(charge receipt) done on_error(refund) finally(notify)"
	if got != want {
		t.Errorf("symbols\n%s\nwant\n%s", got, want)
	}
	var details []string
	for _, s := range syms {
		details = append(details, s.Name+"="+s.Detail)
	}
	if !slices.Contains(details, "checks=parallel") || !slices.Contains(details, "charge_all=map") {
		t.Errorf("details %v", details)
	}
}

func TestCompletionInNestedBlocks(t *testing.T) {
	c := openBlocks(t)
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
	// next names a step of the same block only.
	got := complete(t, c, blocksURI, "next: ", 0, blocksFixture)
	has("next in a branch", got, "score", "judge")
	lacks("next in a branch", got, "screen", "prepare", "done", "charge")
	got = complete(t, c, blocksURI, "next: r", -1, blocksFixture)
	has("next in a map's steps", got, "charge", "receipt")
	lacks("next in a map's steps", got, "checks", "done", "judge")
	got = complete(t, c, blocksURI, "\n    next: ", 0, blocksFixture)
	has("next at the top", got, "prepare", "checks", "charge_all", "done")
	lacks("next at the top", got, "score", "charge", "refund")

	// steps. offers the steps an expression there may read.
	got = complete(t, c, blocksURI, "succeed: \"${ steps.", 0, blocksFixture) // judge
	has("steps. in a branch", got, "score", "judge", "prepare")
	lacks("steps. in a branch", got, "screen", "checks", "charge_all", "charge", "done")
	got = complete(t, c, blocksURI, "fraud.example/${ steps.", 0, blocksFixture)
	has("steps. in another branch", got, "screen", "prepare")
	lacks("steps. in another branch", got, "score", "judge")
	got = complete(t, c, blocksURI, "refund.example/${ steps.", 0, blocksFixture)
	has("steps. in on_error", got, "prepare", "checks", "charge_all", "done", "refund")
	lacks("steps. in on_error", got, "score", "charge", "notify")

	// The outputs of parallel and map steps.
	has("parallel output", complete(t, c, blocksURI, "steps.checks.output.", 0, blocksFixture), "credit", "fraud")
	has("map output", complete(t, c, blocksURI, "steps.charge_all.output.", 0, blocksFixture), "results", "errors", "done", "failed", "total")

	// Keys, from the schema, where they are valid.
	version := 1
	edit := func(text string) {
		version++
		c.notify("textDocument/didChange", map[string]any{"textDocument": map[string]any{"uri": blocksURI, "version": version},
			"contentChanges": []map[string]any{{"text": text}}})
		c.diagnosticsFor(blocksURI, version)
	}
	for _, k := range []struct {
		name, after, insert string
		want, not           []string
	}{
		{"top-level keys", "timeout: 2h\n", "\n", []string{"on_error", "finally", "timeout", "steps", "vars"}, []string{"parallel", "branches", "concurrency"}},
		{"step keys in a branch", "next: judge\n", "          - id: extra\n            \n", []string{"parallel", "map", "action", "next", "catch", "timeout"}, []string{"branches", "on_error"}},
		{"parallel keys", "    parallel:\n", "      \n", []string{"branches", "fail"}, []string{"items", "action"}},
		{"map keys", "    map:\n", "      \n", []string{"items", "concurrency", "tolerated_failures", "steps"}, []string{"branches", "action"}},
		{"step keys in a map's steps", "next: receipt\n", "          \n", []string{"action", "parallel", "map", "retry"}, []string{"items", "finally"}},
		{"step keys in on_error", "  - id: refund\n", "    \n", []string{"action", "catch", "parallel"}, []string{"on_error", "branches"}},
	} {
		text := strings.Replace(blocksFixture, k.after, k.after+k.insert, 1)
		edit(text)
		got := complete(t, c, blocksURI, k.after+strings.TrimSuffix(k.insert, "\n"), 0, text)
		has(k.name, got, k.want...)
		lacks(k.name, got, k.not...)
	}
	text := strings.Replace(blocksFixture, "      fail: all\n", "      fail: \n", 1)
	edit(text)
	got = complete(t, c, blocksURI, "      fail: ", 0, text)
	has("parallel fail", got, "fast", "all")
	// A step in a map's steps gets the with keys of its action.
	text = strings.Replace(blocksFixture, "          with: {url: \"https://pay.example/${ item.id }\"}\n", "          with:\n            me\n", 1)
	edit(text)
	got = complete(t, c, blocksURI, "with:\n            me", 0, text)
	has("with keys in a map's step", got, "method", "url", "headers")
	lacks("with keys in a map's step", got, "command")
	// Outside every step (a run template such as outputs) steps. offers
	// the workflow's own steps.
	text = strings.Replace(blocksFixture, "timeout: 2h\n", "timeout: 2h\nresult: \"${ steps. }\"\n", 1)
	edit(text)
	got = complete(t, c, blocksURI, "result: \"${ steps.", 0, text)
	has("steps. outside steps", got, "checks", "charge_all", "done")
	lacks("steps. outside steps", got, "score", "charge", "refund")
}

func TestHoverInNestedBlocks(t *testing.T) {
	c := openBlocks(t)
	for _, h := range []struct {
		needle string
		want   []string
	}{
		{"steps.charge_all.output.done", []string{"step `charge_all`", "map", "`results`", "`failed`", "`total`"}},
		{"steps.checks.output.fraud", []string{"step `checks`", "parallel", "`credit`", "`fraud`"}},
		{"steps.score.output", []string{"step `score`", "`http`", "In block `checks/credit`", "status"}},
		{"steps.charge.output", []string{"step `charge`", "In block `charge_all/item`"}},
	} {
		line, char := at(t, blocksFixture, h.needle, 1, 8)
		var res *struct {
			Contents struct {
				Value string `json:"value"`
			} `json:"contents"`
		}
		c.call("textDocument/hover", docPos(blocksURI, line, char), &res)
		if res == nil {
			t.Errorf("no hover on %q", h.needle)
			continue
		}
		for _, w := range h.want {
			if !strings.Contains(res.Contents.Value, w) {
				t.Errorf("hover on %q: %q lacks %q", h.needle, res.Contents.Value, w)
			}
		}
	}
}

// exprFixture reads item and index in a map's steps, and error and
// run.outcome in on_error and finally; its last line is being typed
// (`${ run. }`), where completion offers run's fields.
const exprFixture = `tqw: v1
name: expr
steps:
  - id: each
    map:
      items: [1, 2]
      steps:
        - id: charge
          action: http
          with: {url: "https://pay.example/${ item }/${ index }"}
on_error:
  - id: alert
    action: http
    with: {url: "https://alert.example/${ error.type }/${ run.outcome }"}
finally:
  - id: bye
    action: http
    with: {url: "https://bye.example/${ run. }"}
`

func TestExpressionNamesOfMapsAndHandlersHaveDocs(t *testing.T) {
	c := startServer(t)
	const uri = "file:///work/expr.tqw.yaml"
	c.open(uri, exprFixture)
	c.diagnosticsFor(uri, 1)
	type item struct {
		Label         string `json:"label"`
		Documentation *struct {
			Value string `json:"value"`
		} `json:"documentation"`
	}
	completeDocs := func(needle string) map[string]string {
		t.Helper()
		line, char := at(t, exprFixture, needle, 1, len(needle))
		var res struct {
			Items []item `json:"items"`
		}
		c.call("textDocument/completion", docPos(uri, line, char), &res)
		out := map[string]string{}
		for _, it := range res.Items {
			if it.Documentation != nil {
				out[it.Label] = it.Documentation.Value
			}
		}
		return out
	}
	names := completeDocs("pay.example/${ ")
	for _, n := range []string{"item", "index"} {
		if !strings.Contains(names[n], "map's steps") {
			t.Errorf("completion of %s in a map's step: %q does not say it is readable there", n, names[n])
		}
	}
	if !strings.Contains(names["error"], "on_error and finally") {
		t.Errorf("completion of error: %q", names["error"])
	}
	if d := completeDocs("bye.example/${ run."); !strings.Contains(d["outcome"], "failed, timed_out, cancelled or succeeded") {
		t.Errorf("completion of run. in finally: outcome is %q", d["outcome"])
	}

	hoverOn := func(needle string, delta int) string {
		t.Helper()
		line, char := at(t, exprFixture, needle, 1, delta)
		var res *struct {
			Contents struct {
				Value string `json:"value"`
			} `json:"contents"`
		}
		c.call("textDocument/hover", docPos(uri, line, char), &res)
		if res == nil {
			return ""
		}
		return res.Contents.Value
	}
	for _, h := range []struct {
		needle string
		delta  int
		want   []string
	}{
		{"${ item }", 4, []string{"**`item`**", "map's steps"}},
		{"${ index }", 5, []string{"**`index`**", "from 0"}},
		{"${ error.type }", 4, []string{"**`error`**", "on_error and finally", "- `type`", "- `step`"}},
		{"${ error.type }", 10, []string{"**`error.type`**", "http.status_5xx"}},
		{"${ run.outcome }", 9, []string{"**`run.outcome`**", "timed_out"}},
	} {
		got := hoverOn(h.needle, h.delta)
		for _, w := range h.want {
			if !strings.Contains(got, w) {
				t.Errorf("hover on %q at %d: %q lacks %q", h.needle, h.delta, got, w)
			}
		}
	}
	if got := hoverOn("https://alert", 3); got != "" {
		t.Errorf("hover outside an expression on a with value: %q", got)
	}
}
