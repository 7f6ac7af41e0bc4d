package dsl

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// The spec types mirror the schema's objects one to one: decodeStrict
// rejects any key without a field, and TestSchemaAgreesWithTypes checks
// that every schema property has one. Values whose position or template
// form matters stay *node.

type fileSpec struct {
	TQW         *node         `yaml:"tqw"`
	Name        *node         `yaml:"name"`
	Description *node         `yaml:"description"`
	Input       *node         `yaml:"input"`
	Secrets     *node         `yaml:"secrets"`
	Defaults    *defaultsSpec `yaml:"defaults"`
	Vars        *node         `yaml:"vars"`
	Steps       []*stepSpec   `yaml:"steps"`
	OnError     []*stepSpec   `yaml:"on_error"`
	Finally     []*stepSpec   `yaml:"finally"`
	Timeout     *node         `yaml:"timeout"`
}

type defaultsSpec struct {
	Timeout *node      `yaml:"timeout"`
	Retry   *retrySpec `yaml:"retry"`
}

type stepSpec struct {
	At          Pos           `yaml:"-"`
	ID          *node         `yaml:"id"`
	Description *node         `yaml:"description"`
	Action      *node         `yaml:"action"`
	With        *node         `yaml:"with"`
	Switch      []*caseSpec   `yaml:"switch"`
	Next        *node         `yaml:"next"`
	Set         *node         `yaml:"set"`
	Foreach     *foreachSpec  `yaml:"foreach"`
	Call        *callSpec     `yaml:"call"`
	Succeed     *node         `yaml:"succeed"`
	Fail        *node         `yaml:"fail"`
	Retry       *retrySpec    `yaml:"retry"`
	Catch       []*catchSpec  `yaml:"catch"`
	Timeout     *node         `yaml:"timeout"`
	OnTimeout   *node         `yaml:"on_timeout"`
	Parallel    *parallelSpec `yaml:"parallel"`
	Map         *mapSpec      `yaml:"map"`
}

type parallelSpec struct {
	At       Pos   `yaml:"-"`
	Branches *node `yaml:"branches"` // name -> list of steps
	Fail     *node `yaml:"fail"`
}

type mapSpec struct {
	At                Pos         `yaml:"-"`
	Items             *node       `yaml:"items"`
	Concurrency       *node       `yaml:"concurrency"`
	ToleratedFailures *node       `yaml:"tolerated_failures"`
	Steps             []*stepSpec `yaml:"steps"`
}

type caseSpec struct {
	At   Pos   `yaml:"-"`
	When *node `yaml:"when"`
	Next *node `yaml:"next"`
}

type retrySpec struct {
	At          Pos   `yaml:"-"`
	MaxAttempts *node `yaml:"max_attempts"`
	Initial     *node `yaml:"initial"`
	Multiplier  *node `yaml:"multiplier"`
	MaxInterval *node `yaml:"max_interval"`
	Jitter      *node `yaml:"jitter"`
	On          *node `yaml:"on"`
	When        *node `yaml:"when"`
}

type catchSpec struct {
	At   Pos   `yaml:"-"`
	On   *node `yaml:"on"`
	When *node `yaml:"when"`
	Set  *node `yaml:"set"`
	Next *node `yaml:"next"`
}

type foreachSpec struct {
	At          Pos   `yaml:"-"`
	Items       *node `yaml:"items"`
	Concurrency *node `yaml:"concurrency"`
	Action      *node `yaml:"action"`
	With        *node `yaml:"with"`
}

type callSpec struct {
	At       Pos   `yaml:"-"`
	Workflow *node `yaml:"workflow"`
	Input    *node `yaml:"input"`
}

var (
	nodePtrType = reflect.TypeOf((*node)(nil))
	posType     = reflect.TypeOf(Pos{})
)

var fieldCache sync.Map // reflect.Type -> map[string]int

// fieldsOf maps yaml tags to field indexes for a spec struct type.
func fieldsOf(t reflect.Type) map[string]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]int)
	}
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		if tag != "" && tag != "-" {
			out[strings.Split(tag, ",")[0]] = i
		}
	}
	fieldCache.Store(t, out)
	return out
}

// decodeStrict fills the spec struct v points to from n, rejecting keys the
// struct has no field for and shapes it cannot hold.
func decodeStrict(n *node, v any) error {
	return decodeValue(n, reflect.ValueOf(v).Elem())
}

func decodeValue(n *node, v reflect.Value) error {
	if v.Type() == nodePtrType {
		v.Set(reflect.ValueOf(n))
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n == nil || n.kind == kNull {
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if err := decodeValue(n, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Slice:
		if n.kind == kNull {
			return nil
		}
		if n.kind != kList {
			return fmt.Errorf("%s: want a list, got a %s", n.pos, n.kind)
		}
		s := reflect.MakeSlice(v.Type(), len(n.items), len(n.items))
		et := v.Type().Elem()
		for i, it := range n.items {
			if it.kind == kNull && et.Kind() == reflect.Pointer && et.Elem().Kind() == reflect.Struct {
				// A null entry (a schema error) decodes as an empty one,
				// so that the checks never meet a nil spec in a list.
				s.Index(i).Set(reflect.New(et.Elem()))
				setAt(s.Index(i).Elem(), it.pos)
				continue
			}
			if err := decodeValue(it, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Struct:
		if n.kind != kMap {
			return fmt.Errorf("%s: want a map, got a %s", n.pos, n.kind)
		}
		fields := fieldsOf(v.Type())
		setAt(v, n.pos)
		for i, k := range n.keys {
			key := k.scalar.(string)
			idx, ok := fields[key]
			if !ok {
				return fmt.Errorf("%s: unknown field %q", k.pos, key)
			}
			if err := decodeValue(n.vals[i], v.Field(idx)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: cannot decode into %s", n.pos, v.Type())
}

// setAt fills a spec struct's At field, if it has one.
func setAt(v reflect.Value, pos Pos) {
	if f, ok := v.Type().FieldByName("At"); ok && f.Type == posType {
		v.FieldByIndex(f.Index).Set(reflect.ValueOf(pos))
	}
}
