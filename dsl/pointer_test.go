package dsl_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/dsl"
)

func TestInstancePointer(t *testing.T) {
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tqw:///p.json", map[string]any{
		"type": "object", "required": []any{"approved"},
		"properties": map[string]any{
			"approved": map[string]any{"type": "boolean"},
			"a/b~c":    map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
			"list":     map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("tqw:///p.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value any
		want  string
	}{
		{map[string]any{"approved": "yes"}, "/approved"},
		{map[string]any{}, "/approved"},
		{map[string]any{"approved": true, "a/b~c": map[string]any{"n": "x"}}, "/a~1b~0c/n"},
		{map[string]any{"approved": true, "list": []any{"ok", 3.0}}, "/list/1"},
		{"not an object", ""},
	} {
		verr := sch.Validate(tc.value)
		if verr == nil {
			t.Fatalf("%v validated", tc.value)
		}
		got, ok := dsl.InstancePointer(fmt.Errorf("wrapped: %w", verr))
		if !ok || got != tc.want {
			t.Errorf("%v: pointer %q %v, want %q", tc.value, got, ok, tc.want)
		}
	}
	if _, ok := dsl.InstancePointer(errors.New("plain")); ok {
		t.Error("a plain error has a pointer")
	}
}
