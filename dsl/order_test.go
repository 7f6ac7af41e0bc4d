package dsl_test

import (
	"reflect"
	"testing"

	"github.com/tqw-dsl/tqw/dsl"
)

// TestOrderSchema: the properties of a wait's schema keep the order the
// file writes them in, nested objects and arrays of objects included.
func TestOrderSchema(t *testing.T) {
	src := []byte(`tqw: v1
name: order
steps:
  - id: ask
    action: wait_signal
    with:
      key: k
      timeout: 1h
      schema:
        type: object
        properties:
          zeta: {type: string}
          approved: {type: boolean}
          middle:
            type: object
            properties: {b: {type: string}, a: {type: string}}
          list:
            type: array
            items: {type: object, properties: {y: {type: string}, x: {type: string}}}
`)
	wf, diags, err := dsl.Parse("order.yaml", src)
	if err != nil {
		t.Fatalf("%v\n%s", err, diags)
	}
	// The evaluated schema as a run records it (a map: no order), with a
	// property the file does not write.
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"approved": map[string]any{"type": "boolean"},
		"middle":   map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{}, "b": map[string]any{}}},
		"list":     map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{}, "y": map[string]any{}}}},
		"zeta":     map[string]any{"type": "string"},
		"extra":    map[string]any{"type": "string"},
	}}
	got := wf.OrderSchema(wf.Steps[0], "schema", schema).(map[string]any)
	if o := got[dsl.OrderKeyword]; !reflect.DeepEqual(o, []string{"zeta", "approved", "middle", "list", "extra"}) {
		t.Errorf("root order %v", o)
	}
	props := got["properties"].(map[string]any)
	if o := props["middle"].(map[string]any)[dsl.OrderKeyword]; !reflect.DeepEqual(o, []string{"b", "a"}) {
		t.Errorf("nested order %v", o)
	}
	if o := props["list"].(map[string]any)["items"].(map[string]any)[dsl.OrderKeyword]; !reflect.DeepEqual(o, []string{"y", "x"}) {
		t.Errorf("items order %v", o)
	}
	if _, changed := schema[dsl.OrderKeyword]; changed {
		t.Error("OrderSchema changed its argument")
	}
	// No file position to go by: sorted.
	if o := (*dsl.Workflow)(nil).OrderSchema(nil, "schema", schema).(map[string]any)[dsl.OrderKeyword]; !reflect.DeepEqual(o, []string{"approved", "extra", "list", "middle", "zeta"}) {
		t.Errorf("fallback order %v", o)
	}
}
