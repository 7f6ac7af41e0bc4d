package dsl

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr/ast"
)

// shellArgPrefix starts the names of the environment variables through
// which a shell script's ${ } values reach the script: TQW_ARG_1,
// TQW_ARG_2, ... in the order the values appear. A step's env may not use
// it.
const shellArgPrefix = "TQW_ARG_"

// rawFn is raw(): the identity. What makes it raw is where the loader
// allows it, the whole ${ } of a shell script, which it then inserts
// unquoted.
func rawFn(v any) any { return v }

// shellChecks is the builder's state for the shell script rules.
type shellChecks struct {
	piece bool     // compiling a ${ } of a shell script: raw() may be its root
	raws  []rawUse // ${ raw(...) } pieces, checked for external data at the end
}

type rawUse struct {
	step int
	pos  Pos
	e    *Expr
}

// scriptPart is literal script text (e nil) or a ${ } piece.
type scriptPart struct {
	text string
	e    *Expr
	ctx  shellCtx
	raw  bool // ${ raw(...) }: inserted as code
}

// tScript is a shell action's script command with ${ } pieces. It
// evaluates to a renderedScript, or to a list when the whole command is
// one ${ } that yields a list (the argv form, unchanged).
type tScript struct {
	parts []scriptPart
}

// renderedScript is a script whose values are referenced, never written:
// env holds each value under its variable name.
type renderedScript struct {
	text string
	env  [][2]string
}

func (t tScript) exprs(out *[]*Expr) {
	for _, p := range t.parts {
		if p.e != nil {
			*out = append(*out, p.e)
		}
	}
}

func (t tScript) eval(m exprEnv) (any, error) {
	var sb strings.Builder
	var env [][2]string
	for _, p := range t.parts {
		if p.e == nil {
			sb.WriteString(p.text)
			continue
		}
		v, err := p.e.eval(m)
		if err != nil {
			return nil, err
		}
		if len(t.parts) == 1 && isList(v) {
			return v, nil // command: "${ list }" is argv, as before
		}
		if p.raw {
			s, err := Stringify(v)
			if err != nil {
				return nil, &evalError{Pos: p.e.Pos, Source: p.e.Source, Err: err}
			}
			sb.WriteString(s)
			continue
		}
		words, err := shellWords(v, p.ctx)
		if err != nil {
			return nil, &evalError{Pos: p.e.Pos, Source: p.e.Source, Err: err}
		}
		for j, w := range words {
			if j > 0 {
				sb.WriteByte(' ')
			}
			name := shellArgPrefix + strconv.Itoa(len(env)+1)
			env = append(env, [2]string{name, w})
			sb.WriteString(p.ctx.ref(name))
		}
	}
	return renderedScript{text: sb.String(), env: env}, nil
}

func isList(v any) bool {
	if v == nil {
		return false
	}
	k := reflect.TypeOf(v).Kind()
	return k == reflect.Slice || k == reflect.Array
}

// shellWords renders v as the words one ${ } stands for in context c: a
// scalar is one word (its text, as Stringify writes it); a list is one
// word per element, only where words are separate (unquoted); a map is
// never a word.
func shellWords(v any, c shellCtx) ([]string, error) {
	if !c.safe() {
		return nil, errors.New("this place of the shell script cannot hold a value")
	}
	if isList(v) {
		if c != ctxWord {
			return nil, errors.New(`a list inside quotes or a here-document would be several words in one place; make it one string, e.g. join(x, " ")`)
		}
		rv := reflect.ValueOf(v)
		words := make([]string, 0, rv.Len())
		for i := range rv.Len() {
			w, err := shellWord(rv.Index(i).Interface())
			if err != nil {
				return nil, fmt.Errorf("list element %d: %w", i, err)
			}
			words = append(words, w)
		}
		return words, nil
	}
	w, err := shellWord(v)
	if err != nil {
		return nil, err
	}
	return []string{w}, nil
}

func shellWord(v any) (string, error) {
	switch v.(type) {
	case nil, string, bool, int, int64, uint64, float64, time.Time, time.Duration:
	default:
		switch reflect.TypeOf(v).Kind() {
		case reflect.Map, reflect.Struct:
			return "", errors.New("a map cannot be a shell word; insert its JSON text with toJSON(x), or pass the fields you need one by one")
		case reflect.Slice, reflect.Array:
			return "", errors.New("a nested list cannot be a shell word")
		}
	}
	s, err := Stringify(v)
	if err != nil {
		return "", err
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", errors.New("the value contains a NUL byte, which no shell word can hold")
	}
	return s, nil
}

// tShellWith is a shell action's with whose script command has ${ }
// pieces: it renders the map, then moves the script's values into env.
type tShellWith struct {
	pos Pos
	m   tMap
}

func (t tShellWith) exprs(out *[]*Expr) { t.m.exprs(out) }

func (t tShellWith) eval(m exprEnv) (any, error) {
	v, err := t.m.eval(m)
	if err != nil {
		return nil, err
	}
	out := v.(map[string]any)
	rs, ok := out["command"].(renderedScript)
	if !ok {
		return out, nil
	}
	out["command"] = rs.text
	if len(rs.env) == 0 {
		return out, nil
	}
	// The schema makes env a literal map, whose names the loader checked
	// (checkShellEnv); its values may be templates.
	env := map[string]any{}
	switch e := out["env"].(type) {
	case nil:
	case map[string]any:
		maps.Copy(env, e)
	default:
		return nil, &evalError{Pos: t.pos, Source: "with.env", Err: fmt.Errorf("env evaluates to %T; want a map of strings", e)}
	}
	for _, kv := range rs.env {
		env[kv[0]] = kv[1]
	}
	out["env"] = env
	return out, nil
}

// withTemplate compiles the with of a step that runs action. A shell
// action's script command (a string) is compiled by script; every other
// field, and every other action's with, as an ordinary template.
func (b *builder) withTemplate(action string, n *node, sc scope, step int) *Template {
	t := b.withTemplateRaw(action, n, sc, step)
	if t == nil {
		return nil
	}
	if cs, err := loadSchemas(); err == nil && cs.withDefs[action] != nil {
		t.root = b.textFields(t.root, cs.withDefs[action], "")
	}
	return t
}

func (b *builder) withTemplateRaw(action string, n *node, sc scope, step int) *Template {
	if action != "shell" || n == nil || n.kind != kMap {
		return b.template(n, sc, step)
	}
	b.checkShellEnv(n.get("env"))
	cmd := n.get("command")
	if cmd == nil || cmd.kind != kString || !strings.Contains(cmd.str(), "${") {
		return b.template(n, sc, step)
	}
	t := tMap{keys: make([]string, len(n.keys)), vals: make([]tnode, len(n.vals))}
	for i, k := range n.keys {
		t.keys[i], _ = k.scalar.(string)
		if n.vals[i] == cmd {
			t.vals[i] = b.script(cmd, sc, step)
		} else {
			t.vals[i] = b.tnode(n.vals[i], sc, step)
		}
	}
	return &Template{Pos: n.pos, root: tShellWith{pos: n.pos, m: t}}
}

// checkShellEnv rejects literal env names that the script's values use.
func (b *builder) checkShellEnv(env *node) {
	if env == nil || env.kind != kMap {
		return
	}
	for _, k := range env.keys {
		if name, _ := k.scalar.(string); strings.HasPrefix(name, shellArgPrefix) {
			b.sink.errorf(k.pos, CodeShellReservedEnv, "choose another name; the script's ${ } values arrive as "+shellArgPrefix+"1, "+shellArgPrefix+"2, ...",
				"env variable %s: names starting with %s are reserved in a shell step", name, shellArgPrefix)
		}
	}
}

// script compiles a shell script string with ${ } pieces.
func (b *builder) script(n *node, sc scope, step int) tnode {
	s := n.str()
	parts, srcs, err := splitTemplate(s)
	if err != nil {
		b.sink.errorf(n.pos, CodeExprCompile, "write ${ expression }; write $${ for a literal ${", "template %q: %v", s, err)
		return tLiteral{s}
	}
	if len(srcs) == 0 {
		return tLiteral{parts[0].text}
	}
	var text strings.Builder
	var offsets []int
	for _, p := range parts {
		if p.e == nil {
			text.WriteString(p.text)
		} else {
			offsets = append(offsets, text.Len())
			text.WriteByte(0)
		}
	}
	ctxs := scanScript(text.String(), offsets)
	poss := b.piecePositions(n, pieceTexts(s))
	out := tScript{parts: make([]scriptPart, 0, len(parts))}
	ok := true
	k := 0
	for _, p := range parts {
		if p.e == nil {
			out.parts = append(out.parts, scriptPart{text: p.text})
			continue
		}
		ctx, pos := ctxs[k], n.pos
		if k < len(poss) {
			pos = poss[k]
		}
		k++
		if !ctx.safe() {
			where, hint := ctx.problem()
			b.sink.errorf(pos, CodeShellUnsafe, hint, "shell script: ${ %s } is %s", p.text, where)
			ok = false
			continue
		}
		b.shell.piece = true
		e := b.compileExpr(p.text, pos, sc, step)
		b.shell.piece = false
		if e == nil {
			ok = false
			continue
		}
		raw := false
		if root, _ := rawCalls(e.prog.Node()); root {
			raw = true
			b.shell.raws = append(b.shell.raws, rawUse{step: step, pos: pos, e: e})
		}
		out.parts = append(out.parts, scriptPart{e: e, ctx: ctx, raw: raw})
	}
	if !ok {
		return tLiteral{s}
	}
	return out
}

// pieceTexts returns each ${ } piece of s as written, as splitTemplate
// finds them.
func pieceTexts(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			i++
			continue
		}
		end := matchBrace(s, i+2)
		if end < 0 {
			break
		}
		out = append(out, s[i:end+1])
		i = end + 1
	}
	return out
}

// piecePositions finds each piece in the file after the string's own
// position, so a diagnostic points at the ${ } itself; from the first
// piece it cannot find (one written with YAML escapes) on, it falls back
// to the string's position.
func (b *builder) piecePositions(n *node, texts []string) []Pos {
	src := string(b.w.Source)
	off, ok := offsetOf(src, n.pos)
	out := make([]Pos, len(texts))
	for i, t := range texts {
		out[i] = n.pos
		if !ok {
			continue
		}
		limit := off + 4*len(n.str()) + 256
		j := strings.Index(src[off:], t)
		if j < 0 || off+j > limit {
			ok = false
			continue
		}
		off += j
		out[i] = posAt(src, off)
		off += len(t)
	}
	return out
}

// offsetOf returns the byte offset of p (1-based line, column in runes).
func offsetOf(src string, p Pos) (int, bool) {
	off := 0
	for line := 1; line < p.Line; line++ {
		j := strings.IndexByte(src[off:], '\n')
		if j < 0 {
			return 0, false
		}
		off += j + 1
	}
	for col := 1; col < p.Col; col++ {
		if off >= len(src) || src[off] == '\n' {
			return 0, false
		}
		_, size := utf8.DecodeRuneInString(src[off:])
		off += size
	}
	return off, true
}

func posAt(src string, off int) Pos {
	line := 1 + strings.Count(src[:off], "\n")
	start := strings.LastIndexByte(src[:off], '\n') + 1
	return Pos{Line: line, Col: 1 + utf8.RuneCountInString(src[start:off])}
}

// rawCalls reports whether the expression's root is a call of raw with
// one argument, and how many calls of raw it has in all.
func rawCalls(root ast.Node) (isRoot bool, n int) {
	v := &rawVisitor{}
	ast.Walk(&root, v)
	if c, ok := root.(*ast.CallNode); ok && len(c.Arguments) == 1 {
		if id, ok := c.Callee.(*ast.IdentifierNode); ok && id.Value == "raw" {
			isRoot = true
		}
	}
	return isRoot, v.n
}

type rawVisitor struct{ n int }

func (v *rawVisitor) Visit(n *ast.Node) {
	if c, ok := (*n).(*ast.CallNode); ok {
		if id, ok := c.Callee.(*ast.IdentifierNode); ok && id.Value == "raw" {
			v.n++
		}
	}
}

// misplacedRaw reports, and returns true for, an expression that calls
// raw() anywhere but as the root of a shell script's ${ }.
func (b *builder) misplacedRaw(src string, c *compiled, pos Pos) bool {
	if !strings.Contains(src, "raw") || c.prog == nil {
		return false
	}
	root, n := rawCalls(c.prog.Node())
	if n == 0 || (b.shell.piece && root && n == 1) {
		return false
	}
	hint := "raw() matters only where a shell parses the value; elsewhere drop it"
	if b.shell.piece {
		hint = "write the whole piece as ${ raw(EXPRESSION) }"
	}
	b.sink.errorf(pos, CodeShellRawMisplaced, hint, "expression %q: raw() is allowed only as the whole ${ } of a shell action's script command", src)
	return true
}

// exprReads is what an expression reads: whether any source of external
// data, the first one named, and the variables.
type exprReads struct {
	external string   // "input", "steps", ... or ""
	vars     []string // vars.NAME read
	anyVar   bool     // vars read other than as vars.NAME
}

type readsVisitor struct {
	item      bool // item is external here
	r         exprReads
	varIdents int
}

func (v *readsVisitor) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.IdentifierNode:
		switch x.Value {
		case "input", "steps", "output", "error":
			if v.r.external == "" {
				v.r.external = x.Value
			}
		case "item":
			if v.item && v.r.external == "" {
				v.r.external = "item"
			}
		case "vars":
			v.varIdents++
		}
	case *ast.MemberNode:
		if id, ok := x.Node.(*ast.IdentifierNode); ok && id.Value == "vars" {
			if s, ok := x.Property.(*ast.StringNode); ok {
				v.r.vars = append(v.r.vars, s.Value)
			}
		}
	}
}

func readsOf(exprs []*Expr, item bool) exprReads {
	v := &readsVisitor{item: item}
	for _, e := range exprs {
		if e == nil || e.prog == nil {
			continue
		}
		root := e.prog.Node()
		ast.Walk(&root, v)
	}
	v.r.anyVar = v.varIdents > len(v.r.vars)
	return v.r
}

// checkRawScripts warns about every ${ raw(...) } that reads external
// data, directly or through variables set from it anywhere in the file.
func (b *builder) checkRawScripts() {
	if len(b.shell.raws) == 0 {
		return
	}
	type assignment struct {
		name  string
		reads exprReads
	}
	var as []assignment
	addSet := func(set []Assignment) {
		for _, a := range set {
			as = append(as, assignment{a.Name, readsOf(a.Value.Exprs(), false)})
		}
	}
	if w := b.w.Vars; w != nil {
		if m, ok := w.root.(tMap); ok {
			for i, k := range m.keys {
				var es []*Expr
				m.vals[i].exprs(&es)
				as = append(as, assignment{k, readsOf(es, false)})
			}
		}
	}
	for _, s := range b.w.all {
		if s == nil {
			continue
		}
		addSet(s.Set)
		for _, c := range s.Catch {
			addSet(c.Set)
		}
	}
	// tainted[name] is why variable name may hold external data.
	tainted := map[string]string{}
	for changed := true; changed; {
		changed = false
		for _, a := range as {
			if _, ok := tainted[a.name]; ok {
				continue
			}
			if _, root := taintOf(a.reads, tainted); root != "" {
				tainted[a.name] = root
				changed = true
			}
		}
	}
	for _, r := range b.shell.raws {
		item := false
		if r.step >= 0 && r.step < len(b.w.all) && b.w.all[r.step] != nil {
			item = itemExternal(b.w.all[r.step])
		}
		why, _ := taintOf(readsOf([]*Expr{r.e}, item), tainted)
		if why == "" {
			continue
		}
		b.sink.warnf(r.pos, CodeShellRawExternal,
			"drop raw() so the value arrives as one quoted word, or pass it in env and read \"$NAME\"; keep raw() for shell code the workflow itself wrote",
			"${ %s } inserts %s into the shell script as code: a value such as \"x; rm -rf ~\" would run", r.e.Source, why)
	}
}

// taintOf says which external data the reads may carry ("" for none),
// and the source it comes from in the end, for the variables it taints.
func taintOf(r exprReads, tainted map[string]string) (desc, root string) {
	if r.external != "" {
		return "data read from " + r.external, "data read from " + r.external
	}
	for _, v := range r.vars {
		if why, ok := tainted[v]; ok {
			return fmt.Sprintf("vars.%s, which may hold %s,", v, why), why
		}
	}
	if r.anyVar && len(tainted) > 0 {
		names := slices.Sorted(maps.Keys(tainted))
		return fmt.Sprintf("variables such as vars.%s, which may hold %s,", names[0], tainted[names[0]]), tainted[names[0]]
	}
	return "", ""
}

// itemExternal reports whether the item step s reads may be external
// data: its foreach's, else that of the map whose steps hold it, when the
// items are computed.
func itemExternal(s *Step) bool {
	if f := s.Foreach; f != nil && f.Items != nil {
		_, static := f.Items.Static()
		return !static
	}
	for blk := s.Block; blk != nil && blk.Owner != nil; blk = blk.Owner.Block {
		if m := blk.Owner.Map; m != nil && m.Items != nil {
			_, static := m.Items.Static()
			return !static
		}
	}
	return false
}
