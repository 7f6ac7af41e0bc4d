package dsl

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/dsl/dslgen"
	"github.com/tqw-dsl/tqw/dsl/duration"
)

// schemaTypes pairs each object of the schema with the spec type that
// decodes it.
var schemaTypes = []struct {
	ptr string // JSON pointer into the schema document
	typ reflect.Type
}{
	{"", reflect.TypeOf(fileSpec{})},
	{"/properties/defaults", reflect.TypeOf(defaultsSpec{})},
	{"/$defs/step", reflect.TypeOf(stepSpec{})},
	{"/$defs/case", reflect.TypeOf(caseSpec{})},
	{"/$defs/retry", reflect.TypeOf(retrySpec{})},
	{"/$defs/catchRule", reflect.TypeOf(catchSpec{})},
	{"/$defs/foreach", reflect.TypeOf(foreachSpec{})},
	{"/$defs/call", reflect.TypeOf(callSpec{})},
	{"/$defs/parallel", reflect.TypeOf(parallelSpec{})},
	{"/$defs/map", reflect.TypeOf(mapSpec{})},
}

func schemaProps(t *testing.T, ptr string) []string {
	t.Helper()
	_, doc, err := workflowSchema()
	if err != nil {
		t.Fatal(err)
	}
	s := schemaAt(doc, "#"+ptr)
	if s == nil {
		t.Fatalf("schema has nothing at %s", ptr)
	}
	if s["additionalProperties"] != false {
		t.Errorf("schema object %s allows additional properties", ptr)
	}
	var out []string
	for p := range s["properties"].(map[string]any) {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// TestSchemaAgreesWithTypes proves the schema and the Go spec types accept
// the same keys: the same property sets, every property decoded from a
// file that uses them all, and an unknown key rejected by both.
func TestSchemaAgreesWithTypes(t *testing.T) {
	for _, st := range schemaTypes {
		var tags []string
		for tag := range fieldsOf(st.typ) {
			tags = append(tags, tag)
		}
		sort.Strings(tags)
		if props := schemaProps(t, st.ptr); !slices.Equal(props, tags) {
			t.Errorf("schema %q has properties %v; %s decodes %v", st.ptr, props, st.typ, tags)
		}
	}

	src, err := os.ReadFile("testdata/kitchen_sink.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, diags, err := Parse("kitchen_sink.yaml", src); err != nil || len(diags) > 0 {
		t.Fatalf("kitchen sink: %v\n%s", err, diags)
	}
	root := parseYAML(&diagSink{}, src, DefaultLimits)
	var spec fileSpec
	if err := decodeStrict(root, &spec); err != nil {
		t.Fatal(err)
	}
	// Every field of every spec type is set somewhere in the file.
	set := map[reflect.Type]map[string]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() && v.Type() != nodePtrType {
				walk(v.Elem())
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Struct:
			if set[v.Type()] == nil {
				set[v.Type()] = map[string]bool{}
			}
			for tag, i := range fieldsOf(v.Type()) {
				f := v.Field(i)
				if !f.IsZero() {
					set[v.Type()][tag] = true
				}
				walk(f)
			}
		}
	}
	walk(reflect.ValueOf(spec))
	for _, st := range schemaTypes {
		for tag := range fieldsOf(st.typ) {
			if !set[st.typ][tag] {
				t.Errorf("kitchen sink never sets %s.%s", st.typ, tag)
			}
		}
	}

	// An unknown key in each object: the schema reports it at its
	// position, and the strict decoder alone rejects it too.
	inject := map[string]string{
		"top":      "tqw: v1\n",
		"defaults": "  timeout: 30s\n",
		"step":     "    description: an action step with every step key\n",
		"case":     "      - when: output.status == 200\n",
		"retry":    "  retry: {max_attempts: 2,",
		"catch":    "        when: error.status == 404\n",
		"foreach":  "      concurrency: 2\n",
		"call":     "call: {workflow: ./child.yaml,",
		"parallel": "      fail: all\n",
		"map":      "      concurrency: 4\n",
	}
	for name, anchor := range inject {
		t.Run(name, func(t *testing.T) {
			i := strings.Index(string(src), anchor)
			if i < 0 {
				t.Fatalf("anchor %q not found", anchor)
			}
			var bad string
			if strings.HasSuffix(anchor, "\n") {
				indent := anchor[:len(anchor)-len(strings.TrimLeft(anchor, " -"))]
				indent = strings.ReplaceAll(indent, "-", " ")
				bad = string(src[:i+len(anchor)]) + indent + "bogus_key: 1\n" + string(src[i+len(anchor):])
			} else {
				bad = string(src[:i+len(anchor)]) + " bogus_key: 1," + string(src[i+len(anchor):])
			}
			_, diags, err := Parse("bad.yaml", []byte(bad))
			if !errors.Is(err, ErrInvalid) || len(diags) != 1 || diags[0].Code != CodeUnknownField || !strings.Contains(diags[0].Message, "bogus_key") {
				t.Errorf("schema: want one %s naming bogus_key, got %v\n%s", CodeUnknownField, err, diags)
			}
			root := parseYAML(&diagSink{}, []byte(bad), DefaultLimits)
			var spec fileSpec
			if err := decodeStrict(root, &spec); err == nil || !strings.Contains(err.Error(), `unknown field "bogus_key"`) {
				t.Errorf("decodeStrict: want unknown field error, got %v", err)
			}
		})
	}
}

// TestSchemaHasActionDiscriminator checks that every built-in action has a
// with-schema selected by an if/then on action, for steps and foreach.
func TestSchemaHasActionDiscriminator(t *testing.T) {
	_, doc, err := workflowSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"step", "foreach"} {
		allOf := schemaAt(doc, "#/$defs/"+owner)["allOf"].([]any)
		var seen []string
		for _, c := range allOf {
			cond := c.(map[string]any)
			action := cond["if"].(map[string]any)["properties"].(map[string]any)["action"].(map[string]any)["const"].(string)
			ref := cond["then"].(map[string]any)["properties"].(map[string]any)["with"].(map[string]any)["$ref"].(string)
			if ref != "#/$defs/with."+action {
				t.Errorf("%s: action %s selects %s", owner, action, ref)
			}
			if schemaAt(doc, ref) == nil {
				t.Errorf("%s: %s does not exist", owner, ref)
			}
			seen = append(seen, action)
		}
		sort.Strings(seen)
		want := slices.Clone(BuiltinActions)
		sort.Strings(want)
		if !slices.Equal(seen, want) {
			t.Errorf("%s discriminates %v; want %v", owner, seen, want)
		}
	}
}

// TestSchemaDocumentsEveryProperty checks that every property carries a
// title, a description (plain and markdown) and examples (none on step
// references), so editors can show hovers and
// completions; properties that are a bare $ref inherit them.
func TestSchemaDocumentsEveryProperty(t *testing.T) {
	_, doc, err := workflowSchema()
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		if props, ok := s["properties"].(map[string]any); ok {
			for name, p := range props {
				ps := p.(map[string]any)
				count++
				target := ps
				if ref, ok := ps["$ref"].(string); ok && len(ps) == 1 {
					target = schemaAt(doc, ref)
				}
				for _, k := range []string{"title", "description", "markdownDescription", "examples"} {
					if k == "examples" && stepReference(name, ps) {
						// A step id that looks real would be offered
						// as a completion for every file.
						if target[k] != nil || ps[k] != nil {
							t.Errorf("%s.%s is a step reference with examples", path, name)
						}
						continue
					}
					if target[k] == nil {
						t.Errorf("%s.%s has no %s", path, name, k)
					}
				}
				walk(path+"."+name, ps)
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	walk("root", doc)
	for name, d := range doc["$defs"].(map[string]any) {
		walk("$defs."+name, d.(map[string]any))
	}
	if count < 60 {
		t.Errorf("walked %d properties; the walk is broken", count)
	}
}

// stepReference reports whether a schema property names another step.
func stepReference(name string, s map[string]any) bool {
	return name == "on_timeout" || s["$ref"] == "#/$defs/target"
}

// TestSchemaDurationPattern checks the schema's duration pattern against
// the duration package, which the loader applies after it.
func TestSchemaDurationPattern(t *testing.T) {
	for _, s := range []string{"30s", "1h30m", "2d", "1d12h", "1.5d", "250ms", "0", " 5m "} {
		if _, err := duration.Parse(s); err != nil {
			t.Fatalf("duration.Parse(%q): %v", s, err)
		}
		src := "tqw: v1\nname: t\nsteps:\n  - id: a\n    action: sleep\n    with: {duration: \"" + s + "\"}\n"
		if _, diags, err := Parse("d.yaml", []byte(src)); err != nil {
			t.Errorf("duration %q rejected: %s", s, diags)
		}
	}
}

// TestFastSchemaMatchesFull checks that the loader's validation (the schema
// without its action discriminator, plus each with against its action's
// definition) reports exactly what the published schema reports.
func TestFastSchemaMatchesFull(t *testing.T) {
	var files []string
	for _, p := range []string{"testdata/invalid/*.yaml", "testdata/*.yaml", "../workflows/*.yaml"} {
		m, _ := filepath.Glob(p)
		files = append(files, m...)
	}
	extra := map[string][]byte{
		"foreach-bad-with": []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    foreach: {items: [1], action: http, with: {urll: x}}\n"),
		"foreach-no-with":  []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    foreach: {items: [1], action: shell}\n"),
		"with-not-map":     []byte("tqw: v1\nname: t\nsteps:\n  - id: a\n    action: shell\n    with: [ls]\n"),
		"top-list":         []byte("- a\n- b\n"),
		"generated":        dslgen.Workflow(30),
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		extra[f] = b
	}
	compared := 0
	for name, src := range extra {
		root := parseYAML(&diagSink{}, src, DefaultLimits)
		if root == nil {
			continue
		}
		fast, full := &diagSink{file: name}, &diagSink{file: name}
		validateSchema(fast, root, root.toAny())
		validateFull(full, root, root.toAny())
		a, b := strings.Split(fast.diags.String(), "\n"), strings.Split(full.diags.String(), "\n")
		sort.Strings(a)
		sort.Strings(b)
		if !slices.Equal(a, b) {
			t.Errorf("%s:\nloader:\n%s\npublished schema:\n%s", name, fast.diags, full.diags)
		}
		compared++
	}
	if compared < 60 {
		t.Errorf("compared %d files; want at least 60", compared)
	}
}
