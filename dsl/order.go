package dsl

import "sort"

// OrderKeyword is the annotation OrderSchema adds to an object schema:
// its property names in the order the workflow file declares them.
const OrderKeyword = "x-order"

// OrderSchema returns a copy of schema, the evaluated value of the
// with.<arg> of step s of w, in which every object schema that lists
// properties also carries OrderKeyword: its property names in the order
// the file writes them (names the file does not write, such as ones an
// expression produced, follow, sorted). A JSON object's keys have no
// order, so a form built from a schema needs this to keep the author's.
// It parses w.Source once per call; schema itself is not changed.
func (w *Workflow) OrderSchema(s *Step, arg string, schema any) any {
	var at *node
	if w != nil && s != nil && s.With != nil {
		if root := parseYAML(&diagSink{file: w.File}, w.Source, DefaultLimits.withDefaults()); root != nil {
			at = findMap(root, s.With.Pos).get(arg)
		}
	}
	return orderSchema(schema, at)
}

// findMap returns the map node that starts at pos, or nil.
func findMap(n *node, pos Pos) *node {
	if n == nil {
		return nil
	}
	if n.kind == kMap && n.pos == pos {
		return n
	}
	for _, c := range append(append([]*node(nil), n.vals...), n.items...) {
		if hit := findMap(c, pos); hit != nil {
			return hit
		}
	}
	return nil
}

func orderSchema(v any, n *node) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m)+1)
	for k, e := range m {
		out[k] = e
	}
	if items, ok := m["items"]; ok {
		out["items"] = orderSchema(items, n.get("items"))
	}
	props, ok := m["properties"].(map[string]any)
	if !ok {
		return out
	}
	pn := n.get("properties")
	names := make([]string, 0, len(props))
	seen := map[string]bool{}
	if pn != nil && pn.kind == kMap {
		for _, k := range pn.keys {
			name, isStr := k.scalar.(string)
			if _, declared := props[name]; isStr && declared && !seen[name] {
				names, seen[name] = append(names, name), true
			}
		}
	}
	var rest []string
	for name := range props {
		if !seen[name] {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	names = append(names, rest...)
	ordered := make(map[string]any, len(props))
	for _, name := range names {
		ordered[name] = orderSchema(props[name], pn.get(name))
	}
	out["properties"] = ordered
	out[OrderKeyword] = names
	return out
}
