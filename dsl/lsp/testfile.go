package lsp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
	"github.com/tqw-dsl/tqw/schemas"
)

// Test files (NAME.test.yaml, package dsl/testfile) are documents too:
// their diagnostics are testfile.Load's (those of tqw-dsl validate), and
// completion offers the keys of schemas/workflow-test.schema.json at the
// cursor, the step ids of the workflow under test where a step is named
// (every block's for a mock or a signal, the run's own for expect),
// action names, error types and enum values. Navigation requests answer
// nothing for them.

var (
	testSchemaOnce sync.Once
	testSchemaDoc  map[string]any
)

func testSchema() map[string]any {
	testSchemaOnce.Do(func() {
		if err := json.NewDecoder(bytes.NewReader(schemas.WorkflowTestJSON)).Decode(&testSchemaDoc); err != nil {
			testSchemaDoc = map[string]any{} // the embedded schema is tested to be JSON
		}
	})
	return testSchemaDoc
}

// testSchemaAt walks the test schema along a key path ("-" for items).
func testSchemaAt(path []string) map[string]any {
	s := testSchema()
	for _, seg := range path {
		if s == nil {
			return nil
		}
		if seg == "-" {
			s, _ = s["items"].(map[string]any)
			continue
		}
		props, _ := s["properties"].(map[string]any)
		s, _ = props[seg].(map[string]any)
	}
	return s
}

// testDiagnostics are a test document's diagnostics.
func testDiagnostics(path, text string, opts dsl.Options) dsl.Diagnostics {
	_, diags := testfile.Load(path, []byte(text), opts)
	return diags
}

// testRequest answers a request on a test document.
func (v view) testRequest(method string, p dsl.Pos, opts dsl.Options) any {
	switch method {
	case "textDocument/completion":
		items := v.testCompletions(p, opts)
		if items == nil {
			items = []completionItem{}
		}
		return completionList{Items: items}
	case "textDocument/references", "textDocument/documentSymbol", "textDocument/codeAction":
		return []any{}
	}
	return nil
}

var testWorkflowRE = regexp.MustCompile(`(?m)^workflow:\s*["']?([^"'#\s]+)`)

// testedWorkflows are the workflow a test document tests and those it
// calls, as far as they load.
func (v view) testedWorkflows(opts dsl.Options) []*dsl.Workflow {
	wp := testfile.DefaultWorkflow(v.d.path)
	if m := testWorkflowRE.FindStringSubmatch(v.d.text); m != nil {
		wp = filepath.Join(filepath.Dir(v.d.path), filepath.FromSlash(m[1]))
	}
	w, _, err := dsl.LoadWith(wp, opts)
	if err != nil {
		return nil
	}
	out := []*dsl.Workflow{w}
	for s := range everyStep(w) {
		if s.Call != nil {
			p := s.Call.Workflow
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(wp), p)
			}
			if cw, _, err := dsl.LoadWith(p, opts); err == nil {
				out = append(out, cw)
			}
		}
	}
	return out
}

func (v view) testCompletions(p dsl.Pos, opts dsl.Options) []completionItem {
	c := v.context(p)
	n := len(c.path)
	switch {
	case c.inKey && n >= 1 && c.path[n-1] == "attempts",
		c.inKey && n >= 2 && c.path[n-1] == "-" && c.path[n-2] == "path",
		!c.inKey && c.key == "path":
		return v.testStepItems(opts, false, true)
	case !c.inKey && c.key == "step":
		return v.testStepItems(opts, n >= 2 && c.path[n-1] == "-" && c.path[n-2] == "signals", false)
	case c.inKey:
		return testKeyItems(testSchemaAt(c.path))
	case c.key == "action":
		return actionItems(true)
	case c.key == "type":
		return errorTypeItems()
	}
	if s := testSchemaAt(append(slices.Clone(c.path), c.key)); s != nil {
		return enumItems(s)
	}
	return nil
}

// everyStep yields w's steps in every block, the top level first.
func everyStep(w *dsl.Workflow) iter.Seq[*dsl.Step] {
	return func(yield func(*dsl.Step) bool) {
		for _, b := range w.Blocks() {
			for _, s := range b.Steps {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// testStepItems offers the steps of the tested workflows, in every block
// (the wait_signal steps only, for a signal; for an expectation, own, the
// tested run's own steps: not those of a branch or a map item, which run
// in a child run).
func (v view) testStepItems(opts dsl.Options, waits, own bool) []completionItem {
	var out []completionItem
	for i, w := range v.testedWorkflows(opts) {
		if own && i > 0 {
			break
		}
		for s := range everyStep(w) {
			inChild := s.Block != nil && s.Block.Owner != nil
			if waits && s.Action != "wait_signal" || own && inChild {
				continue
			}
			detail := string(s.Kind)
			if s.Action != "" {
				detail += " " + s.Action
			}
			if s.Block != nil && s.Block.Path != "" {
				detail += " in " + s.Block.Path
			}
			if i > 0 { // a step of a called workflow
				detail += " (" + filepath.Base(w.File) + ")"
			}
			out = append(out, completionItem{Label: s.ID, Kind: completionKindRef, Detail: detail,
				Documentation: md(s.Description), SortText: fmt.Sprintf("%05d", len(out))})
		}
	}
	return out
}

func testKeyItems(s map[string]any) []completionItem {
	props, _ := s["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []completionItem
	for _, k := range names {
		ps, _ := props[k].(map[string]any)
		title, _ := ps["title"].(string)
		out = append(out, completionItem{Label: k, Kind: completionKindField, Detail: title, Documentation: md(docOf(ps))})
	}
	return out
}
