package wire

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// bodies maps each component schema of server/openapi.json that is a
// request or response body to its Go type.
var bodies = map[string]any{
	"Error":          Error{},
	"Health":         Health{},
	"SubmitRequest":  SubmitRequest{},
	"SubmitResponse": SubmitResponse{},
	"RunSummary":     RunSummary{},
	"Run":            Run{},
	"Waiting":        Waiting{},
	"MapProgress":    MapProgress{},
	"Totals":         Totals{},
	"RunList":        RunList{},
	"ErrorInfo":      ErrorInfo{},
	"RejectedSignal": RejectedSignal{},
	"HistoryRecord":  HistoryRecord{},
	"History":        History{},
	"CancelResponse": CancelResponse{},
	"SignalResponse": SignalResponse{},
	"HookResponse":   HookResponse{},
	"WorkflowInfo":   WorkflowInfo{},
	"WorkflowList":   WorkflowList{},
	"WorkflowDetail": WorkflowDetail{},
	"Diagnostic":     Diagnostic{},
	"ValidateReport": ValidateReport{},
	"StepEvent":      StepEvent{},
	"ResyncEvent":    ResyncEvent{},
	"ReloadEvent":    ReloadEvent{},
	// Recovering runs (retry, skip, bulk, clear a signal).
	"RetryRequest":        RetryRequest{},
	"SkipRequest":         SkipRequest{},
	"RecoverResponse":     RecoverResponse{},
	"BulkRequest":         BulkRequest{},
	"BulkRun":             BulkRun{},
	"BulkResponse":        BulkResponse{},
	"ClearSignalResponse": ClearSignalResponse{},
	"ForkOrigin":          ForkOrigin{},
	"AnswerReuse":         AnswerReuse{},
	"ForkRequest":         ForkRequest{},
	"ForkResponse":        ForkResponse{},
	"RunDiff":             RunDiff{},
	"StepDifference":      StepDifference{},
	"DiffSide":            DiffSide{},
	"RunExport":           RunExport{},
	"ImportResponse":      ImportResponse{},
}

// notBodies are the component schemas no Go type stands for, and why.
var notBodies = map[string]string{
	"RunState":          "a string enum (RunSummary.State)",
	"RunSummaryFields":  "the fields RunSummary and Run share (RunSummary, embedded in Run)",
	"RunStreamEvent":    "an SSE event of a run's stream, not a JSON body (client.Event)",
	"EventsStreamEvent": "an SSE event of the stream of every run, not a JSON body (client.Event)",
}

func loadDocument(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return doc
}

func componentSchemas(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	if len(schemas) == 0 {
		t.Fatal("openapi.json has no components.schemas")
	}
	return schemas
}

// TestTypesMatchTheDocument checks every body type against its schema in
// server/openapi.json, both ways.
func TestTypesMatchTheDocument(t *testing.T) {
	doc := loadDocument(t)
	names := make([]string, 0, len(bodies))
	for name := range bodies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, p := range checkSchema(doc, name, reflect.TypeOf(bodies[name])) {
				t.Error(p)
			}
		})
	}
}

// TestEveryBodySchemaHasAType fails for a component schema added to the
// document without a Go type here (or a reason in notBodies).
func TestEveryBodySchemaHasAType(t *testing.T) {
	for name := range componentSchemas(t, loadDocument(t)) {
		_, typed := bodies[name]
		_, why := notBodies[name]
		switch {
		case typed && why:
			t.Errorf("schema %s is both in bodies and in notBodies", name)
		case !typed && !why:
			t.Errorf("schema %s has no Go type in package wire: add one to bodies, or say in notBodies why none", name)
		}
	}
	for name := range notBodies {
		if _, ok := componentSchemas(t, loadDocument(t))[name]; !ok {
			t.Errorf("notBodies names %s, which the document no longer has", name)
		}
	}
}

// checkSchema returns what differs between the component schema name of
// doc and the Go type t, one line each (none: they agree).
func checkSchema(doc map[string]any, name string, t reflect.Type) []string {
	c := &checker{doc: doc, seen: map[string]bool{}}
	c.object(name, c.resolve(map[string]any{"$ref": "#/components/schemas/" + name}), t)
	return c.problems
}

type checker struct {
	doc      map[string]any
	problems []string
	// seen holds the (schema, type) pairs already checked, so a $ref met
	// twice is checked once.
	seen map[string]bool
}

func (c *checker) fail(at, format string, args ...any) {
	c.problems = append(c.problems, at+": "+fmt.Sprintf(format, args...))
}

// schema is a schema flattened for the checks: its $ref, allOf and
// nullable oneOf resolved.
type schema struct {
	types      []string // JSON types; empty: any value
	nullable   bool
	format     string
	properties map[string]any
	required   []string
	items      any // array items' schema
	additional any // additionalProperties' schema, when one
	ref        string
}

// resolve flattens s: it follows $ref, merges allOf, and reads
// oneOf/anyOf [X, {type: null}] as a nullable X. Other oneOf branches
// carry constraints only (SubmitRequest's exactly-one-of) and are left.
func (c *checker) resolve(s any) schema {
	var out schema
	c.merge(&out, s, 0)
	return out
}

func (c *checker) merge(out *schema, v any, depth int) {
	m, _ := v.(map[string]any)
	if m == nil || depth > 32 {
		return
	}
	if ref, ok := m["$ref"].(string); ok {
		if out.ref == "" {
			out.ref = ref
		}
		c.merge(out, c.lookup(ref), depth+1)
	}
	switch ty := m["type"].(type) {
	case string:
		out.addType(ty)
	case []any:
		for _, x := range ty {
			if s, ok := x.(string); ok {
				out.addType(s)
			}
		}
	}
	if f, ok := m["format"].(string); ok {
		out.format = f
	}
	if props, ok := m["properties"].(map[string]any); ok {
		if out.properties == nil {
			out.properties = map[string]any{}
		}
		for k, p := range props {
			out.properties[k] = p
		}
	}
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok && !slices.Contains(out.required, s) {
				out.required = append(out.required, s)
			}
		}
	}
	if it, ok := m["items"]; ok {
		out.items = it
	}
	if ap, ok := m["additionalProperties"].(map[string]any); ok {
		out.additional = ap
	}
	for _, part := range asList(m["allOf"]) {
		c.merge(out, part, depth+1)
	}
	for _, key := range []string{"oneOf", "anyOf"} {
		var other []any
		null := false
		for _, b := range asList(m[key]) {
			if bm, _ := b.(map[string]any); bm["type"] == "null" {
				null = true
			} else {
				other = append(other, b)
			}
		}
		if null && len(other) == 1 {
			c.merge(out, other[0], depth+1)
			out.nullable = true
		}
	}
}

func (s *schema) addType(ty string) {
	if ty == "null" {
		s.nullable = true
		return
	}
	if !slices.Contains(s.types, ty) {
		s.types = append(s.types, ty)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// lookup returns the schema a local $ref ("#/components/schemas/X") names.
func (c *checker) lookup(ref string) any {
	var cur any = c.doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, _ := cur.(map[string]any)
		cur = m[part]
	}
	return cur
}

// jsonField is a struct field as encoding/json encodes it.
type jsonField struct {
	goName    string
	t         reflect.Type
	omitempty bool
}

// jsonFields returns t's fields by JSON name, those of embedded structs
// without a tag promoted (encoding/json's rule; no name collisions here).
func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{goName: f.Name, t: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")}
	}
	return out
}

// object checks the struct t against the object schema s, both ways.
func (c *checker) object(at string, s schema, t reflect.Type) {
	if t.Kind() != reflect.Struct {
		c.fail(at, "Go type %s is not a struct", t)
		return
	}
	if s.properties == nil {
		c.fail(at, "the document's schema lists no properties")
		return
	}
	fields := jsonFields(t)
	for _, name := range sortedKeys(s.properties) {
		f, ok := fields[name]
		where := at + "." + name
		if !ok {
			c.fail(where, "property of the document has no field in Go type %s", t)
			continue
		}
		required := slices.Contains(s.required, name)
		if required && f.omitempty {
			c.fail(where, "required by the document, but field %s.%s is omitempty", t.Name(), f.goName)
		}
		c.value(where, c.resolve(s.properties[name]), f.t, required && !f.omitempty)
	}
	for _, name := range sortedKeys(fields) {
		if _, ok := s.properties[name]; !ok {
			c.fail(at+"."+name, "field %s.%s is not a property of the document's schema", t.Name(), fields[name].goName)
		}
	}
	for _, name := range s.required {
		if _, ok := s.properties[name]; !ok {
			c.fail(at+"."+name, "required by the document, which does not define it")
		}
	}
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	// bytesType encodes as a base64 string.
	bytesType = reflect.TypeFor[[]byte]()
)

// value checks that the Go type t encodes and decodes what s allows.
// always says the field is always encoded, so a nil pointer is a null
// the document must allow.
func (c *checker) value(at string, s schema, t reflect.Type, always bool) {
	if t == rawType || t.Kind() == reflect.Interface {
		if len(s.types) > 0 {
			c.fail(at, "Go type %s holds any JSON value, the document's schema only %v", t, s.types)
		}
		return
	}
	if len(s.types) == 0 {
		c.fail(at, "the document allows any JSON value, Go type %s only some (use any or json.RawMessage)", t)
		return
	}
	if t.Kind() == reflect.Pointer {
		if always && !s.nullable {
			c.fail(at, "Go type %s encodes null, which the document's schema does not allow", t)
		}
		t = t.Elem()
	} else if s.nullable && t.Kind() != reflect.Slice && t.Kind() != reflect.Map {
		c.fail(at, "the document allows null, which Go type %s cannot hold (use a pointer)", t)
	}
	want := jsonType(t)
	if len(s.types) != 1 || s.types[0] != want {
		c.fail(at, "the document's type is %v, Go type %s encodes %s", s.types, t, want)
		return
	}
	switch {
	case t == timeType:
		if s.format != "date-time" {
			c.fail(at, "Go type time.Time encodes a date-time, the document's format is %q", s.format)
		}
	case s.format == "date-time":
		c.fail(at, "the document's format is date-time, Go type %s (want time.Time)", t)
	case t == bytesType:
		if s.format != "byte" {
			c.fail(at, "Go type []byte encodes base64, the document's format is %q (want byte)", s.format)
		}
	case t.Kind() == reflect.Struct:
		key := s.ref + "|" + t.String()
		if s.ref == "" || !c.seen[key] {
			c.seen[key] = true
			c.object(at, s, t)
		}
	case t.Kind() == reflect.Slice:
		if s.items == nil {
			c.fail(at, "the document's array has no items schema")
			return
		}
		c.value(at+"[]", c.resolve(s.items), t.Elem(), true)
	case t.Kind() == reflect.Map:
		if t.Key().Kind() != reflect.String {
			c.fail(at, "Go map %s has keys that are not strings", t)
		}
		// The values are those of additionalProperties or, for a map the
		// document gives fixed keys, of each property.
		if s.additional != nil {
			c.value(at+"{}", c.resolve(s.additional), t.Elem(), true)
		}
		for _, name := range sortedKeys(s.properties) {
			c.value(at+"."+name, c.resolve(s.properties[name]), t.Elem(), true)
		}
	}
}

// jsonType is the JSON type encoding/json encodes t as.
func jsonType(t reflect.Type) string {
	if t == timeType || t == bytesType {
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return "unsupported kind " + t.Kind().String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
