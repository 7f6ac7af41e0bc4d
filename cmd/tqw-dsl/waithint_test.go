package main

import (
	"encoding/json"
	"os/exec"
	"testing"
)

func TestPayloadExample(t *testing.T) {
	for _, c := range []struct{ schema, want string }{
		{`{"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}}}`, `{"approved":true}`},
		{`{"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}}`, `{"n":0,"tags":["..."]}`},
		{`{"properties": {"level": {"enum": ["low", "high"]}, "kind": {"const": "k"}, "x": {"type": ["null", "number"]}}}`, `{"kind":"k","level":"low","x":0}`},
		{`{"type": "string", "default": "yes"}`, `"yes"`},
		{`{"oneOf": [{"type": "number"}, {"type": "string"}]}`, `0`},
		{`{"examples": [{"id": 7}]}`, `{"id":7}`},
		{`{}`, `null`},
	} {
		var schema any
		if err := json.Unmarshal([]byte(c.schema), &schema); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(payloadExample(schema, 0))
		if err != nil || string(b) != c.want {
			t.Errorf("payloadExample(%s) = %s (%v), want %s", c.schema, b, err, c.want)
		}
	}
	// A schema that refers to itself forever ends.
	deep := map[string]any{"type": "array"}
	deep["items"] = deep
	if _, err := json.Marshal(payloadExample(deep, 0)); err != nil {
		t.Fatal(err)
	}
}

// TestShellQuote checks that sh reads each quoted word back as it was.
func TestShellQuote(t *testing.T) {
	for _, word := range []string{"w1:ask", "file:///tmp/a b/store", `{"a":"it's"}`, "$(id)", "`id`", "a;b&&c|d", "*", "", "new\nline", `back\slash`} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(word)).Output()
		if err != nil || string(out) != word {
			t.Errorf("sh read %s back as %q (%v), want %q", shellQuote(word), out, err, word)
		}
	}
	if got := shellQuote("w1:ask"); got != "w1:ask" {
		t.Errorf("shellQuote of a plain word = %s", got)
	}
}
