package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Draft07ID is the $id of the draft-07 rendering, the one SchemaStore
// hosts (schemas/schemastore/README.md has the catalog entry).
const Draft07ID = "https://www.schemastore.org/tqw-workflow.json"

// annotations are keywords that never change what validates.
var annotations = map[string]bool{
	"title": true, "description": true, "markdownDescription": true, "examples": true, "default": true,
	"$comment": true, "enumDescriptions": true, "defaultSnippets": true, "patternErrorMessage": true, "errorMessage": true,
}

// typeKeywords are the keywords that apply to values of one JSON type.
var typeKeywords = map[string]string{
	"minLength": "string", "maxLength": "string", "pattern": "string", "format": "string",
	"items": "array", "minItems": "array", "maxItems": "array", "uniqueItems": "array",
	"minimum": "number", "maximum": "number", "exclusiveMinimum": "number", "exclusiveMaximum": "number",
	"properties": "object", "required": "object", "additionalProperties": "object", "patternProperties": "object", "propertyNames": "object",
}

// Draft07 renders the workflow schema (2020-12) as JSON Schema draft-07
// for SchemaStore, whose checks compile schemas with Ajv in strict mode:
// $defs become definitions, a $ref with validating siblings moves into
// allOf (draft-07 ignores a $ref's siblings), and a union type such as
// ["string", "array"] becomes an anyOf of one branch per type, each with
// the keywords that apply to it. The result validates exactly the same
// documents (TestDraft07MatchesSchema).
func Draft07() ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(WorkflowJSON))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("schemas: workflow.schema.json: %w", err)
	}
	out := convert07(doc).(map[string]any)
	out["$schema"] = "http://json-schema.org/draft-07/schema#"
	out["$id"] = Draft07ID
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(ordered(out)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func convert07(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = convert07(e)
		}
		return out
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			switch k {
			case "$defs":
				m["definitions"] = convert07(e)
			case "$ref":
				m[k] = strings.Replace(e.(string), "#/$defs/", "#/definitions/", 1)
			case "examples", "default", "enum", "const", "defaultSnippets":
				m[k] = e // values, not schemas
			default:
				m[k] = convert07(e)
			}
		}
		if ref, ok := m["$ref"]; ok {
			validating := false
			for k := range m {
				if k != "$ref" && !annotations[k] {
					validating = true
				}
			}
			if validating {
				delete(m, "$ref")
				all, _ := m["allOf"].([]any)
				m["allOf"] = append([]any{map[string]any{"$ref": ref}}, all...)
			}
		}
		if types, ok := m["type"].([]any); ok {
			splitUnion(m, types)
		}
		return m
	}
	return v
}

// splitUnion turns {type: [a, b], ...} into {anyOf: [{type: a, ...}, {type: b, ...}]}.
func splitUnion(m map[string]any, types []any) {
	delete(m, "type")
	var branches []any
	for _, t := range types {
		b := map[string]any{"type": t}
		for k, v := range m {
			if want, ok := typeKeywords[k]; ok && (want == t || want == "number" && t == "integer") {
				b[k] = v
			}
		}
		branches = append(branches, b)
	}
	for k := range typeKeywords {
		delete(m, k)
	}
	m["anyOf"] = branches
}

// ordered renders maps with a stable key order: $schema, $id, title,
// description first, then the rest sorted.
func ordered(v any) any {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			x[i] = ordered(e)
		}
		return x
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		rank := map[string]int{"$schema": 0, "$id": 1, "title": 2, "description": 3, "markdownDescription": 4}
		sort.Slice(keys, func(i, j int) bool {
			ri, iok := rank[keys[i]]
			rj, jok := rank[keys[j]]
			switch {
			case iok && jok:
				return ri < rj
			case iok != jok:
				return iok
			}
			return keys[i] < keys[j]
		})
		om := orderedMap{keys: keys, vals: make([]any, len(keys))}
		for i, k := range keys {
			om.vals[i] = ordered(x[k])
		}
		return om
	}
	return v
}

type orderedMap struct {
	keys []string
	vals []any
}

func (o orderedMap) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		var vb bytes.Buffer
		enc := json.NewEncoder(&vb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(o.vals[i]); err != nil {
			return nil, err
		}
		buf.Write(bytes.TrimRight(vb.Bytes(), "\n"))
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
