package dsl

import (
	"regexp"
	"strings"
)

// Span is a range of a workflow file: Start is the first character, End
// the position just past the last (columns count code points from 1).
type Span struct {
	Start Pos `json:"start"`
	End   Pos `json:"end"`
}

// Contains reports whether p lies in s (End excluded, except that an
// empty span contains its start).
func (s Span) Contains(p Pos) bool {
	if before(p, s.Start) {
		return false
	}
	return before(p, s.End) || p == s.End && s.Start == s.End
}

func before(a, b Pos) bool {
	return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
}

// Outline is the structure of a workflow file that editors navigate by:
// where each step is defined and every place a step id, a secret or a
// variable is named. It is read from the YAML alone, without the schema
// or the rule checks, so a file the loader rejects for other reasons
// still has one.
type Outline struct {
	// Steps are the steps of every block in file order: a parallel or
	// map step comes before the steps of its blocks.
	Steps []StepDef
	// Blocks are the nested lists of steps: parallel branches, map
	// steps, on_error and finally, in file order.
	Blocks []BlockDef
	// StepRefs are the places a step id is named: next, switch[].next,
	// catch[].next and on_timeout values that are literal ids, and
	// steps.<id> inside expressions.
	StepRefs []NameRef
	// Secrets are the names declared under secrets.
	Secrets []NameDef
	// SecretRefs are secrets.<name> inside expressions and with.api_key_secret.
	SecretRefs []NameRef
	// Vars are the variables assigned anywhere: the keys of vars, of
	// every step's set and of every catch rule's set, in file order.
	Vars []NameDef
	// SecretsKey is where the secrets key is, when the file has one.
	SecretsKey *Span
}

// StepDef is one step of an outline.
type StepDef struct {
	ID          string
	Description string
	Kind        Kind   // "" when the step's keys do not say
	Action      string // the action, or the foreach's action
	IDSpan      Span   // the id's value
	Span        Span   // the whole step, from its first key to its last line
	// PayloadFields are the properties of a wait_signal step's
	// with.schema: the fields its output (the signal payload) has.
	PayloadFields []string
	// Block is the path of the list the step is in, as in Block.Path:
	// "" for the workflow's steps, "<step>/<branch>", "<step>/item",
	// "on_error" or "finally".
	Block string
	// Parent is the index in Steps of the parallel or map step whose
	// block holds this one, -1 for the others.
	Parent int
	// Branches are a parallel step's branch names, in file order.
	Branches []string
}

// BlockDef is a nested list of steps of an outline.
type BlockDef struct {
	Path   string // as in StepDef.Block
	Name   string // the branch name, "steps" for a map, on_error or finally
	Parent int    // index in Outline.Steps of the step that owns it, -1 for on_error and finally
	Key    Span   // the key that opens the block
	Span   Span   // from the key to the end of its last step
}

// NameDef is a name declared or assigned in the file.
type NameDef struct {
	Name string
	Span Span
}

// Reference contexts in NameRef.Context.
const (
	refNext       = "next"
	refSwitch     = "switch.next"
	refCatch      = "catch.next"
	refOnTimeout  = "on_timeout"
	refExpression = "expression"
	refWith       = "with"
)

// NameRef is one place a name is used.
type NameRef struct {
	Name    string
	Span    Span
	Context string // next, switch.next, catch.next, on_timeout, expression or with
	Step    int    // index of the step it is written in; -1 outside steps
}

// StepAt returns the index of the innermost step whose span holds p, or -1.
func (o *Outline) StepAt(p Pos) int {
	at := -1
	for i, s := range o.Steps { // a nested step comes after the steps around it
		if s.Span.Contains(p) || s.Span.End == p {
			at = i
		}
	}
	return at
}

// StepByID returns the first step with the given id, or nil.
func (o *Outline) StepByID(id string) *StepDef {
	for i := range o.Steps {
		if o.Steps[i].ID == id {
			return &o.Steps[i]
		}
	}
	return nil
}

// ParseOutline reads the outline of src. It returns nil when src is not
// YAML the loader can read (it then reports a yaml.* diagnostic).
func ParseOutline(src []byte) *Outline {
	root := parseYAML(&diagSink{}, src, DefaultLimits)
	if root == nil || root.kind != kMap {
		return nil
	}
	li := newLineIndex(src)
	o := &Outline{}
	span := func(n *node) Span { return Span{n.pos, li.tokenEnd(n.pos)} }
	if k := root.key("secrets"); k != nil {
		s := span(k)
		o.SecretsKey = &s
		if l := root.get("secrets"); l != nil {
			for _, it := range l.items {
				if it.kind == kString {
					o.Secrets = append(o.Secrets, NameDef{it.str(), span(it)})
				}
			}
		}
	}
	addVars := func(m *node) {
		if m == nil || m.kind != kMap {
			return
		}
		for _, k := range m.keys {
			o.Vars = append(o.Vars, NameDef{k.str(), span(k)})
		}
	}
	addVars(root.get("vars"))
	w := outliner{li: li, o: o, addVars: addVars}
	last := len(li.lines)
	for i, k := range root.keys {
		switch v := root.vals[i]; k.str() {
		case "steps":
			w.block(v, "", -1, keyLimit(root, i, last))
		case "on_error", "finally":
			w.open(k, v, k.str(), k.str(), -1, keyLimit(root, i, last))
		}
	}
	o.scanExpressions(li)
	return o
}

var stepIDRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// outliner walks the lists of steps of a file, nested ones included.
type outliner struct {
	li      *lineIndex
	o       *Outline
	addVars func(*node)
}

func (w *outliner) span(n *node) Span { return Span{n.pos, w.li.tokenEnd(n.pos)} }

// keyLimit is the last line the value of m's i-th key may take: the line
// before m's next key, or limit.
func keyLimit(m *node, i, limit int) int {
	if i+1 < len(m.keys) && m.keys[i+1].pos.Line-1 < limit {
		return max(m.keys[i+1].pos.Line-1, m.keys[i].pos.Line)
	}
	return limit
}

// block adds the steps of list, which ends at line limit at the latest.
func (w *outliner) block(list *node, path string, parent, limit int) {
	if list == nil || list.kind != kList {
		return
	}
	o := w.o
	for i, st := range list.items {
		if st.kind != kMap {
			continue
		}
		end := limit
		if i+1 < len(list.items) {
			end = min(end, max(list.items[i+1].pos.Line-1, st.pos.Line))
		}
		d := outlineStep(w.li, st, end)
		d.Block, d.Parent = path, parent
		o.Steps = append(o.Steps, d)
		idx := len(o.Steps) - 1
		ref := func(n *node, ctx string) {
			if n != nil && n.kind == kString && stepIDRE.MatchString(n.str()) {
				o.StepRefs = append(o.StepRefs, NameRef{n.str(), w.span(n), ctx, idx})
			}
		}
		ref(st.get("next"), refNext)
		ref(st.get("on_timeout"), refOnTimeout)
		if sw := st.get("switch"); sw != nil {
			for _, c := range sw.items {
				ref(c.get("next"), refSwitch)
			}
		}
		w.addVars(st.get("set"))
		if ca := st.get("catch"); ca != nil {
			for _, c := range ca.items {
				ref(c.get("next"), refCatch)
				w.addVars(c.get("set"))
			}
		}
		with := st.get("with")
		if fe := st.get("foreach"); fe != nil && fe.kind == kMap {
			with = fe.get("with")
		}
		if n := with.get("api_key_secret"); n != nil && n.kind == kString {
			o.SecretRefs = append(o.SecretRefs, NameRef{n.str(), w.span(n), refWith, idx})
		}
		w.nested(st, idx, o.Steps[idx].Span.End.Line)
	}
}

// nested adds the blocks of the parallel or map step st (index idx),
// which ends at line limit.
func (w *outliner) nested(st *node, idx, limit int) {
	id := st.get("id").str()
	for i, k := range st.keys {
		v, lim := st.vals[i], keyLimit(st, i, limit)
		if v.kind != kMap || k.str() != "parallel" && k.str() != "map" {
			continue
		}
		for j, vk := range v.keys {
			vv, vlim := v.vals[j], keyLimit(v, j, lim)
			switch {
			case k.str() == "map" && vk.str() == "steps":
				w.open(vk, vv, id+"/item", "steps", idx, vlim)
			case k.str() == "parallel" && vk.str() == "branches" && vv.kind == kMap:
				for b, name := range vv.keys {
					w.o.Steps[idx].Branches = append(w.o.Steps[idx].Branches, name.str())
					w.open(name, vv.vals[b], id+"/"+name.str(), name.str(), idx, keyLimit(vv, b, vlim))
				}
			}
		}
	}
}

// open adds the block that key opens and its steps.
func (w *outliner) open(key, list *node, path, name string, parent, limit int) {
	if list == nil || list.kind != kList {
		return
	}
	b := len(w.o.Blocks)
	w.o.Blocks = append(w.o.Blocks, BlockDef{Path: path, Name: name, Parent: parent, Key: w.span(key)})
	first := len(w.o.Steps)
	w.block(list, path, parent, limit)
	end := w.o.Blocks[b].Key.End
	for _, s := range w.o.Steps[first:] {
		if before(end, s.Span.End) {
			end = s.Span.End
		}
	}
	w.o.Blocks[b].Span = Span{key.pos, end}
}

// outlineStep describes the step st, which ends at line limit at the
// latest.
func outlineStep(li *lineIndex, st *node, limit int) StepDef {
	d := StepDef{ID: st.get("id").str(), Description: st.get("description").str(), Parent: -1}
	if id := st.get("id"); id != nil {
		d.IDSpan = Span{id.pos, li.tokenEnd(id.pos)}
	} else {
		d.IDSpan = Span{st.pos, st.pos}
	}
	for _, k := range []string{"action", "foreach", "call", "parallel", "map", "succeed", "fail", "switch", "set", "next"} {
		if st.key(k) != nil {
			d.Kind = Kind(k)
			if k == "next" {
				d.Kind = KindSet
			}
			break
		}
	}
	d.Action = st.get("action").str()
	if fe := st.get("foreach"); fe != nil {
		d.Action = fe.get("action").str()
	}
	if d.Action == "wait_signal" {
		if props := st.get("with").get("schema").get("properties"); props != nil {
			for _, k := range props.keys {
				d.PayloadFields = append(d.PayloadFields, k.str())
			}
		}
	}
	if line := li.line(st.pos.Line); strings.HasPrefix(line[runeCol(line, st.pos.Col):], "{") {
		d.Span = Span{st.pos, li.tokenEnd(st.pos)} // a flow map: {id: a, ...}
		return d
	}
	// A block map runs to the last non-blank, non-comment line before
	// limit.
	last := min(limit, len(li.lines))
	for last > st.pos.Line {
		t := strings.TrimSpace(li.line(last))
		if t != "" && !strings.HasPrefix(t, "#") && t != "-" {
			break
		}
		last--
	}
	end := Pos{last, colOf(li.line(last), len(strings.TrimRight(li.line(last), " \t")))}
	if end.Line <= st.pos.Line && before(end, st.pos) {
		end = li.tokenEnd(st.pos)
	}
	d.Span = Span{st.pos, end}
	return d
}

// exprRefRE finds steps.<id> and secrets.<name> (or the ["name"] forms)
// in expression text.
var exprRefRE = regexp.MustCompile(`\b(steps|secrets)(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\])`)

// scanExpressions finds the names expressions read, line by line: inside
// every ${ } piece and in the value of every when. Like the loader's
// speculative scan it reads the raw text, so it also works on a file
// being edited; YAML escapes inside quoted scalars are not undone.
func (o *Outline) scanExpressions(li *lineIndex) {
	for n := 1; n <= len(li.lines); n++ {
		line := li.line(n)
		for _, r := range ExpressionRanges(line) {
			for _, m := range exprRefRE.FindAllStringSubmatchIndex(line[r[0]:r[1]], -1) {
				root := line[r[0]+m[2] : r[0]+m[3]]
				ns, ne := m[4], m[5]
				if ns < 0 {
					ns, ne = m[6], m[7]
				}
				name := line[r[0]+ns : r[0]+ne]
				sp := Span{Pos{n, colOf(line, r[0]+ns)}, Pos{n, colOf(line, r[0]+ne)}}
				ref := NameRef{Name: name, Span: sp, Context: refExpression, Step: o.StepAt(sp.Start)}
				switch root {
				case "steps":
					o.StepRefs = append(o.StepRefs, ref)
				case "secrets":
					o.SecretRefs = append(o.SecretRefs, ref)
				}
			}
		}
	}
}

// ExpressionRanges returns the byte ranges [start, end) of line that hold
// expression text: the inside of each ${ } piece (an unclosed one runs to
// the line's end) and the value of a "when:" key.
func ExpressionRanges(line string) [][2]int {
	var out [][2]int
	trimmed := strings.TrimLeft(line, " -")
	if v, ok := strings.CutPrefix(trimmed, "when:"); ok {
		start := len(line) - len(v)
		end := len(line)
		if i := strings.Index(v, " #"); i >= 0 {
			end = start + i
		}
		return append(out, [2]int{start, end})
	}
	for i := 0; i+1 < len(line); i++ {
		if line[i] != '$' || line[i+1] != '{' {
			continue
		}
		if i > 0 && line[i-1] == '$' {
			i++
			continue
		}
		end := matchBrace(line, i+2)
		if end < 0 {
			out = append(out, [2]int{i + 2, len(line)})
			break
		}
		out = append(out, [2]int{i + 2, end})
		i = end
	}
	return out
}
