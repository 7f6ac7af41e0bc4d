package dsl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Pos is a 1-based line and column in a workflow file.
type Pos struct {
	Line int `json:"line"`
	Col  int `json:"col"`
}

// String renders p as "line:col".
func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

type nodeKind uint8

const (
	kNull nodeKind = iota
	kBool
	kInt
	kFloat
	kString
	kMap
	kList
)

var kindNames = [...]string{"null", "boolean", "integer", "number", "string", "map", "list"}

func (k nodeKind) String() string { return kindNames[k] }

// node is a YAML value with its position, after alias expansion. Aliased
// subtrees are shared, never copied; size counts them once per use.
type node struct {
	kind   nodeKind
	pos    Pos
	scalar any // nil, bool, int64, uint64, float64 or string
	keys   []*node
	vals   []*node
	items  []*node
	size   int // nodes in the expanded subtree, this one included
}

// get returns the value under key in a map node, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.kind != kMap {
		return nil
	}
	for i, k := range n.keys {
		if k.scalar == key {
			return n.vals[i]
		}
	}
	return nil
}

// key returns the key node of name in a map node, or nil.
func (n *node) key(name string) *node {
	if n == nil || n.kind != kMap {
		return nil
	}
	for _, k := range n.keys {
		if k.scalar == name {
			return k
		}
	}
	return nil
}

// at returns n's position, or fallback when n is nil (a value the file
// does not have, such as the id of a step written without one).
func (n *node) at(fallback Pos) Pos {
	if n == nil {
		return fallback
	}
	return n.pos
}

// str returns the string value of a string node, or "".
func (n *node) str() string {
	if n == nil {
		return ""
	}
	s, _ := n.scalar.(string)
	return s
}

// toAny converts n to the JSON-like values encoding/json produces, except
// that integers stay int64/uint64 so they keep their exact value.
func (n *node) toAny() any {
	if n == nil {
		return nil
	}
	switch n.kind {
	case kMap:
		m := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			m[k.scalar.(string)] = n.vals[i].toAny()
		}
		return m
	case kList:
		l := make([]any, len(n.items))
		for i, it := range n.items {
			l[i] = it.toAny()
		}
		return l
	default:
		return n.scalar
	}
}

// treeBuilder turns a yaml.Node document into a node tree, enforcing the
// loader's bounds and rejecting duplicate keys, merge keys and odd tags.
type treeBuilder struct {
	slab        []node // nodes are carved from chunks: one allocation per 256
	sink        *diagSink
	aliasBudget int // nodes aliases may still add
	aliasBound  int // Limits.MaxAliasNodes, for the error
	maxDepth    int
	done        map[*yaml.Node]*node // anchored nodes already built
	fatal       bool
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML parses src into a node tree. It reports problems to sink and
// returns nil when the document cannot be used.
func parseYAML(sink *diagSink, src []byte, lim Limits) *node {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			sink.errorf(Pos{1, 1}, CodeYAMLEmpty, "start with `tqw: v1`, `name:` and `steps:`", "the file is empty")
			return nil
		}
		reportYAMLError(sink, err)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		sink.errorf(posOf(&extra), CodeYAMLMultiDoc, "put each workflow in its own file", "the file holds more than one YAML document")
		return nil
	} else if !errors.Is(err, io.EOF) {
		reportYAMLError(sink, err)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		sink.errorf(Pos{1, 1}, CodeYAMLEmpty, "start with `tqw: v1`, `name:` and `steps:`", "the file holds no YAML value")
		return nil
	}
	b := &treeBuilder{sink: sink, aliasBudget: lim.MaxAliasNodes, aliasBound: lim.MaxAliasNodes, maxDepth: lim.MaxDepth,
		done: map[*yaml.Node]*node{}}
	root := b.build(doc.Content[0], 1)
	if b.fatal {
		return nil
	}
	return root
}

// parserContextProblems are the yaml.v3 parser errors reported at the
// enclosing collection's start mark, which yaml.v3 prints 0-based.
var parserContextProblems = map[string]bool{
	"did not find expected ',' or ']'":    true,
	"did not find expected ',' or '}'":    true,
	"did not find expected '-' indicator": true,
	"did not find expected key":           true,
	"did not find expected node content":  true,
	"found undefined tag handle":          true,
}

func reportYAMLError(sink *diagSink, err error) {
	msg := err.Error()
	line := 1
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if parserContextProblems[msg] {
			line++
			msg += fmt.Sprintf(" in the block that starts at line %d", line)
		}
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	sink.errorf(Pos{line, 1}, CodeYAMLSyntax, "check indentation, quoting and that every `key:` is followed by a space", "YAML syntax: %s", msg)
}

func posOf(y *yaml.Node) Pos { return Pos{y.Line, y.Column} }

func (b *treeBuilder) build(y *yaml.Node, depth int) *node {
	if b.fatal {
		return nil
	}
	if depth > b.maxDepth {
		b.sink.errorf(posOf(y), CodeTooDeep, "flatten the structure", "values nest deeper than %d levels", b.maxDepth)
		b.fatal = true
		return nil
	}
	switch y.Kind {
	case yaml.AliasNode:
		return b.alias(y)
	case yaml.MappingNode:
		return b.mapping(y, depth)
	case yaml.SequenceNode:
		n := b.newNode()
		*n = node{kind: kList, pos: posOf(y), items: make([]*node, 0, len(y.Content)), size: 1}
		for _, c := range y.Content {
			v := b.build(c, depth+1)
			if b.fatal {
				return nil
			}
			n.items = append(n.items, v)
			n.size += v.size
		}
		return b.remember(y, n)
	case yaml.ScalarNode:
		return b.remember(y, b.scalar(y))
	default:
		b.sink.errorf(posOf(y), CodeYAMLSyntax, "", "unexpected YAML node")
		b.fatal = true
		return nil
	}
}

// newNode returns a zeroed node from the current chunk.
func (b *treeBuilder) newNode() *node {
	if len(b.slab) == 0 {
		b.slab = make([]node, 256)
	}
	n := &b.slab[0]
	b.slab = b.slab[1:]
	return n
}

func (b *treeBuilder) remember(y *yaml.Node, n *node) *node {
	if y.Anchor != "" && n != nil {
		b.done[y] = n
	}
	return n
}

func (b *treeBuilder) alias(y *yaml.Node) *node {
	target := y.Alias
	n, ok := b.done[target]
	if !ok || target == nil {
		b.sink.errorf(posOf(y), CodeAliasBound, "an alias cannot refer to the value that contains it", "alias *%s refers to an anchor that is not complete here", y.Value)
		b.fatal = true
		return nil
	}
	b.aliasBudget -= n.size
	if b.aliasBudget < 0 {
		b.sink.errorf(posOf(y), CodeAliasBound, "write the values out, or use fewer and smaller aliases",
			"aliases expand to more than %d values, the loader's bound", b.aliasBound)
		b.fatal = true
		return nil
	}
	return n
}

func (b *treeBuilder) mapping(y *yaml.Node, depth int) *node {
	n := b.newNode()
	*n = node{kind: kMap, pos: posOf(y), size: 1}
	count := len(y.Content) / 2
	n.keys = make([]*node, 0, count)
	n.vals = make([]*node, 0, count)
	var seen map[string]int
	if count > 8 {
		seen = make(map[string]int, count)
	}
	for i := 0; i+1 < len(y.Content); i += 2 {
		ky, vy := y.Content[i], y.Content[i+1]
		if ky.Kind != yaml.ScalarNode {
			b.sink.errorf(posOf(ky), CodeKeyType, "write keys as plain strings", "a map key must be a plain string, not a %s", yamlKindName(ky.Kind))
			b.fatal = true
			return nil
		}
		if ky.ShortTag() == "!!merge" {
			b.sink.errorf(posOf(ky), CodeMergeKey, "write the keys out; anchors and aliases of whole values still work", "merge keys (<<) are not supported")
			b.fatal = true
			return nil
		}
		key := ky.Value
		prev := -1
		if seen != nil {
			if j, ok := seen[key]; ok {
				prev = j
			} else {
				seen[key] = len(n.keys)
			}
		} else {
			for j, k := range n.keys {
				if k.scalar == key {
					prev = j
					break
				}
			}
		}
		if prev >= 0 {
			first := n.keys[prev].pos
			b.sink.errorf(posOf(ky), CodeDuplicateKey, fmt.Sprintf("first defined at line %d; remove one of them", first.Line), "duplicate key %q", key)
			continue
		}
		v := b.build(vy, depth+1)
		if b.fatal {
			return nil
		}
		kn := b.newNode()
		*kn = node{kind: kString, pos: posOf(ky), scalar: key, size: 1}
		n.keys = append(n.keys, kn)
		n.vals = append(n.vals, v)
		n.size += v.size
	}
	return b.remember(y, n)
}

func yamlKindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "value"
}

func (b *treeBuilder) scalar(y *yaml.Node) *node {
	n := b.newNode()
	*n = node{pos: posOf(y), size: 1}
	switch tag := y.ShortTag(); tag {
	case "!!null":
		n.kind = kNull
	case "!!bool":
		// yaml.v3 tags only true/false in any case as !!bool.
		n.kind, n.scalar = kBool, strings.EqualFold(y.Value, "true")
	case "!!int":
		if i, err := strconv.ParseInt(strings.ReplaceAll(y.Value, "_", ""), 0, 64); err == nil {
			n.kind, n.scalar = kInt, i
			return n
		}
		var v any // rarer forms (0o17, huge numbers): let yaml.v3 decide
		if err := y.Decode(&v); err != nil {
			b.badScalar(y, "integer")
			return n
		}
		switch x := v.(type) {
		case int:
			n.kind, n.scalar = kInt, int64(x)
		case int64:
			n.kind, n.scalar = kInt, x
		case uint64:
			n.kind, n.scalar = kInt, x
		case float64:
			n.kind, n.scalar = kFloat, x
		default:
			n.kind, n.scalar = kString, y.Value
		}
	case "!!float":
		if f, err := strconv.ParseFloat(y.Value, 64); err == nil {
			n.kind, n.scalar = kFloat, f
			return n
		}
		var v float64 // .inf, .nan and friends
		if err := y.Decode(&v); err != nil {
			b.badScalar(y, "number")
			return n
		}
		n.kind, n.scalar = kFloat, v
	case "!!str", "!!timestamp", "!!binary":
		n.kind, n.scalar = kString, y.Value
	default:
		b.sink.errorf(posOf(y), CodeYAMLSyntax, "remove the tag", "unsupported YAML tag %s", tag)
		n.kind, n.scalar = kString, y.Value
	}
	return n
}

func (b *treeBuilder) badScalar(y *yaml.Node, what string) {
	b.sink.errorf(posOf(y), CodeYAMLSyntax, "quote it to make it a string", "%q is not a valid %s", y.Value, what)
}
