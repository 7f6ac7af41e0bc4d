package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeDocument is a document of one schema, Fake, for testing the checker.
const fakeDocument = `{"components": {"schemas": {
  "Fake": {"type": "object", "properties": {
    "name": {"type": "string"},
    "count": {"type": "integer"},
    "at": {"type": ["string", "null"], "format": "date-time"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "inner": {"$ref": "#/components/schemas/Inner"},
    "payload": {}
  }, "required": ["name", "at"], "additionalProperties": false},
  "Inner": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
}}}`

type fakeInner struct {
	OK bool `json:"ok"`
}

// fakeBody agrees with Fake; the other fake types differ from it once.
type fakeBody struct {
	Name    string          `json:"name"`
	Count   int             `json:"count,omitempty"`
	At      *time.Time      `json:"at"`
	Tags    []string        `json:"tags,omitempty"`
	Inner   fakeInner       `json:"inner"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type fakeExtraField struct {
	fakeBody
	Extra string `json:"extra"`
}

type fakeMissingField struct {
	Name  string     `json:"name"`
	Count int        `json:"count,omitempty"`
	At    *time.Time `json:"at"`
	Tags  []string   `json:"tags,omitempty"`
	Inner fakeInner  `json:"inner"`
}

type fakeWrongType struct {
	Name    string          `json:"name"`
	Count   string          `json:"count,omitempty"`
	At      *time.Time      `json:"at"`
	Tags    []string        `json:"tags,omitempty"`
	Inner   fakeInner       `json:"inner"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type fakeRequiredOmitempty struct {
	Name    string          `json:"name,omitempty"`
	Count   int             `json:"count,omitempty"`
	At      *time.Time      `json:"at"`
	Tags    []string        `json:"tags,omitempty"`
	Inner   fakeInner       `json:"inner"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type fakeNotNullable struct {
	Name    string          `json:"name"`
	Count   int             `json:"count,omitempty"`
	At      time.Time       `json:"at"`
	Tags    []string        `json:"tags,omitempty"`
	Inner   fakeInner       `json:"inner"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type fakeInnerExtra struct {
	OK    bool `json:"ok"`
	Extra int  `json:"extra"`
}

type fakeNestedExtra struct {
	Name    string          `json:"name"`
	Count   int             `json:"count,omitempty"`
	At      *time.Time      `json:"at"`
	Tags    []string        `json:"tags,omitempty"`
	Inner   fakeInnerExtra  `json:"inner"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type fakeTypedPayload struct {
	Name    string     `json:"name"`
	Count   int        `json:"count,omitempty"`
	At      *time.Time `json:"at"`
	Tags    []string   `json:"tags,omitempty"`
	Inner   fakeInner  `json:"inner"`
	Payload string     `json:"payload,omitempty"`
}

func TestCheckerFindsEachDifference(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal([]byte(fakeDocument), &doc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		typ  any
		want string // in the one problem reported; "" for none
	}{
		{"agrees", fakeBody{}, ""},
		{"a field the document lacks", fakeExtraField{}, "Fake.extra: field fakeExtraField.Extra is not a property"},
		{"a property Go lacks", fakeMissingField{}, "Fake.payload: property of the document has no field"},
		{"an incompatible type", fakeWrongType{}, "Fake.count: the document's type is [integer], Go type string encodes string"},
		{"a required property omitempty", fakeRequiredOmitempty{}, "Fake.name: required by the document, but field fakeRequiredOmitempty.Name is omitempty"},
		{"null Go cannot hold", fakeNotNullable{}, "Fake.at: the document allows null, which Go type time.Time cannot hold"},
		{"a nested field the document lacks", fakeNestedExtra{}, "Fake.inner.extra: field fakeInnerExtra.Extra is not a property"},
		{"any value into a string", fakeTypedPayload{}, "Fake.payload: the document allows any JSON value, Go type string only some"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkSchema(doc, "Fake", reflect.TypeOf(tc.typ))
			if tc.want == "" {
				if len(got) > 0 {
					t.Fatalf("problems %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("problems %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// A field added to a body on the Go side only fails against the real
// document, at any depth.
func TestCheckerRefusesAFieldAddedToRunOnly(t *testing.T) {
	type runPlus struct {
		Run
		Priority int `json:"priority"`
	}
	got := checkSchema(loadDocument(t), "Run", reflect.TypeOf(runPlus{}))
	if len(got) != 1 || !strings.Contains(got[0], "Run.priority: field runPlus.Priority is not a property") {
		t.Fatalf("problems %q, want Run.priority refused", got)
	}
}
