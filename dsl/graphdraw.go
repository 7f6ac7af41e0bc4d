package dsl

import (
	"fmt"
	"io"
	"strings"
)

// The step graph as `tqw-dsl graph` and the web UI draw it: each block's
// steps grouped in a cluster of their own (a parallel step's branches, a
// map's steps, on_error, finally), the parallel or map step forking into
// its blocks and a join node ending them, whose edges are the step's own
// (next, catch, ...: they are taken once its blocks ended).

// Node names of a drawing that are not steps.
const (
	drawStart   = "(start)"
	drawEnd     = "(end)"
	drawFailure = "(failure)" // the run failed, timed out or was cancelled: on_error's entry
)

func joinNode(id string) string { return "(join " + id + ")" }

// drawItem is one element of a cluster: a step, a join node or a nested
// cluster.
type drawItem struct {
	step *Step
	join string // a join node's name, for the step it ends
	sub  *cluster
}

// cluster is a group of a drawing: the workflow's own steps (the root), a
// branch, a map's steps, on_error or finally.
type cluster struct {
	id, title string
	items     []drawItem
}

type drawEdge struct {
	from, to string // step ids or the node names above; to "" for a computed target
	label    string
	dashed   bool
}

type drawing struct {
	root  cluster
	first string // the first step
	edges []drawEdge
}

// drawing lays w out: clusters in file order and the edges of every
// block. A workflow without blocks draws as before blocks existed.
func (w *Workflow) drawing() *drawing {
	d := &drawing{}
	if len(w.Steps) > 0 && w.Steps[0] != nil {
		d.first = w.Steps[0].ID
	}
	out := map[string][]Edge{}
	for _, e := range w.Edges() {
		out[e.From] = append(out[e.From], e)
	}
	top := w.Block("")
	if top == nil {
		top = &Block{Steps: w.Steps}
	}
	d.root.items = d.block(w, top, out)
	for _, h := range []struct {
		blk   *Block
		title string
	}{{w.OnError, "on_error: when the run fails, times out or is cancelled"}, {w.Finally, "finally: after every outcome"}} {
		if h.blk == nil || firstStep(h.blk) == "" {
			continue
		}
		if h.blk == w.OnError || w.OnError == nil || firstStep(w.OnError) == "" {
			d.edges = append(d.edges, drawEdge{from: drawFailure, to: firstStep(h.blk), dashed: true})
		}
		c := &cluster{id: h.blk.Path, title: h.title}
		c.items = d.block(w, h.blk, out)
		d.root.items = append(d.root.items, drawItem{sub: c})
	}
	return d
}

// block adds the steps of blk and their edges, and returns its items.
func (d *drawing) block(w *Workflow, blk *Block, out map[string][]Edge) []drawItem {
	var items []drawItem
	for _, s := range blk.Steps {
		if s == nil {
			continue
		}
		items = append(items, drawItem{step: s})
		from := s.ID
		switch {
		case s.Kind == KindParallel && s.Parallel != nil:
			for _, br := range s.Parallel.Branches {
				c := &cluster{id: "b_" + s.ID + "__" + br.Name, title: "branch " + br.Name}
				d.fork(s.ID, br.Block)
				c.items = d.block(w, br.Block, out)
				items = append(items, drawItem{sub: c})
			}
			from = joinNode(s.ID)
			items = append(items, drawItem{join: from})
		case s.Kind == KindMap && s.Map != nil:
			title := fmt.Sprintf("%s: each item, concurrency %d", s.ID, s.Map.Concurrency)
			c := &cluster{id: "m_" + s.ID, title: title}
			d.fork(s.ID, s.Map.Block)
			c.items = d.block(w, s.Map.Block, out)
			items = append(items, drawItem{sub: c}, drawItem{join: joinNode(s.ID)})
			from = joinNode(s.ID)
		}
		for _, e := range out[s.ID] {
			de := drawEdge{from: from, to: e.To, label: e.Label, dashed: e.Kind == EdgeCatch || e.Kind == EdgeTimeout}
			if e.Kind == EdgeEnd {
				de.to = w.blockEnd(blk)
			}
			d.edges = append(d.edges, de)
		}
		// succeed and fail end their block: a branch or an item ends, the
		// run goes on to finally; fail is the run's failure.
		switch {
		case s.Kind == KindSucceed && (blk.Owner != nil || w.Finally != nil && blk != w.Finally):
			d.edges = append(d.edges, drawEdge{from: s.ID, to: w.blockEnd(blk)})
		case s.Kind == KindFail && blk.Owner != nil:
			d.edges = append(d.edges, drawEdge{from: s.ID, to: w.blockEnd(blk), label: "fail", dashed: true})
		case s.Kind == KindFail && blk.Path == "" && (w.OnError != nil || w.Finally != nil):
			d.edges = append(d.edges, drawEdge{from: s.ID, to: drawFailure, dashed: true})
		}
	}
	return items
}

// fork adds the edge from a parallel or map step into one of its blocks.
func (d *drawing) fork(id string, blk *Block) {
	if first := firstStep(blk); first != "" {
		d.edges = append(d.edges, drawEdge{from: id, to: first})
	}
}

// blockEnd is where the end of blk leads: a branch's or a map's to its
// step's join, the workflow's and on_error's to finally (or the end),
// finally's to the end.
func (w *Workflow) blockEnd(blk *Block) string {
	switch {
	case blk.Owner != nil:
		return joinNode(blk.Owner.ID)
	case blk != w.Finally && w.Finally != nil && firstStep(w.Finally) != "":
		return firstStep(w.Finally)
	}
	return drawEnd
}

func firstStep(blk *Block) string {
	if blk == nil || len(blk.Steps) == 0 || blk.Steps[0] == nil {
		return ""
	}
	return blk.Steps[0].ID
}

// WriteMermaid writes the step graph as a Mermaid flowchart: steps are
// nodes s_<id>, the blocks subgraphs.
func (w *Workflow) WriteMermaid(out io.Writer) error {
	d := w.drawing()
	var sb strings.Builder
	sb.WriteString("flowchart TD\n")
	sb.WriteString("  start((start)) --> " + mermaidID(d.first) + "\n")
	var items func(list []drawItem, indent string)
	items = func(list []drawItem, indent string) {
		for _, it := range list {
			switch {
			case it.step != nil:
				fmt.Fprintf(&sb, "%s%s[%s]\n", indent, mermaidID(it.step.ID), mermaidText(nodeLabel(it.step)))
			case it.join != "":
				fmt.Fprintf(&sb, "%s%s@{ shape: fork, label: %s }\n", indent, mermaidNode(it.join), mermaidText(it.join))
			default:
				fmt.Fprintf(&sb, "%ssubgraph %s [%s]\n", indent, it.sub.id, mermaidText(it.sub.title))
				items(it.sub.items, indent+"  ")
				fmt.Fprintf(&sb, "%send\n", indent)
			}
		}
	}
	items(d.root.items, "  ")
	dyn := 0
	for _, e := range d.edges {
		to := ""
		switch e.to {
		case "":
			dyn++
			to = fmt.Sprintf("dyn%d{{computed}}", dyn)
		case drawEnd:
			to = "done((end))"
		case drawFailure:
			to = "failure((failure))"
		default:
			to = mermaidNode(e.to)
		}
		from := mermaidNode(e.from)
		if e.from == drawFailure {
			from = "failure((failure))"
		}
		arrow := "-->"
		if e.dashed {
			arrow = "-.->"
		}
		if e.label != "" {
			fmt.Fprintf(&sb, "  %s %s|%s| %s\n", from, arrow, mermaidText(e.label), to)
		} else {
			fmt.Fprintf(&sb, "  %s %s %s\n", from, arrow, to)
		}
	}
	_, err := io.WriteString(out, sb.String())
	return err
}

func mermaidID(id string) string { return "s_" + id }

// mermaidNode is the Mermaid id of a drawing's node: s_<id> for a step,
// j_<id> for a parallel or map step's join.
func mermaidNode(name string) string {
	if id, ok := strings.CutPrefix(name, "(join "); ok {
		return "j_" + strings.TrimSuffix(id, ")")
	}
	return mermaidID(name)
}

// mermaidText quotes s as a Mermaid label. Mermaid's entity codes stand
// for the characters that would end the label (" and |), open markup
// (< and >: Mermaid sanitizes labels as HTML, so a tag would vanish or
// lose its brackets rather than show) or start an entity (& and #, so the
// text reads back exactly).
func mermaidText(s string) string {
	r := strings.NewReplacer(`"`, "#quot;", "|", "#124;", "<", "#lt;", ">", "#gt;", "&", "#amp;", "#", "#35;", "\n", " ")
	return `"` + r.Replace(s) + `"`
}

func nodeLabel(s *Step) string {
	switch s.Kind {
	case KindAction:
		return s.ID + ": " + s.Action
	case KindForeach:
		return s.ID + ": foreach " + s.Foreach.Action
	case KindCall:
		return s.ID + ": call " + s.Call.Workflow
	case KindParallel:
		if s.Parallel != nil && !s.Parallel.FailFast {
			return s.ID + ": parallel, fail all"
		}
		return s.ID + ": parallel, fail fast"
	}
	return s.ID + ": " + string(s.Kind)
}

// WriteDOT writes the step graph in Graphviz DOT, each block a cluster.
func (w *Workflow) WriteDOT(out io.Writer) error {
	d := w.drawing()
	var sb strings.Builder
	fmt.Fprintf(&sb, "digraph %q {\n  rankdir=TB;\n  node [shape=box];\n", w.Name)
	sb.WriteString("  \"(start)\" [shape=circle];\n  \"(end)\" [shape=doublecircle];\n")
	if w.OnError != nil || w.Finally != nil {
		sb.WriteString("  \"(failure)\" [shape=circle];\n")
	}
	fmt.Fprintf(&sb, "  \"(start)\" -> %q;\n", d.first)
	var items func(list []drawItem, indent string)
	items = func(list []drawItem, indent string) {
		for _, it := range list {
			switch {
			case it.step != nil:
				s := it.step
				shape := "box"
				switch s.Kind {
				case KindSwitch, KindSet:
					shape = "diamond"
				case KindSucceed, KindFail:
					shape = "octagon"
				}
				fmt.Fprintf(&sb, "%s%q [label=%q, shape=%s];\n", indent, s.ID, nodeLabel(s), shape)
			case it.join != "":
				fmt.Fprintf(&sb, "%s%q [label=\"\", shape=box, style=filled, fillcolor=black, height=0.06, width=1.2];\n", indent, it.join)
			default:
				fmt.Fprintf(&sb, "%ssubgraph %q {\n%s  label=%q;\n%s  style=rounded;\n", indent, "cluster_"+it.sub.id, indent, it.sub.title, indent)
				items(it.sub.items, indent+"  ")
				fmt.Fprintf(&sb, "%s}\n", indent)
			}
		}
	}
	items(d.root.items, "  ")
	dyn := 0
	for _, e := range d.edges {
		to := e.to
		if to == "" {
			dyn++
			to = fmt.Sprintf("(computed %d)", dyn)
			fmt.Fprintf(&sb, "  %q [shape=hexagon];\n", to)
		}
		attrs := []string{}
		if e.label != "" {
			attrs = append(attrs, fmt.Sprintf("label=%q", e.label))
		}
		if e.dashed {
			attrs = append(attrs, "style=dashed")
		}
		a := ""
		if len(attrs) > 0 {
			a = " [" + strings.Join(attrs, ", ") + "]"
		}
		fmt.Fprintf(&sb, "  %q -> %q%s;\n", e.from, to, a)
	}
	sb.WriteString("}\n")
	_, err := io.WriteString(out, sb.String())
	return err
}
