package dsl

import (
	"fmt"
	"sort"
	"strings"
)

// EdgeKind says why one step can follow another.
type EdgeKind string

// Edge kinds.
const (
	EdgeNext    EdgeKind = "next"    // the step's next
	EdgeFall    EdgeKind = "follow"  // no next: the following step in the file
	EdgeCase    EdgeKind = "case"    // a switch case
	EdgeCatch   EdgeKind = "catch"   // a catch rule
	EdgeTimeout EdgeKind = "timeout" // on_timeout
	EdgeEnd     EdgeKind = "end"     // the run ends after the last step
)

// Edge is one possible transition. To is "" for an edge whose target is
// computed at run time (Label then holds the template) and for EdgeEnd.
type Edge struct {
	From  string
	To    string
	Kind  EdgeKind
	Label string // the case's when, the catch's error types, ...
}

// Edges returns every transition the workflow can take, in step order,
// in every block (a transition never leaves its block; EdgeEnd ends it).
func (w *Workflow) Edges() []Edge { return w.edges() }

func (w *Workflow) edges() []Edge {
	var out []Edge
	for _, s := range w.all {
		if s == nil || s.Kind == KindSucceed || s.Kind == KindFail || s.Kind == "" {
			continue
		}
		for _, c := range s.Switch {
			label := ""
			if c.When != nil {
				label = c.When.Source
			}
			out = append(out, target(s.ID, c.Next, EdgeCase, label))
		}
		if s.OnTimeout != "" {
			out = append(out, Edge{From: s.ID, To: s.OnTimeout, Kind: EdgeTimeout, Label: "timeout"})
		}
		for _, r := range s.Catch {
			label := "catch"
			if len(r.On) > 0 {
				label = "catch " + strings.Join(r.On, ", ")
			}
			if r.When != nil {
				label += " if " + r.When.Source
			}
			out = append(out, target(s.ID, r.Next, EdgeCatch, label))
		}
		switch {
		case s.Next != nil:
			label := ""
			if len(s.Switch) > 0 {
				label = "else"
			}
			out = append(out, target(s.ID, s.Next, EdgeNext, label))
		case w.Following(s) != nil:
			label := ""
			if len(s.Switch) > 0 {
				label = "else"
			}
			out = append(out, Edge{From: s.ID, To: w.Following(s).ID, Kind: EdgeFall, Label: label})
		default:
			out = append(out, Edge{From: s.ID, Kind: EdgeEnd})
		}
	}
	return out
}

func target(from string, t *Template, k EdgeKind, label string) Edge {
	e := Edge{From: from, Kind: k, Label: label}
	if v, ok := t.Static(); ok {
		e.To, _ = v.(string)
		return e
	}
	if t != nil {
		var srcs []string
		for _, x := range t.Exprs() {
			srcs = append(srcs, x.Source)
		}
		e.Label = strings.TrimSpace(label + " ${ " + strings.Join(srcs, " ") + " }")
	}
	return e
}

// checkTargets reports next, switch, catch and on_timeout targets that
// name no step, or a step of another block.
func (b *builder) checkTargets() {
	ids := b.sortedIDs()
	var from *Step
	check := func(n *node, id string) {
		if id == "" {
			return
		}
		if j, ok := b.w.index[id]; ok {
			if to := b.w.all[j]; to != nil && from != nil && to.Block != from.Block {
				b.sink.errorf(n.pos, CodeTargetOtherBlock, "a block is left only by reaching its end (or succeed, or fail); route to a step of "+blockName(from.Block),
					"step %q is in %s, step %q in %s: next, switch, catch and on_timeout go to a step of the same block", to.ID, blockName(to.Block), from.ID, blockName(from.Block))
			}
			return
		}
		hint := "steps: " + strings.Join(ids[:min(len(ids), 20)], ", ")
		if c := b.closest(id, ids); c != "" {
			hint = fmt.Sprintf("did you mean %q?", c)
		}
		b.sink.errorf(n.pos, CodeUnknownStep, hint, "no step has id %q", id)
	}
	for i, ss := range b.specs {
		from = b.w.all[i]
		static := func(n *node) {
			if n != nil && !strings.Contains(n.str(), "${") {
				check(n, n.str())
			}
		}
		static(ss.Next)
		static(ss.OnTimeout)
		for _, c := range ss.Switch {
			static(c.Next)
		}
		for _, c := range ss.Catch {
			static(c.Next)
		}
	}
}

// stepGraph is the transition graph over step indexes. A step with a
// computed target can go anywhere.
type stepGraph struct {
	succ     [][]int
	anywhere []bool
}

func (b *builder) graph() *stepGraph {
	n := len(b.w.all)
	g := &stepGraph{succ: make([][]int, n), anywhere: make([]bool, n)}
	for _, e := range b.edges {
		from, ok := b.w.index[e.From]
		if !ok || e.Kind == EdgeEnd {
			continue
		}
		if e.To == "" {
			g.anywhere[from] = true
		} else if to, ok := b.w.index[e.To]; ok {
			g.succ[from] = append(g.succ[from], to)
		}
	}
	return g
}

// checkReachable warns about each step no path from the first step of its
// block reaches.
func (b *builder) checkReachable() {
	n := len(b.w.all)
	if n == 0 {
		return
	}
	g := b.graph()
	seen := make([]bool, n)
	for _, blk := range b.w.blocks {
		if len(blk.Steps) == 0 || blk.Steps[0] == nil {
			continue
		}
		first := blk.Steps[0].ord
		seen[first] = true
		stack := []int{first}
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if g.anywhere[i] { // every step of the block is reachable
				for _, s := range blk.Steps {
					if s != nil {
						seen[s.ord] = true
					}
				}
				break
			}
			for _, j := range g.succ[i] {
				if !seen[j] {
					seen[j] = true
					stack = append(stack, j)
				}
			}
		}
	}
	for i, s := range b.w.all {
		if seen[i] || s == nil {
			continue
		}
		b.sink.warnf(b.specs[i].ID.at(b.specs[i].At), CodeUnreachable, "route to it with next, switch, catch or on_timeout, or delete it", "step %q can never run", s.ID)
	}
}

// blockName names a block in messages.
func blockName(blk *Block) string {
	switch {
	case blk == nil || blk.Path == "":
		return "the top-level steps"
	case blk.Owner == nil:
		return blk.Path
	case blk.Owner.Kind == KindMap:
		return "the steps of map " + blk.Owner.ID
	}
	return "branch " + blk.Path
}

// enclosing returns the step of block outer whose block contains from
// (from itself when it is in outer), or nil when outer does not enclose
// from's block.
func enclosing(from *Step, outer *Block) *Step {
	for s := from; s != nil; s = s.Block.Owner {
		if s.Block == outer {
			return s
		}
		if s.Block == nil {
			return nil
		}
	}
	return nil
}

// closure computes, for every step, the set of steps that can run after it
// (one transition or more), as bitsets shared per strongly connected
// component: O(edges × steps / 64) time, so even the largest workflow the
// limits allow is checked quickly.
type closure struct {
	comp  []int      // step -> component
	reach [][]uint64 // component -> bitset of steps
}

func (c *closure) canFollow(from, to int) bool {
	return c.reach[c.comp[from]][to/64]&(1<<(uint(to)%64)) != 0
}

func newClosure(g *stepGraph) *closure {
	n := len(g.succ)
	words := (n + 63) / 64
	// Tarjan's algorithm, iterative; it emits components sinks first.
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	c := &closure{comp: make([]int, n)}
	var stack []int
	var members [][]int
	next := 0
	type frame struct{ v, edge int }
	succOf := func(v int) []int { return g.succ[v] }
	for root := 0; root < n; root++ {
		if index[root] >= 0 {
			continue
		}
		call := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.edge < len(succOf(f.v)) {
				w := succOf(f.v)[f.edge]
				f.edge++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				} else if onStack[w] {
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] == index[v] {
				var m []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					c.comp[w] = len(members)
					m = append(m, w)
					if w == v {
						break
					}
				}
				members = append(members, m)
			}
		}
	}
	all := make([]uint64, words)
	for i := 0; i < n; i++ {
		all[i/64] |= 1 << (uint(i) % 64)
	}
	c.reach = make([][]uint64, len(members))
	for ci, m := range members { // successors' components come first
		r := make([]uint64, words)
		for _, v := range m {
			if g.anywhere[v] {
				copy(r, all)
				break
			}
			for _, w := range g.succ[v] {
				r[w/64] |= 1 << (uint(w) % 64)
				if cw := c.comp[w]; cw != ci {
					for k, x := range c.reach[cw] {
						r[k] |= x
					}
				}
			}
		}
		c.reach[ci] = r
	}
	return c
}

// checkStepRefs reports steps.<id> reads of steps that do not exist
// (error) or that cannot have run before the reading step (warning).
func (b *builder) checkStepRefs() {
	var cl *closure
	var ids []string
	for _, r := range b.stepRefs {
		j, ok := b.w.index[r.id]
		if !ok {
			if ids == nil {
				ids = b.sortedIDs()
			}
			hint := ""
			if c := b.closest(r.id, ids); c != "" {
				hint = fmt.Sprintf("did you mean steps.%s?", c)
			}
			b.sink.errorf(r.pos, CodeExprStep, hint, "expression reads steps.%s, but no step has id %q", r.id, r.id)
			continue
		}
		if r.from < 0 {
			// Top level (outputs:): the run's own steps; a branch's or
			// map item's run as child runs and leave no steps.X here.
			if t := b.w.all[j]; t != nil && t.Block != nil && t.Block.Owner != nil {
				b.sink.errorf(r.pos, CodeExprOtherBlock, "read what a branch or map produced through the output of its step (steps."+t.Block.Owner.ID+".output)",
					"outputs reads steps.%s, which is in %s", r.id, blockName(t.Block))
			}
			continue
		}
		// A step reads the steps of its own block and of the blocks that
		// enclose it, through the step of that block it runs inside.
		reader, target := b.w.all[r.from], b.w.all[j]
		if reader == nil || target == nil {
			continue
		}
		at := enclosing(reader, target.Block)
		if at == nil {
			if target.Block.Owner == nil && reader.Block.Owner == nil {
				continue // on_error and finally read what the run left; their checks are theirs
			}
			hint := "read what a branch or map produced through the output of its step"
			if o := target.Block.Owner; o != nil {
				hint += " (steps." + o.ID + ".output)"
			}
			b.sink.errorf(r.pos, CodeExprOtherBlock, hint, "step %q reads steps.%s, which is in %s: that block never runs before this step", reader.ID, r.id, blockName(target.Block))
			continue
		}
		if cl == nil {
			cl = newClosure(b.graph())
		}
		if !cl.canFollow(j, at.ord) {
			hint := "no path runs it before this step, so steps." + r.id + " would be missing"
			if j == at.ord {
				hint = "inside its own step, read the output as output"
				if at != reader {
					hint = "a step inside " + r.id + " runs before it ends; read " + r.id + "'s output after it"
				}
			}
			b.sink.warnf(r.pos, CodeExprNotRun, hint, "step %q reads steps.%s, which cannot have run yet", reader.ID, r.id)
		}
	}
}

func (b *builder) sortedIDs() []string {
	ids := make([]string, 0, len(b.w.index))
	for id := range b.w.index {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// closest is the package's closest, limited to the first 100 hints of a
// load so that a file full of typos stays cheap to check.
func (b *builder) closest(s string, cands []string) string {
	if b.hints >= 100 {
		return ""
	}
	b.hints++
	return closest(s, cands)
}
