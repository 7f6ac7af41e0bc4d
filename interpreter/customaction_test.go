package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
)

// greet is a custom action that declares its with's schema.
type greet struct{}

func (greet) Name() string { return "greet" }
func (greet) WithSchema() json.RawMessage {
	return json.RawMessage(`{"type": "object", "required": ["name"], "additionalProperties": false, "properties": {"name": {"type": "string"}}}`)
}
func (greet) Execute(_ context.Context, c *actions.Call) (any, error) {
	return "hi " + c.Args["name"].(string), nil
}

// An action registered once, in the registry, is known to the loader with
// its schema: a wrong with fails at load, a right one runs.
func TestCustomActionRegisteredOnce(t *testing.T) {
	reg, err := actions.NewRegistry(greet{})
	if err != nil {
		t.Fatal(err)
	}
	opts := LoadOptions(reg, dsl.Options{})
	_, _, err = dsl.ParseWith("bad.yaml", []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    action: greet\n    with: {nmae: x}\n"), opts)
	var inv *dsl.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "action greet") {
		t.Fatalf("a misspelled with field of a registered action: %v; want it refused at load", err)
	}
	w, _, err := dsl.ParseWith("good.yaml", []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    action: greet\n    with: {name: ada}\n  - id: done\n    succeed: \"${ output }\"\n"), opts)
	if err != nil || w == nil {
		t.Fatalf("a right with: %v", err)
	}
}
