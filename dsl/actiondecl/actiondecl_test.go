package actiondecl

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/schemas"
)

const charge = `{"type":"object","required":["amount"],"additionalProperties":false,"properties":{"amount":{"type":"integer"}}}`

func sample() *File {
	return New(map[string]json.RawMessage{"charge": json.RawMessage(charge), "notify": nil},
		map[string]string{"charge": "Charges a card."})
}

func TestEncodeParseRoundTrip(t *testing.T) {
	b, err := sample().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) || strings.Index(string(b), `"charge"`) > strings.Index(string(b), `"notify"`) {
		t.Fatalf("Encode: not JSON sorted by name:\n%s", b)
	}
	f, err := Parse("x.json", b)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Names(); len(got) != 2 || f.Actions["charge"].Summary != "Charges a card." {
		t.Fatalf("round trip: %+v", f)
	}
	again, _ := f.Encode()
	if string(again) != string(b) {
		t.Errorf("Encode is not stable:\n%s\n%s", b, again)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, src := range map[string]string{
		"version":     `{"tqw": "actions/v0", "actions": {}}`,
		"unknown key": `{"tqw": "actions/v1", "actions": {}, "action": {}}`,
		"built in":    `{"tqw": "actions/v1", "actions": {"http": {}}}`,
		"bad name":    `{"tqw": "actions/v1", "actions": {"a b": {}}}`,
		"bad schema":  `{"tqw": "actions/v1", "actions": {"x": {"with": {"type": "nope"}}}}`,
		"two values":  `{"tqw": "actions/v1", "actions": {}} {}`,
	} {
		if _, err := Parse("decl.json", []byte(src)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "decl.json") {
			t.Errorf("%s: %v; want ErrInvalid naming the file", name, err)
		}
	}
}

func TestFindTheNearestFile(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := Find(deep); err != nil || p != "" {
		// A declarations file above the temp folder would be found too;
		// none is expected on a test machine.
		t.Skipf("a %s above %s: %q %v", FileName, root, p, err)
	}
	top := filepath.Join(root, FileName)
	if err := os.WriteFile(top, []byte(`{"tqw":"actions/v1","actions":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, _ := Find(deep); p != top {
		t.Errorf("Find = %q; want %q", p, top)
	}
	near := filepath.Join(root, "a", FileName)
	if err := os.WriteFile(near, []byte(`{"tqw":"actions/v1","actions":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, _ := Find(deep); p != near {
		t.Errorf("Find = %q; want the nearer %q", p, near)
	}
}

// A workflow using a declared action loads with the declarations and
// checks its with; without them it is an unknown action.
func TestLoadOptionsCheckDeclaredActions(t *testing.T) {
	src := func(with string) []byte {
		return []byte("tqw: v1\nname: pay\nsteps:\n  - id: pay\n    action: charge\n    with: " + with + "\n  - id: ping\n    action: notify\n")
	}
	if _, _, err := dsl.Parse("pay.yaml", src("{amount: 5}")); err == nil {
		t.Fatal("without declarations the custom action loaded")
	}
	opts := sample().LoadOptions(dsl.Options{})
	if _, diags, err := dsl.ParseWith("pay.yaml", src("{amount: 5}"), opts); err != nil {
		t.Fatalf("with declarations: %v\n%s", err, diags)
	}
	_, diags, err := dsl.ParseWith("pay.yaml", src("{amount: five}"), opts)
	if err == nil || !strings.Contains(diags.String(), "with.invalid") {
		t.Fatalf("a with breaking the declared schema: %v\n%s", err, diags)
	}
}

// The extended schema accepts the declared actions and checks their with.
func TestSchemaAddsTheDeclaredActions(t *testing.T) {
	b, err := sample().Schema(schemas.WorkflowJSON)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tqw:///ext.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("tqw:///ext.json")
	if err != nil {
		t.Fatalf("the extended schema does not compile: %v", err)
	}
	wf := func(with any) any {
		return map[string]any{"tqw": "v1", "name": "pay", "steps": []any{
			map[string]any{"id": "pay", "action": "charge", "with": with},
			map[string]any{"id": "ping", "action": "notify"},
		}}
	}
	if err := sch.Validate(wf(map[string]any{"amount": 5})); err != nil {
		t.Errorf("a valid use of declared actions: %v", err)
	}
	if err := sch.Validate(wf(map[string]any{"amount": "five"})); err == nil {
		t.Error("a with breaking the declared schema validated")
	}
	base, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(schemas.WorkflowJSON)))
	c2 := jsonschema.NewCompiler()
	_ = c2.AddResource("tqw:///base.json", base)
	bs, err := c2.Compile("tqw:///base.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := bs.Validate(wf(map[string]any{"amount": 5})); err == nil {
		t.Error("the base schema accepted an undeclared action: the test proves nothing")
	}
}
