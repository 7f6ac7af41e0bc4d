package actions_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
)

func TestNormalizeWith(t *testing.T) {
	var seen []any
	convert := func(v any) (any, error) {
		seen = append(seen, v)
		switch x := v.(type) {
		case time.Duration:
			return x.String(), nil
		case []time.Duration:
			out := make([]any, len(x))
			for i, d := range x {
				out[i] = d
			}
			return out, nil
		}
		return nil, errors.New("unconvertible")
	}
	got, err := actions.NormalizeWith(map[string]any{"a": 1, "d": time.Second, "l": []any{[]time.Duration{time.Minute}}}, convert)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": int64(1), "d": "1s", "l": []any{[]any{"1m0s"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	// Called only for what Normalize rejects, including what convert returned.
	if len(seen) != 3 {
		t.Errorf("convert called with %#v, want a duration, a []time.Duration and its element", seen)
	}

	if _, err := actions.NormalizeWith([]any{struct{}{}}, convert); err == nil || err.Error() != "unconvertible" {
		t.Errorf("convert's error: got %v", err)
	}
	loop := func(v any) (any, error) { return v, nil }
	if _, err := actions.NormalizeWith(struct{}{}, loop); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Errorf("a convert that returns its input: got %v, want the nesting error", err)
	}
	if _, err := actions.NormalizeWith(struct{}{}, nil); err == nil || !strings.Contains(err.Error(), "not JSON-compatible") {
		t.Errorf("nil convert: got %v, want Normalize's error", err)
	}
}
