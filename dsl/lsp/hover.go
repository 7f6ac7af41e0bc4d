package lsp

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/tqw-dsl/tqw/dsl"
)

// hover answers textDocument/hover: a step reference shows the step and
// what it outputs, a name an expression reads (item, run.outcome, error)
// where it is readable, an action name the action's inputs and output, a
// key its documentation from the schema.
func (v view) hover(p dsl.Pos) *hover {
	if id, span, ok := v.nameAt(p); ok {
		if s := v.d.outline.StepByID(id); s != nil {
			r := v.rangeOf(span)
			return &hover{Contents: markupContent{Kind: markupMarkdown, Value: stepDoc(s)}, Range: &r}
		}
	}
	line := v.line(p.Line)
	off := v.byteOffset(p)
	for _, r := range dsl.ExpressionRanges(line) {
		if off >= r[0] && off <= r[1] {
			if doc := exprNameDoc(line[r[0]:r[1]], off-r[0]); doc != "" {
				return &hover{Contents: markupContent{Kind: markupMarkdown, Value: doc}}
			}
			break
		}
	}
	if m := valueRE.FindStringSubmatchIndex(line); m != nil {
		key := line[m[6]:m[7]]
		value := strings.TrimSpace(line[m[8]:m[9]])
		if i := strings.Index(value, " #"); i >= 0 {
			value = value[:i]
		}
		switch {
		case key == "action" && off >= m[8]:
			if doc := actionDoc(value); doc != "" {
				return &hover{Contents: markupContent{Kind: markupMarkdown, Value: doc}}
			}
		case off >= m[6] && off <= m[7]:
			c := v.context(dsl.Pos{Line: p.Line, Col: p.Col})
			path := c.path
			if c.key == "" && !c.inKey {
				break
			}
			if s := schemaAt(append(path, key), v.stepAction(c)); s != nil && docOf(s) != "" {
				title, _ := s["title"].(string)
				return &hover{Contents: markupContent{Kind: markupMarkdown, Value: fmt.Sprintf("**%s** (`%s`)\n\n%s", title, key, docOf(s))}}
			}
		}
	}
	return nil
}

// exprNameDoc documents the name an expression reads at byte off of
// expr: a root such as item or run (with its fields), or a field of run
// or error; "" elsewhere (steps.X is a step reference, handled above).
func exprNameDoc(expr string, off int) string {
	isName := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	start, end := off, off
	for start > 0 && isName(expr[start-1]) {
		start--
	}
	for end < len(expr) && isName(expr[end]) {
		end++
	}
	if start == end {
		return ""
	}
	name := expr[start:end]
	if start == 0 || expr[start-1] != '.' {
		doc, ok := dsl.ExprNames[name]
		if !ok {
			return ""
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "**`%s`**: %s", name, doc)
		writeFields(&sb, dsl.ExprFields[name], "")
		return sb.String()
	}
	rs := start - 1
	for rs > 0 && isName(expr[rs-1]) {
		rs--
	}
	root := expr[rs : start-1]
	if rs > 0 && expr[rs-1] == '.' {
		return "" // a field of a field: steps.X.output.Y, vars.a.b
	}
	for _, f := range dsl.ExprFields[root] {
		if f.Name == name {
			return fmt.Sprintf("**`%s.%s`**: %s", root, name, f.Doc)
		}
	}
	return ""
}

func stepDoc(s *dsl.StepDef) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "**step `%s`** (line %d): %s", s.ID, s.IDSpan.Start.Line, s.Kind)
	if s.Action != "" {
		fmt.Fprintf(&sb, " `%s`", s.Action)
	}
	if s.Description != "" {
		sb.WriteString("\n\n" + s.Description)
	}
	switch info := dsl.ActionInfoFor(s.Action); {
	case s.Kind == dsl.KindParallel:
		fmt.Fprintf(&sb, "\n\n`steps.%s.output`: each branch's result, by branch name", s.ID)
		writeFields(&sb, outputFields(s, nil), "")
	case s.Kind == dsl.KindMap:
		fmt.Fprintf(&sb, "\n\n`steps.%s.output`: the items' results and how many failed", s.ID)
		writeFields(&sb, mapOutput, "")
	case info != nil:
		fmt.Fprintf(&sb, "\n\n`steps.%s.output`: %s", s.ID, info.OutputDoc)
		writeFields(&sb, info.Output, "")
	}
	if s.Block != "" {
		fmt.Fprintf(&sb, "\n\nIn block `%s`.", s.Block)
	}
	return sb.String()
}

func writeFields(sb *strings.Builder, fields []dsl.OutputField, indent string) {
	for _, f := range fields {
		fmt.Fprintf(sb, "\n%s- `%s`: %s", indent, f.Name, f.Doc)
		writeFields(sb, f.Fields, indent+"  ")
	}
}

// actionDoc documents a built-in action: summary, with keys, output.
func actionDoc(name string) string {
	info := dsl.ActionInfoFor(name)
	if info == nil {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "**action `%s`**: %s\n\n**with**:", name, info.Summary)
	w := def("with." + name)
	props, _ := w["properties"].(map[string]any)
	req := map[string]bool{}
	if r, ok := w["required"].([]any); ok {
		for _, x := range r {
			req[fmt.Sprint(x)] = true
		}
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ps := deref(props[k].(map[string]any))
		d, _ := ps["description"].(string)
		mark := ""
		if req[k] {
			mark = " (required)"
		}
		fmt.Fprintf(&sb, "\n- `%s`%s: %s", k, mark, d)
	}
	fmt.Fprintf(&sb, "\n\n**output**: %s", info.OutputDoc)
	writeFields(&sb, info.Output, "")
	return sb.String()
}

var didYouMeanRE = regexp.MustCompile(`did you mean "([^"]+)"\?`)

// codeActions answers textDocument/codeAction with the fixes the hints of
// the diagnostics in [start, end] spell out: a "did you mean" replaces
// the misspelt word, an undeclared secret is added to secrets.
func (v view) codeActions(start, end dsl.Pos) []codeAction {
	out := []codeAction{}
	for _, d := range v.d.diags {
		span := dsl.Span{Start: dsl.Pos{Line: d.Line, Col: d.Col}, End: dsl.Pos{Line: d.EndLine, Col: d.EndCol}}
		if before(span.End, start) || before(end, span.Start) {
			continue
		}
		diag := v.diagnostic(d)
		if m := didYouMeanRE.FindStringSubmatch(d.Hint); m != nil {
			if r, ok := v.wordRange(span); ok {
				out = append(out, codeAction{Title: fmt.Sprintf("Change to %q", m[1]), Kind: "quickfix", IsPreferred: true,
					Diagnostics: []Diagnostic{diag},
					Edit:        &workspaceEdit{Changes: map[string][]textEdit{v.d.uri: {{Range: r, NewText: m[1]}}}}})
			}
		}
		if d.Code == dsl.CodeSecretUnknown {
			if name := secretName(d.Hint); name != "" {
				if e, ok := v.declareSecret(name); ok {
					out = append(out, codeAction{Title: fmt.Sprintf("Declare secret %s", name), Kind: "quickfix", IsPreferred: true,
						Diagnostics: []Diagnostic{diag}, Edit: &workspaceEdit{Changes: map[string][]textEdit{v.d.uri: {e}}}})
				}
			}
		}
	}
	return out
}

func before(a, b dsl.Pos) bool {
	return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
}

var secretHintRE = regexp.MustCompile(`^add ([A-Za-z_][A-Za-z0-9_]*) to secrets`)

func secretName(hint string) string {
	if m := secretHintRE.FindStringSubmatch(hint); m != nil {
		return m[1]
	}
	return ""
}

// wordRange is the range of the misspelt word a diagnostic covers: the
// span itself, or inside its quotes.
func (v view) wordRange(s dsl.Span) (Range, bool) {
	if s.Start.Line != s.End.Line {
		return Range{}, false
	}
	line := v.line(s.Start.Line)
	a, b := v.byteOffset(s.Start), v.byteOffset(s.End)
	if a >= b || b > len(line) {
		return Range{}, false
	}
	word := line[a:b]
	if len(word) >= 2 && (word[0] == '"' || word[0] == '\'') && word[len(word)-1] == word[0] {
		s.Start.Col++
		s.End.Col--
		word = word[1 : len(word)-1]
	}
	if strings.ContainsAny(word, " {}[],:") {
		return Range{}, false
	}
	return v.rangeOf(s), true
}

// declareSecret is the edit that adds name to the file's secrets: into a
// flow list, after the last item of a block list, or as a new secrets key
// before steps.
func (v view) declareSecret(name string) (textEdit, bool) {
	o := v.d.outline
	if o.SecretsKey != nil {
		n := o.SecretsKey.Start.Line
		line := v.line(n)
		if open := strings.Index(line, "["); open >= 0 {
			if close := strings.LastIndex(line, "]"); close > open {
				inner := strings.TrimSpace(line[open+1 : close])
				text := name
				if inner != "" {
					text = ", " + name
				}
				end := strings.TrimRight(line[:close], " ")
				p := dsl.Pos{Line: n, Col: len([]rune(end)) + 1}
				return textEdit{Range: Range{Start: v.toLSP(p), End: v.toLSP(p)}, NewText: text}, true
			}
		}
		if len(o.Secrets) > 0 {
			last := o.Secrets[len(o.Secrets)-1]
			item := v.line(last.Span.Start.Line)
			indent := item[:len(item)-len(strings.TrimLeft(item, " "))]
			p := dsl.Pos{Line: last.Span.Start.Line, Col: len([]rune(item)) + 1}
			return textEdit{Range: Range{Start: v.toLSP(p), End: v.toLSP(p)}, NewText: "\n" + indent + "- " + name}, true
		}
		return textEdit{}, false
	}
	for n := 1; n <= len(v.d.lines); n++ {
		if strings.HasPrefix(v.line(n), "steps:") {
			p := dsl.Pos{Line: n, Col: 1}
			return textEdit{Range: Range{Start: v.toLSP(p), End: v.toLSP(p)}, NewText: "secrets: [" + name + "]\n"}, true
		}
	}
	return textEdit{}, false
}
