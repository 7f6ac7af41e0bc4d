package lsp

import (
	"fmt"
	"regexp"
	"sort"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/tqw-dsl/tqw/dsl"
)

// nameAt finds the step id at p: a reference to one, or a step's id. It
// returns the id and the span the cursor is on.
func (v view) nameAt(p dsl.Pos) (string, dsl.Span, bool) {
	o := v.d.outline
	for _, r := range o.StepRefs {
		if inSpan(r.Span, p) {
			return r.Name, r.Span, true
		}
	}
	for _, s := range o.Steps {
		if s.ID != "" && inSpan(s.IDSpan, p) {
			return s.ID, s.IDSpan, true
		}
	}
	return "", dsl.Span{}, false
}

// inSpan is Span.Contains with the end included, so a cursor just after
// a name (where editors put it after a double click) still finds it.
func inSpan(s dsl.Span, p dsl.Pos) bool {
	return s.Contains(p) || p == s.End
}

func (v view) location(s dsl.Span) Location {
	return Location{URI: v.d.uri, Range: v.rangeOf(s)}
}

// definition answers textDocument/definition: the id of the step a
// reference names.
func (v view) definition(p dsl.Pos) []Location {
	id, _, ok := v.nameAt(p)
	if !ok {
		return []Location{}
	}
	if s := v.d.outline.StepByID(id); s != nil {
		return []Location{v.location(s.IDSpan)}
	}
	return []Location{}
}

// references answers textDocument/references: every reference to the
// step at p, and its id when includeDecl.
func (v view) references(p dsl.Pos, includeDecl bool) []Location {
	id, _, ok := v.nameAt(p)
	out := []Location{}
	if !ok {
		return out
	}
	if s := v.d.outline.StepByID(id); s != nil && includeDecl {
		out = append(out, v.location(s.IDSpan))
	}
	for _, r := range v.d.outline.StepRefs {
		if r.Name == id {
			out = append(out, v.location(r.Span))
		}
	}
	return out
}

func (v view) prepareRename(p dsl.Pos) any {
	id, span, ok := v.nameAt(p)
	if !ok || v.d.outline.StepByID(id) == nil {
		return nil
	}
	return v.rangeOf(span)
}

var stepIDRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// rename answers textDocument/rename: the step's id and every reference
// to it, in one workspace edit.
func (v view) rename(p dsl.Pos, newName string) (*workspaceEdit, error) {
	id, _, ok := v.nameAt(p)
	if !ok {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "no step id here to rename"}
	}
	if !stepIDRE.MatchString(newName) {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("%q is not a valid step id: use letters, digits and underscores, starting with a letter or underscore", newName)}
	}
	if v.d.outline.StepByID(newName) != nil {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("a step %q exists already", newName)}
	}
	var edits []textEdit
	for _, s := range v.d.outline.Steps {
		if s.ID == id {
			edits = append(edits, textEdit{Range: v.rangeOf(s.IDSpan), NewText: newName})
		}
	}
	if len(edits) == 0 {
		return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: fmt.Sprintf("no step has id %q", id)}
	}
	for _, r := range v.d.outline.StepRefs {
		if r.Name == id {
			edits = append(edits, textEdit{Range: v.rangeOf(r.Span), NewText: newName})
		}
	}
	return &workspaceEdit{Changes: map[string][]textEdit{v.d.uri: edits}}, nil
}

// symbols answers textDocument/documentSymbol: the outline by step id
// and kind, a parallel step holding its branches and their steps, a map
// step its steps, and on_error and finally theirs.
func (v view) symbols() []documentSymbol {
	o := v.d.outline
	out := v.blockSymbols("")
	for _, b := range o.Blocks {
		if b.Parent < 0 {
			out = append(out, documentSymbol{Name: b.Name, Detail: "steps run " + sectionWhen[b.Name], Kind: symbolKindNamespace,
				Range: v.rangeOf(b.Span), SelectionRange: v.rangeOf(b.Key), Children: v.blockSymbols(b.Path)})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return positionBefore(out[i].Range.Start, out[j].Range.Start) })
	return out
}

// sectionWhen says when the steps of on_error and finally run.
var sectionWhen = map[string]string{
	"on_error": "when the run fails, times out or is cancelled",
	"finally":  "after the run ends, whatever its outcome",
}

func positionBefore(a, b Position) bool {
	return a.Line < b.Line || a.Line == b.Line && a.Character < b.Character
}

// blockSymbols returns the symbols of the steps of the block at path.
func (v view) blockSymbols(path string) []documentSymbol {
	out := []documentSymbol{}
	for i, s := range v.d.outline.Steps {
		if s.Block == path && s.ID != "" {
			out = append(out, v.stepSymbol(i))
		}
	}
	return out
}

func (v view) stepSymbol(i int) documentSymbol {
	s := v.d.outline.Steps[i]
	detail := string(s.Kind)
	kind := symbolKindOperator
	switch s.Kind {
	case dsl.KindAction, dsl.KindForeach:
		detail += " " + s.Action
		kind = symbolKindFunction
		if s.Action == "wait_signal" || s.Action == "sleep" {
			kind = symbolKindEvent
		}
	case dsl.KindCall, dsl.KindParallel, dsl.KindMap:
		kind = symbolKindFunction
	case dsl.KindSucceed, dsl.KindFail:
		kind = symbolKindKey
	}
	if s.Description != "" {
		detail += ": " + s.Description
	}
	sym := documentSymbol{Name: s.ID, Detail: detail, Kind: kind, Range: v.rangeOf(s.Span), SelectionRange: v.rangeOf(s.IDSpan)}
	for _, b := range v.d.outline.Blocks {
		if b.Parent != i {
			continue
		}
		if s.Kind == dsl.KindMap {
			sym.Children = append(sym.Children, v.blockSymbols(b.Path)...)
			continue
		}
		sym.Children = append(sym.Children, documentSymbol{Name: b.Name, Detail: "branch", Kind: symbolKindNamespace,
			Range: v.rangeOf(b.Span), SelectionRange: v.rangeOf(b.Key), Children: v.blockSymbols(b.Path)})
	}
	return sym
}
