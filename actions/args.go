package actions

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/dsl/duration"
)

// ArgError says which argument was wrong and why. DecodeArgs wraps it in an
// *Error of type "validation"; errors.As finds it.
type ArgError struct {
	// Field is the argument's path, e.g. "url", "headers.Accept" or "command[2]".
	Field string
	// Problem says what is wrong with it.
	Problem string
}

// Error returns `argument "<field>": <problem>`.
func (e *ArgError) Error() string {
	return fmt.Sprintf("argument %q: %s", e.Field, e.Problem)
}

// ArgDecoder is implemented by argument types with their own syntax (a
// command that is a string or a list, a status that is a number or a list).
// DecodeArg receives the raw value, never nil; a returned *ArgError with an
// empty Field (or a Field relative to the argument, like "[1]") is completed
// with the argument's path; any other error becomes the problem text.
type ArgDecoder interface {
	DecodeArg(value any) error
}

// ValidationError returns a "validation" Error for the argument at field.
func ValidationError(field, format string, args ...any) *Error {
	ae := &ArgError{Field: field, Problem: fmt.Sprintf(format, args...)}
	return &Error{Type: TypeValidation, Message: ae.Error(), Err: ae}
}

// DecodeArgs decodes a step's `with:` map into dst, a pointer to a struct
// whose fields are tagged `arg:"name"` or `arg:"name,required"`. It is
// strict: an unknown argument, a missing required one, or a value of the
// wrong type is a "validation" *Error naming the argument. A nil value
// counts as absent.
//
// Supported field types: string, bool, signed and unsigned integers (a
// number with no fraction), float32/float64, time.Duration (a duration
// string such as "30s" or "1d", see package dsl/duration), map[string]string,
// []string, any (the value as given), pointers to these (nil when absent),
// and any type whose pointer implements ArgDecoder.
func DecodeArgs(args map[string]any, dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("decode args: destination must be a non-nil pointer to a struct, got %T", dst)
	}
	sv := rv.Elem()
	fields, err := structFields(sv.Type())
	if err != nil {
		return err
	}
	// Report the first unknown name in sorted order, so the error is deterministic.
	var unknown []string
	for name := range args {
		if _, ok := fields.byName[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return ValidationError(unknown[0], "unknown argument; known arguments: %s", strings.Join(fields.names, ", "))
	}
	// Decode in name order so the first error reported is deterministic.
	for _, name := range fields.names {
		f := fields.byName[name]
		v, present := args[name]
		if !present || v == nil {
			if f.required {
				return ValidationError(name, "required")
			}
			continue
		}
		if err := decodeValue(name, v, sv.Field(f.index)); err != nil {
			return err
		}
	}
	return nil
}

type argField struct {
	index    int
	required bool
}

type argFields struct {
	byName map[string]argField
	names  []string // sorted
}

var fieldCache sync.Map // reflect.Type -> *argFields

func structFields(t reflect.Type) (*argFields, error) {
	if c, ok := fieldCache.Load(t); ok {
		return c.(*argFields), nil
	}
	fs := &argFields{byName: map[string]argField{}}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, ok := sf.Tag.Lookup("arg")
		if !ok || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || !sf.IsExported() {
			return nil, fmt.Errorf("decode args: field %s.%s: bad arg tag %q", t.Name(), sf.Name, tag)
		}
		if _, dup := fs.byName[name]; dup {
			return nil, fmt.Errorf("decode args: %s: argument %q declared twice", t.Name(), name)
		}
		fs.byName[name] = argField{index: i, required: opts == "required"}
		fs.names = append(fs.names, name)
	}
	slices.Sort(fs.names)
	fieldCache.Store(t, fs)
	return fs, nil
}

var (
	durationType   = reflect.TypeFor[time.Duration]()
	argDecoderType = reflect.TypeFor[ArgDecoder]()
)

func decodeValue(path string, v any, dst reflect.Value) error {
	if dst.CanAddr() && dst.Addr().Type().Implements(argDecoderType) {
		err := dst.Addr().Interface().(ArgDecoder).DecodeArg(v)
		if err == nil {
			return nil
		}
		if e, ok := AsError(err); ok {
			return e
		}
		if ae, ok := err.(*ArgError); ok {
			return ValidationError(path+ae.Field, "%s", ae.Problem)
		}
		return ValidationError(path, "%s", err.Error())
	}
	if dst.Type() == durationType {
		s, ok := v.(string)
		if !ok {
			return ValidationError(path, "want a duration string such as \"30s\" or \"5m\", got %s", describe(v))
		}
		d, err := duration.Parse(s)
		if err != nil {
			return ValidationError(path, "%v", err)
		}
		dst.SetInt(int64(d))
		return nil
	}
	switch dst.Kind() {
	case reflect.Pointer:
		p := reflect.New(dst.Type().Elem())
		if err := decodeValue(path, v, p.Elem()); err != nil {
			return err
		}
		dst.Set(p)
		return nil
	case reflect.Interface:
		if dst.NumMethod() != 0 {
			break
		}
		n, err := Normalize(v)
		if err != nil {
			return ValidationError(path, "%v", err)
		}
		if n != nil {
			dst.Set(reflect.ValueOf(n))
		}
		return nil
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return ValidationError(path, "want a string, got %s", describe(v))
		}
		dst.SetString(s)
		return nil
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return ValidationError(path, "want true or false, got %s", describe(v))
		}
		dst.SetBool(b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := Int64(v)
		if err != nil {
			return ValidationError(path, "%v", err)
		}
		if dst.OverflowInt(i) {
			return ValidationError(path, "%d is out of range", i)
		}
		dst.SetInt(i)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		i, err := Int64(v)
		if err != nil {
			return ValidationError(path, "%v", err)
		}
		if i < 0 || dst.OverflowUint(uint64(i)) {
			return ValidationError(path, "%d is out of range", i)
		}
		dst.SetUint(uint64(i))
		return nil
	case reflect.Float32, reflect.Float64:
		f, ok := toFloat(v)
		if !ok {
			return ValidationError(path, "want a number, got %s", describe(v))
		}
		if dst.OverflowFloat(f) {
			return ValidationError(path, "%g is out of range", f)
		}
		dst.SetFloat(f)
		return nil
	case reflect.Map:
		if dst.Type().Key().Kind() != reflect.String {
			break
		}
		switch v.(type) {
		case map[string]any, map[string]string:
		default:
			return ValidationError(path, "want an object, got %s", describe(v))
		}
		m := reflect.MakeMap(dst.Type())
		err := eachMapEntry(v, func(k string, ev any) error {
			ep := reflect.New(dst.Type().Elem()).Elem()
			if ev == nil {
				return ValidationError(path+"."+k, "must not be null")
			}
			if err := decodeValue(path+"."+k, ev, ep); err != nil {
				return err
			}
			m.SetMapIndex(reflect.ValueOf(k).Convert(dst.Type().Key()), ep)
			return nil
		})
		if err != nil {
			return err
		}
		dst.Set(m)
		return nil
	case reflect.Slice:
		items, ok := asList(v)
		if !ok {
			return ValidationError(path, "want a list, got %s", describe(v))
		}
		s := reflect.MakeSlice(dst.Type(), len(items), len(items))
		for i, it := range items {
			p := fmt.Sprintf("%s[%d]", path, i)
			if it == nil {
				return ValidationError(p, "must not be null")
			}
			if err := decodeValue(p, it, s.Index(i)); err != nil {
				return err
			}
		}
		dst.Set(s)
		return nil
	}
	return fmt.Errorf("decode args: argument %q: unsupported field type %s", path, dst.Type())
}

// eachMapEntry calls fn for each entry of a map value in key order.
func eachMapEntry(v any, fn func(k string, v any) error) error {
	switch m := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := fn(k, m[k]); err != nil {
				return err
			}
		}
		return nil
	case map[string]string:
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := fn(k, m[k]); err != nil {
				return err
			}
		}
		return nil
	}
	return nil
}

func asList(v any) ([]any, bool) {
	switch l := v.(type) {
	case []any:
		return l, true
	case []string:
		out := make([]any, len(l))
		for i, s := range l {
			out[i] = s
		}
		return out, true
	}
	return nil, false
}

// Int64 converts a JSON-ish number (any Go integer or float type, or
// json.Number) with no fractional part to int64.
func Int64(v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case int8:
		return int64(n), nil
	case int16:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int64:
		return n, nil
	case uint:
		if uint64(n) > math.MaxInt64 {
			return 0, fmt.Errorf("%d is out of range", n)
		}
		return int64(n), nil
	case uint8:
		return int64(n), nil
	case uint16:
		return int64(n), nil
	case uint32:
		return int64(n), nil
	case uint64:
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("%d is out of range", n)
		}
		return int64(n), nil
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
		f, err := n.Float64()
		if err != nil {
			return 0, fmt.Errorf("want an integer, got %q", n.String())
		}
		return floatToInt(f)
	case float32:
		return floatToInt(float64(n))
	case float64:
		return floatToInt(n)
	}
	return 0, fmt.Errorf("want an integer, got %s", describe(v))
}

func floatToInt(f float64) (int64, error) {
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("want an integer, got %g", f)
	}
	// float64(math.MaxInt64) rounds up to 2^63, which does not fit.
	if f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("%g is out of range", f)
	}
	return int64(f), nil
}

// toFloat converts any Go number type or json.Number to a finite float64.
func toFloat(v any) (float64, bool) {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case float32:
		f = float64(n)
	case json.Number:
		x, err := n.Float64()
		if err != nil {
			return 0, false
		}
		f = x
	case int:
		f = float64(n)
	case int8:
		f = float64(n)
	case int16:
		f = float64(n)
	case int32:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint:
		f = float64(n)
	case uint8:
		f = float64(n)
	case uint16:
		f = float64(n)
	case uint32:
		f = float64(n)
	case uint64:
		f = float64(n)
	default:
		return 0, false
	}
	return f, !math.IsNaN(f) && !math.IsInf(f, 0)
}

// describe names v's JSON type (and value, for short scalars) for messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 40 {
			return "a string"
		}
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case map[string]any, map[string]string:
		return "an object"
	case []any, []string:
		return "a list"
	}
	if f, ok := toFloat(v); ok {
		return fmt.Sprintf("number %g", f)
	}
	return fmt.Sprintf("a value of type %T", v)
}
