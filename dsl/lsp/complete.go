package lsp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/schemas"
)

var (
	schemaOnce sync.Once
	schemaDoc  map[string]any
)

// schema returns the published workflow schema as a document, the source
// of every key's documentation.
func schema() map[string]any {
	schemaOnce.Do(func() {
		dec := json.NewDecoder(bytes.NewReader(schemas.WorkflowJSON))
		if err := dec.Decode(&schemaDoc); err != nil {
			schemaDoc = map[string]any{} // the embedded schema is tested to be JSON
		}
	})
	return schemaDoc
}

// deref follows a $ref into the schema's $defs.
func deref(s map[string]any) map[string]any {
	for range 4 {
		ref, ok := s["$ref"].(string)
		if !ok {
			break
		}
		defs, _ := schema()["$defs"].(map[string]any)
		next, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		if !ok {
			break
		}
		merged := map[string]any{}
		for k, v := range next {
			merged[k] = v
		}
		for k, v := range s { // the referring side's annotations win
			if k != "$ref" {
				merged[k] = v
			}
		}
		s = merged
	}
	return s
}

func def(name string) map[string]any {
	defs, _ := schema()["$defs"].(map[string]any)
	d, _ := defs[name].(map[string]any)
	return d
}

// schemaAt resolves the schema of the map at path ("-" is a list item);
// action names the step's action, for with. A key a map's properties do
// not name (a parallel step's branch) takes its additionalProperties.
func schemaAt(path []string, action string) map[string]any {
	s := schema()
	for i, seg := range path {
		if s == nil {
			return nil
		}
		s = deref(s)
		if seg == "-" {
			s, _ = alternative(s, "items")["items"].(map[string]any)
			continue
		}
		if seg == "with" && i > 0 {
			if d := def("with." + action); d != nil {
				s = d
				continue
			}
		}
		s = alternative(s, "properties")
		props, _ := s["properties"].(map[string]any)
		next, ok := props[seg].(map[string]any)
		if !ok {
			next = otherProperty(s, seg)
		}
		s = next
	}
	if s == nil {
		return nil
	}
	return deref(s)
}

// otherProperty is the schema of a key properties does not name: the
// first patternProperties entry it matches, else additionalProperties.
func otherProperty(s map[string]any, key string) map[string]any {
	pats, _ := s["patternProperties"].(map[string]any)
	names := make([]string, 0, len(pats))
	for p := range pats {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if re, err := regexp.Compile(p); err == nil && re.MatchString(key) {
			m, _ := pats[p].(map[string]any)
			return m
		}
	}
	m, _ := s["additionalProperties"].(map[string]any)
	return m
}

// alternative returns s, or when s has no such key (properties, items)
// the first of its oneOf or anyOf alternatives that has it: a value
// written either as a string or as a map completes as the map.
func alternative(s map[string]any, key string) map[string]any {
	if s[key] != nil {
		return s
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		alts, _ := s[k].([]any)
		for _, a := range alts {
			if m, ok := a.(map[string]any); ok {
				if m = deref(m); m[key] != nil {
					return m
				}
			}
		}
	}
	return s
}

func docOf(s map[string]any) string {
	if md, ok := s["markdownDescription"].(string); ok {
		return md
	}
	d, _ := s["description"].(string)
	return d
}

// yamlContext is what surrounds the cursor in the YAML text.
type yamlContext struct {
	path   []string // the keys of the maps around the cursor, "-" for list items
	inKey  bool     // the cursor is where a key is written
	key    string   // when not inKey: the key whose value the cursor is in
	prefix string   // the word before the cursor
	step   int      // index in the outline of the step around the cursor, -1 if none
}

var (
	keyLineRE  = regexp.MustCompile(`^(\s*)((?:-\s+)*)([A-Za-z_][A-Za-z0-9_.]*)\s*:(?:\s|$)`)
	keyStartRE = regexp.MustCompile(`^(\s*)((?:-\s+)*)([A-Za-z_][A-Za-z0-9_]*)?$`)
	valueRE    = regexp.MustCompile(`^(\s*)((?:-\s+)*)([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$`)
	wordEndRE  = regexp.MustCompile(`[A-Za-z0-9_.]*$`)
)

// indentOf returns the column of a line's content and of its key: for
// "  - id: x" 2 and 4.
func indentOf(line string) (content, key int, ok bool) {
	t := strings.TrimLeft(line, " ")
	if t == "" || strings.HasPrefix(t, "#") {
		return 0, 0, false
	}
	content = len(line) - len(t)
	key = content
	for strings.HasPrefix(t, "- ") || t == "-" {
		t = strings.TrimLeft(strings.TrimPrefix(t, "-"), " ")
		key = len(line) - len(t)
	}
	return content, key, true
}

func (v view) context(p dsl.Pos) yamlContext {
	line := v.line(p.Line)
	before := line[:v.byteOffset(p)]
	c := yamlContext{step: v.d.outline.StepAt(p)}
	c.prefix = wordEndRE.FindString(before)
	// The enclosing maps, from the indentation of the lines above.
	cur := len(before) - len(strings.TrimLeft(before, " "))
	if _, k, ok := indentOf(before); ok {
		cur = k
	}
	if m := keyStartRE.FindStringSubmatch(before); m != nil {
		c.inKey = true
		if m[2] != "" {
			c.path = append(c.path, "-")
			cur = len(m[1])
		}
	} else if m := valueRE.FindStringSubmatch(before); m != nil {
		c.key = m[3]
		if m[2] != "" {
			c.path = append(c.path, "-")
			cur = len(m[1])
		} else {
			cur = len(m[1])
		}
		val := m[4]
		// Inside a flow map on this line: {a: 1, b|
		if i := strings.LastIndexAny(val, "{,"); i >= 0 && strings.Count(val, "{") > strings.Count(val, "}") {
			rest := strings.TrimSpace(val[i+1:])
			if !strings.Contains(rest, ":") {
				c.path = append([]string{c.key}, c.path...)
				c.inKey, c.key = true, ""
			} else if k, _, ok := strings.Cut(rest, ":"); ok {
				c.path = append([]string{c.key}, c.path...)
				c.key = strings.TrimSpace(k)
			}
		}
	}
	var outer []string
	for n := p.Line - 1; n >= 1 && cur > 0; n-- {
		l := v.line(n)
		content, key, ok := indentOf(l)
		if !ok {
			continue
		}
		if key < cur {
			if m := keyLineRE.FindStringSubmatch(l); m != nil && len(m[1])+len(m[2]) < cur {
				outer = append(outer, m[3])
			}
			cur = key
		}
		if content < cur {
			outer = append(outer, "-")
			cur = content
		}
	}
	slices.Reverse(outer)
	c.path = append(outer, c.path...)
	return c
}

// stepAction is the action of the step (or its foreach) around the cursor.
func (v view) stepAction(c yamlContext) string {
	if c.step < 0 {
		return ""
	}
	return v.d.outline.Steps[c.step].Action
}

func (v view) complete(p dsl.Pos) completionList {
	items := v.completionItems(p)
	if items == nil {
		items = []completionItem{}
	}
	return completionList{Items: items}
}

func (v view) completionItems(p dsl.Pos) []completionItem {
	line := v.line(p.Line)
	off := v.byteOffset(p)
	for _, r := range dsl.ExpressionRanges(line) {
		if off >= r[0] && off <= r[1] {
			return v.completeExpr(line[r[0]:off], p)
		}
	}
	c := v.context(p)
	if n := len(c.path); c.inKey && n >= 2 && c.path[n-1] == "-" {
		// A list item: the values the list takes.
		if c.path[n-2] == "on" {
			return errorTypeItems()
		}
		if s := schemaAt(c.path, v.stepAction(c)); s != nil && s["enum"] != nil {
			return enumItems(s)
		}
	}
	if c.inKey {
		return v.completeKeys(c)
	}
	switch c.key {
	case "next", "on_timeout":
		return v.stepIDItems(v.targets(c.step))
	case "action":
		return actionItems(slices.Contains(c.path, "foreach"))
	case "on":
		return errorTypeItems()
	}
	if len(c.path) > 0 && c.path[len(c.path)-1] == "on" && strings.HasPrefix(strings.TrimSpace(line), "-") {
		return errorTypeItems()
	}
	if c.key != "" {
		if s := schemaAt(append(slices.Clone(c.path), c.key), v.stepAction(c)); s != nil {
			return enumItems(s)
		}
	}
	return nil
}

// stepIDItems offers the ids of the steps for which ok holds.
func (v view) stepIDItems(ok func(int) bool) []completionItem {
	var out []completionItem
	for i, s := range v.d.outline.Steps {
		if s.ID == "" || !ok(i) {
			continue
		}
		detail := string(s.Kind)
		if s.Action != "" {
			detail += " " + s.Action
		}
		out = append(out, completionItem{Label: s.ID, Kind: completionKindRef, Detail: detail,
			Documentation: md(s.Description), SortText: fmt.Sprintf("%05d", i)})
	}
	return out
}

// targets holds for the steps that next, switch, catch and on_timeout
// of step at may name: those of its own block.
func (v view) targets(at int) func(int) bool {
	steps := v.d.outline.Steps
	if at < 0 {
		return func(int) bool { return true }
	}
	return func(i int) bool { return steps[i].Block == steps[at].Block }
}

// readable holds for the steps whose output an expression in step at
// may read: the steps of its own block, and those of each enclosing
// block before the step that holds the block (they ran before it
// started). on_error and finally, and the workflow's own templates
// outside steps, read the workflow's steps.
func (v view) readable(at int) func(int) bool {
	steps := v.d.outline.Steps
	visible := map[string]int{"": len(steps)} // block -> the readable steps end before this index
	if at >= 0 {
		visible[steps[at].Block] = len(steps)
		for p := steps[at].Parent; p >= 0; p = steps[p].Parent {
			visible[steps[p].Block] = p
		}
	}
	return func(i int) bool {
		end, ok := visible[steps[i].Block]
		return ok && i < end
	}
}

func md(s string) *markupContent {
	if s == "" {
		return nil
	}
	return &markupContent{Kind: markupMarkdown, Value: s}
}

func actionItems(inForeach bool) []completionItem {
	var out []completionItem
	for _, a := range dsl.BuiltinActionInfo {
		if inForeach && (a.Name == "wait_signal" || a.Name == "sleep") {
			continue
		}
		doc := a.Summary + "\n\nOutput: " + a.OutputDoc
		out = append(out, completionItem{Label: a.Name, Kind: completionKindModule, Detail: a.Summary, Documentation: md(doc)})
	}
	return out
}

func errorTypeItems() []completionItem {
	var out []completionItem
	for i, t := range dsl.ErrorTypes {
		out = append(out, completionItem{Label: t, Kind: completionKindEnum, Detail: dsl.ErrorTypeDocs[t],
			SortText: fmt.Sprintf("%03d", i)})
	}
	return out
}

func enumItems(s map[string]any) []completionItem {
	vals, _ := s["enum"].([]any)
	docs, _ := s["enumDescriptions"].([]any)
	var out []completionItem
	for i, e := range vals {
		str, ok := e.(string)
		if !ok {
			continue
		}
		it := completionItem{Label: str, Kind: completionKindEnum}
		if i < len(docs) {
			it.Detail, _ = docs[i].(string)
		}
		out = append(out, it)
	}
	return out
}

// completeKeys offers the keys of the map around the cursor that it does
// not have yet.
func (v view) completeKeys(c yamlContext) []completionItem {
	s := schemaAt(c.path, v.stepAction(c))
	if s == nil {
		return nil
	}
	props, _ := s["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []completionItem
	for _, k := range names {
		ps := deref(props[k].(map[string]any))
		title, _ := ps["title"].(string)
		out = append(out, completionItem{Label: k, Kind: completionKindField, Detail: title, Documentation: md(docOf(ps))})
	}
	return out
}

// exprPathRE is the dotted name being typed at the end of an expression.
var exprPathRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)?(\.)?([A-Za-z_][A-Za-z0-9_]*)?$`)

// exprBuiltins are expr-lang's builtin functions offered at the start of a name.
var exprBuiltins = []string{
	"len", "all", "any", "none", "one", "filter", "map", "count", "sum", "find", "groupBy", "sortBy",
	"keys", "values", "first", "last", "join", "split", "trim", "upper", "lower", "replace", "repeat",
	"indexOf", "hasPrefix", "hasSuffix", "contains", "toJSON", "fromJSON", "toBase64", "fromBase64",
	"string", "int", "float", "abs", "ceil", "floor", "round", "max", "min", "date", "type", "get",
}

func (v view) completeExpr(text string, p dsl.Pos) []completionItem {
	m := exprPathRE.FindStringSubmatch(text)
	base := ""
	if m[2] == "." {
		base = m[1]
	}
	var out []completionItem
	field := func(name, doc string) {
		out = append(out, completionItem{Label: name, Kind: completionKindField, Documentation: md(doc)})
	}
	parts := strings.Split(base, ".")
	switch {
	case base == "":
		names := make([]string, 0, len(dsl.ExprNames))
		for n := range dsl.ExprNames {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, completionItem{Label: n, Kind: completionKindVariable, Documentation: md(dsl.ExprNames[n])})
		}
		fns := make([]string, 0, len(dsl.ExprFunctions))
		for n := range dsl.ExprFunctions {
			fns = append(fns, n)
		}
		sort.Strings(fns)
		for _, n := range fns {
			out = append(out, completionItem{Label: n, Kind: completionKindFunction, Detail: "tqw", Documentation: md(dsl.ExprFunctions[n])})
		}
		for _, n := range exprBuiltins {
			out = append(out, completionItem{Label: n, Kind: completionKindFunction, Detail: "expr-lang builtin"})
		}
	case base == "steps":
		return v.stepIDItems(v.readable(v.d.outline.StepAt(p)))
	case len(parts) == 2 && parts[0] == "steps":
		field("output", "the step's output")
	case len(parts) >= 3 && parts[0] == "steps" && parts[2] == "output":
		if s := v.d.outline.StepByID(parts[1]); s != nil {
			for _, f := range outputFields(s, parts[3:]) {
				field(f.Name, f.Doc)
			}
		}
	case base == "output" || strings.HasPrefix(base, "output."):
		if i := v.d.outline.StepAt(p); i >= 0 {
			for _, f := range outputFields(&v.d.outline.Steps[i], parts[1:]) {
				field(f.Name, f.Doc)
			}
		}
	case base == "secrets":
		for _, s := range v.d.outline.Secrets {
			out = append(out, completionItem{Label: s.Name, Kind: completionKindVariable, Detail: "declared secret"})
		}
	case base == "vars":
		seen := map[string]bool{}
		for _, x := range v.d.outline.Vars {
			if !seen[x.Name] {
				seen[x.Name] = true
				out = append(out, completionItem{Label: x.Name, Kind: completionKindVariable, Detail: fmt.Sprintf("assigned at line %d", x.Span.Start.Line)})
			}
		}
	case base == "error" || base == "run":
		for _, f := range dsl.ExprFields[base] {
			field(f.Name, f.Doc)
		}
	}
	return out
}

// outputFields returns the fields of a step's output at a path of nested
// fields: a built-in action's, or a wait_signal's payload schema's.
func outputFields(s *dsl.StepDef, path []string) []dsl.OutputField {
	switch {
	case s.Kind == dsl.KindParallel && len(path) == 0:
		var out []dsl.OutputField
		for _, b := range s.Branches {
			out = append(out, dsl.OutputField{Name: b, Doc: "the branch's result: the output of its last step, or its succeed value"})
		}
		return out
	case s.Kind == dsl.KindMap && len(path) == 0:
		return mapOutput
	}
	if s.Action == "wait_signal" && len(path) == 0 {
		var out []dsl.OutputField
		for _, f := range s.PayloadFields {
			out = append(out, dsl.OutputField{Name: f, Doc: "a field of the signal payload (with.schema)"})
		}
		return out
	}
	info := dsl.ActionInfoFor(s.Action)
	if info == nil {
		return nil
	}
	fields := info.Output
	for _, seg := range path {
		var next []dsl.OutputField
		for _, f := range fields {
			if f.Name == seg {
				next = f.Fields
			}
		}
		fields = next
	}
	return fields
}

// mapOutput is the output of a map step.
var mapOutput = []dsl.OutputField{
	{Name: "results", Doc: "each item's result, in item order; null where an item failed"},
	{Name: "errors", Doc: "the failed items: [{index, type, message}]"},
	{Name: "done", Doc: "how many items succeeded"},
	{Name: "failed", Doc: "how many items failed"},
	{Name: "total", Doc: "how many items there were"},
}
