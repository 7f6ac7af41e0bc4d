package dsl

import (
	"fmt"
	"reflect"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// String-typed with fields. A template that is exactly one ${ expr }
// keeps the expression's type, which is what a number, list or object
// field wants; but a field the action takes as a string (a header, a
// URL, a prompt) receives a number or a boolean rendered as text, exactly
// as the same value inside a longer template would be. A map or a list
// there is an error: at load when the expression's type is known (a map
// or list literal, a function returning one), else when the step runs,
// naming the field.

// tText is a whole-string template in a field that takes a string.
type tText struct {
	e     *Expr
	field string // where in with, for the error
}

func (t tText) eval(m exprEnv) (any, error) {
	v, err := t.e.eval(m)
	if err != nil {
		return nil, err
	}
	switch v.(type) {
	case map[string]any, []any:
		return nil, &evalError{Pos: t.e.Pos, Source: t.e.Source,
			Err: fmt.Errorf("with.%s takes a string, and the value is %s: write toJSON(...) or join(...) to make one", t.field, kindOfValue(v))}
	}
	s, err := Stringify(v)
	if err != nil {
		return nil, &evalError{Pos: t.e.Pos, Source: t.e.Source, Err: err}
	}
	return s, nil
}

func (t tText) exprs(out *[]*Expr) { *out = append(*out, t.e) }

func kindOfValue(v any) string {
	if _, ok := v.([]any); ok {
		return "a list"
	}
	return "an object"
}

// textFields rewrites, in the compiled with n of a built-in action whose
// with schema is sch, every whole-string template at a field that takes
// only strings into a tText; at path (dotted, for messages).
func (b *builder) textFields(n tnode, sch *jsonschema.Schema, path string) tnode {
	sch = deref(sch)
	if sch == nil {
		return n
	}
	switch t := n.(type) {
	case tWhole:
		if !stringOnly(sch) {
			return n
		}
		if k, ok := staticKind(t.e); ok {
			b.sink.errorf(t.e.Pos, CodeExprType, "write toJSON(...) or join(...) to make a string",
				"with.%s takes a string, and ${ %s } is %s", path, t.e.Source, k)
		}
		return tText{e: t.e, field: path}
	case tMap:
		out := tMap{keys: t.keys, vals: make([]tnode, len(t.vals))}
		for i, k := range t.keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			out.vals[i] = b.textFields(t.vals[i], propertySchema(sch, k), p)
		}
		return out
	case tList:
		item := itemSchema(sch)
		out := tList{items: make([]tnode, len(t.items))}
		for i, it := range t.items {
			out.items[i] = b.textFields(it, item, fmt.Sprintf("%s[%d]", path, i))
		}
		return out
	}
	return n
}

// staticKind reports "a list" or "an object" when the expression's type,
// as expr's checker knows it, is one.
func staticKind(e *Expr) (string, bool) {
	if e == nil || e.prog == nil {
		return "", false
	}
	t := e.prog.Node().Type()
	if t == nil || timeLike(t) {
		return "", false // a time or duration renders as text (Stringify)
	}
	switch t.Kind() {
	case reflect.Map, reflect.Struct:
		return "an object", true
	case reflect.Slice, reflect.Array:
		return "a list", true
	}
	return "", false
}

func deref(s *jsonschema.Schema) *jsonschema.Schema {
	for i := 0; s != nil && s.Ref != nil && i < 16; i++ {
		s = s.Ref
	}
	return s
}

// stringOnly reports whether s accepts strings and nothing else.
func stringOnly(s *jsonschema.Schema) bool {
	s = deref(s)
	if s == nil {
		return false
	}
	if s.Types != nil && !s.Types.IsEmpty() {
		ts := s.Types.ToStrings()
		return len(ts) == 1 && ts[0] == "string"
	}
	for _, group := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf} {
		if len(group) == 0 {
			continue
		}
		for _, g := range group {
			if !stringOnly(g) {
				return false
			}
		}
		return true
	}
	return false
}

// propertySchema returns the schema of property k of object schema s.
func propertySchema(s *jsonschema.Schema, k string) *jsonschema.Schema {
	s = deref(s)
	if s == nil {
		return nil
	}
	if p, ok := s.Properties[k]; ok {
		return p
	}
	for _, a := range s.AllOf {
		if p := propertySchema(a, k); p != nil {
			return p
		}
	}
	if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		return ap
	}
	return nil
}

// itemSchema returns the schema of the items of list schema s.
func itemSchema(s *jsonschema.Schema) *jsonschema.Schema {
	s = deref(s)
	if s == nil {
		return nil
	}
	if s.Items2020 != nil {
		return s.Items2020
	}
	if it, ok := s.Items.(*jsonschema.Schema); ok {
		return it
	}
	return nil
}
