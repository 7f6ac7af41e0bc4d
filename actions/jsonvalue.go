package actions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
)

// DecodeJSON parses one JSON document into a JSON-compatible output value:
// objects become map[string]any, arrays []any, integers that fit become
// int64 (so ids and counts keep every digit) and other numbers float64.
// Trailing data after the document is an error.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid JSON: data after the top-level value")
	}
	return Normalize(v)
}

// Normalize converts v to the JSON-compatible form outputs use: nil, bool,
// string, int64, float64, []any and map[string]any. It accepts the other Go
// integer and float types, json.Number, []string and map[string]string, and
// rejects anything else (and NaN or infinite floats) with an error.
func Normalize(v any) (any, error) {
	return normalize(v, 0, nil)
}

// NormalizeWith is Normalize for callers with more types: convert is called
// with each value, at any depth, that Normalize rejects, and the value it
// returns is normalized in its place (so it may hold such values again).
// convert's errors are returned as they are. It must return a value of
// another type or an error; nesting deeper than Normalize allows is an
// error, which also stops a convert that does not.
func NormalizeWith(v any, convert func(any) (any, error)) (any, error) {
	return normalize(v, 0, convert)
}

// maxDepth bounds nesting so a hostile document cannot exhaust the stack.
const maxDepth = 10000

func normalize(v any, depth int, convert func(any) (any, error)) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("value nested too deeply")
	}
	switch x := v.(type) {
	case nil, bool, string, int64:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("number %g is not valid JSON", x)
		}
		return x, nil
	case float32:
		return normalize(float64(x), depth, convert)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", x.String(), err)
		}
		return f, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			n, err := normalize(e, depth+1, convert)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			n, err := normalize(x[k], depth+1, convert)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = n
		}
		return out, nil
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = e
		}
		return out, nil
	}
	if i, err := Int64(v); err == nil {
		return i, nil
	}
	if convert != nil {
		c, err := convert(v)
		if err != nil {
			return nil, err
		}
		return normalize(c, depth+1, convert)
	}
	return nil, fmt.Errorf("a value of type %T is not JSON-compatible", v)
}
