package dsl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/tqw-dsl/tqw/schemas"
)

// compiledSchemas holds the embedded schema compiled two ways. doc is the
// published document; full is it compiled with the editor-only
// constraints of loaderRelaxed taken out. fast is the same document without the action
// discriminator (the allOf of if/then under step and foreach), whose
// if-checks cost more than the rest of the validation together; the loader
// validates with fast and then each with against its action's $defs entry
// in withDefs, which yields the same errors (TestFastSchemaMatchesFull).
type compiledSchemas struct {
	doc      map[string]any
	full     *jsonschema.Schema
	fast     *jsonschema.Schema
	withDefs map[string]*jsonschema.Schema // built-in action -> #/$defs/with.<action>
}

var (
	schemaOnce sync.Once
	schemaSet  *compiledSchemas
	schemaErr  error
	printer    = message.NewPrinter(language.English)
)

const fastSchemaID = "https://tqw.dev/schemas/workflow.fast.schema.json"

// loadSchemas compiles the embedded schema once per process.
func loadSchemas() (*compiledSchemas, error) {
	schemaOnce.Do(func() {
		schemaSet, schemaErr = compileSchemas()
	})
	return schemaSet, schemaErr
}

func compileSchemas() (*compiledSchemas, error) {
	parse := func() (map[string]any, error) {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.WorkflowJSON))
		if err != nil {
			return nil, fmt.Errorf("dsl: embedded schema is not JSON: %w", err)
		}
		m, ok := doc.(map[string]any)
		if !ok {
			return nil, errors.New("dsl: embedded schema is not an object")
		}
		return m, nil
	}
	doc, err := parse()
	if err != nil {
		return nil, err
	}
	fastDoc, err := parse()
	if err != nil {
		return nil, err
	}
	compiledDoc, err := parse()
	if err != nil {
		return nil, err
	}
	relaxForLoader(compiledDoc)
	relaxForLoader(fastDoc)
	fastDoc["$id"] = fastSchemaID
	defs, _ := fastDoc["$defs"].(map[string]any)
	for _, name := range []string{"step", "foreach"} {
		if d, ok := defs[name].(map[string]any); ok {
			delete(d, "allOf")
		}
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemas.WorkflowID, compiledDoc); err != nil {
		return nil, fmt.Errorf("dsl: embedded schema: %w", err)
	}
	if err := c.AddResource(fastSchemaID, fastDoc); err != nil {
		return nil, fmt.Errorf("dsl: embedded schema: %w", err)
	}
	cs := &compiledSchemas{doc: doc, withDefs: map[string]*jsonschema.Schema{}}
	if cs.full, err = c.Compile(schemas.WorkflowID); err != nil {
		return nil, fmt.Errorf("dsl: embedded schema does not compile: %w", err)
	}
	if cs.fast, err = c.Compile(fastSchemaID); err != nil {
		return nil, fmt.Errorf("dsl: embedded schema does not compile: %w", err)
	}
	for _, a := range BuiltinActions {
		if cs.withDefs[a], err = c.Compile(schemas.WorkflowID + "#/$defs/with." + a); err != nil {
			return nil, fmt.Errorf("dsl: embedded schema has no usable with.%s: %w", a, err)
		}
	}
	return cs, nil
}

// loaderRelaxed lists the $defs whose editor-facing constraints the
// loader leaves to its rule checks, which report the same problems with
// their own codes, positions and hints (step.conflict,
// step.key-not-allowed, step.empty, step.unknown-action,
// foreach.wait-action, error.unknown-type, expr.compile for a when
// written with ${ }), and which know the actions an embedding program
// registers. Each replacement keeps the type the schema requires.
var loaderRelaxed = map[string]any{
	"stepKinds":         true,
	"actionName":        map[string]any{"type": "string", "minLength": json.Number("1")},
	"foreachActionName": map[string]any{"type": "string", "minLength": json.Number("1")},
	"errorType":         map[string]any{"type": "string", "minLength": json.Number("1")},
	"expression":        map[string]any{"type": "string", "minLength": json.Number("1")},
}

// relaxForLoader applies loaderRelaxed to a schema document, and drops
// with.wait_signal's required timeout (step.wait-no-timeout says it).
func relaxForLoader(doc map[string]any) {
	defs, _ := doc["$defs"].(map[string]any)
	for name, repl := range loaderRelaxed {
		if _, ok := defs[name]; ok {
			defs[name] = repl
		}
	}
	if ws, ok := defs["with.wait_signal"].(map[string]any); ok {
		delete(ws, "required")
	}
}

// workflowSchema returns the published schema, compiled, and its document.
func workflowSchema() (*jsonschema.Schema, map[string]any, error) {
	cs, err := loadSchemas()
	if err != nil {
		return nil, nil, err
	}
	return cs.full, cs.doc, nil
}

// compileSchemaValue compiles a JSON Schema written inside a workflow (input,
// response_schema, a signal payload schema, an extra action's with-schema).
func compileSchemaValue(name string, v any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "tqw:///" + name
	if err := c.AddResource(url, v); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// validateSchema validates the tree against the workflow schema and
// reports every leaf error at the position of the value it concerns. inst
// is root.toAny().
func validateSchema(sink *diagSink, root *node, inst any) {
	cs, err := loadSchemas()
	if err != nil {
		sink.errorf(Pos{1, 1}, CodeSchemaInvalid, "", "%v", err)
		return
	}
	var r schemaResult
	r.validateFast(cs, inst)
	r.validateWiths(cs, root)
	r.report(sink, root, cs)
}

// schemaResult collects what validating a file against the schema finds:
// the fast schema's, then each with's in step order.
type schemaResult struct {
	fast, withs schemaPart
}

// schemaPart is one half of a schemaResult: the leaf errors, and the
// errors that were not validation errors (none in practice).
type schemaPart struct {
	leaves []*jsonschema.ValidationError
	others []error
}

func (p *schemaPart) add(err error, prefix []string) {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		p.others = append(p.others, err)
		return
	}
	var ls []*jsonschema.ValidationError
	collectLeaves(ve, &ls)
	for _, l := range ls {
		if len(prefix) > 0 {
			cp := *l
			cp.InstanceLocation = append(slices.Clone(prefix), l.InstanceLocation...)
			l = &cp
		}
		p.leaves = append(p.leaves, l)
	}
}

// validateFast validates inst against the schema without the action
// discriminator (see compiledSchemas).
func (r *schemaResult) validateFast(cs *compiledSchemas, inst any) {
	if err := cs.fast.Validate(inst); err != nil {
		r.fast.add(err, nil)
	}
}

// validateWiths applies the action discriminator by hand: each with of a
// built-in action against that action's definition, in step order. It
// reads the tree, not root.toAny(), converting only the withs it
// validates.
func (r *schemaResult) validateWiths(cs *compiledSchemas, root *node) {
	if root == nil || root.kind != kMap {
		return
	}
	steps := root.get("steps")
	if steps == nil || steps.kind != kList {
		return
	}
	for i, step := range steps.items {
		if step.kind != kMap {
			continue
		}
		loc := []string{"steps", strconv.Itoa(i)}
		checkWith(cs, &r.withs, step, loc)
		if fe := step.get("foreach"); fe != nil && fe.kind == kMap {
			checkWith(cs, &r.withs, fe, append(loc, "foreach"))
		}
	}
}

// checkWith validates the with of owner (a step or a foreach), at loc,
// against its built-in action's definition.
func checkWith(cs *compiledSchemas, p *schemaPart, owner *node, loc []string) {
	action := owner.get("action")
	if action == nil || action.kind != kString {
		return
	}
	sch := cs.withDefs[action.str()]
	if sch == nil {
		return
	}
	with := owner.get("with")
	if with == nil {
		p.leaves = append(p.leaves, &jsonschema.ValidationError{
			SchemaURL: schemas.WorkflowID + "#/$defs/step", InstanceLocation: loc,
			ErrorKind: &kind.Required{Missing: []string{"with"}}})
		return
	}
	if with.kind != kMap {
		return // the fast schema reports the type
	}
	if err := sch.Validate(with.toAny()); err != nil {
		p.add(err, append(slices.Clone(loc), "with"))
	}
}

// report turns what r found into diagnostics, in the sequential order.
func (r *schemaResult) report(sink *diagSink, root *node, cs *compiledSchemas) {
	for _, err := range append(r.fast.others, r.withs.others...) {
		sink.errorf(root.pos, CodeSchemaInvalid, "", "schema validation: %v", err)
	}
	reportLeaves(sink, root, cs.doc, append(r.fast.leaves, r.withs.leaves...))
}

// validateFull validates against the published schema as is; tests use it
// to show that validateSchema reports the same.
func validateFull(sink *diagSink, root *node, inst any) {
	cs, err := loadSchemas()
	if err != nil {
		sink.errorf(Pos{1, 1}, CodeSchemaInvalid, "", "%v", err)
		return
	}
	err = cs.full.Validate(inst)
	if err == nil {
		return
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		sink.errorf(root.pos, CodeSchemaInvalid, "", "schema validation: %v", err)
		return
	}
	var leaves []*jsonschema.ValidationError
	collectLeaves(ve, &leaves)
	reportLeaves(sink, root, cs.doc, leaves)
}

func reportLeaves(sink *diagSink, root *node, doc map[string]any, leaves []*jsonschema.ValidationError) {
	seen := map[string]bool{}
	for _, l := range leaves {
		for _, d := range describeSchemaError(root, doc, l) {
			k := d.code + "\x00" + d.pos.String() + "\x00" + d.msg
			if seen[k] {
				continue
			}
			seen[k] = true
			sink.errorf(d.pos, d.code, d.hint, "%s", d.msg)
		}
	}
}

// schemaProblem renders the first concrete problem of a schema that does
// not compile or a value that fails one, e.g. "at /properties/a/type:
// value must be one of ...".
func schemaProblem(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		err = sve.Err
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return firstLine(err)
	}
	var leaves []*jsonschema.ValidationError
	collectLeaves(ve, &leaves)
	if len(leaves) == 0 {
		return firstLine(err)
	}
	// The validator visits an object's properties in map order, so the
	// leaves come in a different order from one load to the next; report
	// the first by location so a file always gets the same diagnostic.
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		return slices.Compare(a.InstanceLocation, b.InstanceLocation)
	})
	l := leaves[0]
	return fmt.Sprintf("at /%s: %s", strings.Join(l.InstanceLocation, "/"), l.ErrorKind.LocalizedString(printer))
}

func collectLeaves(e *jsonschema.ValidationError, out *[]*jsonschema.ValidationError) {
	switch e.ErrorKind.(type) {
	case *kind.OneOf:
		*out = append(*out, e)
		return
	}
	if len(e.Causes) == 0 {
		*out = append(*out, e)
		return
	}
	for _, c := range e.Causes {
		collectLeaves(c, out)
	}
}

type schemaDiag struct {
	pos  Pos
	code string
	msg  string
	hint string
}

// lookup walks the tree along a JSON pointer's tokens.
func lookup(root *node, toks []string) *node {
	n := root
	for _, t := range toks {
		switch {
		case n == nil:
			return nil
		case n.kind == kMap:
			n = n.get(t)
		case n.kind == kList:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(n.items) {
				return nil
			}
			n = n.items[i]
		default:
			return nil
		}
	}
	return n
}

// keyPos is the position of key in the map at toks, or the map's position.
func keyPos(root *node, toks []string, key string) Pos {
	m := lookup(root, toks)
	if m == nil {
		return root.pos
	}
	for _, k := range m.keys {
		if k.scalar == key {
			return k.pos
		}
	}
	return m.pos
}

// pathLabel renders tokens as steps[2].with.url.
func pathLabel(toks []string) string {
	if len(toks) == 0 {
		return "the file"
	}
	var sb strings.Builder
	for i, t := range toks {
		if _, err := strconv.Atoi(t); err == nil {
			sb.WriteString("[" + t + "]")
			continue
		}
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(t)
	}
	return sb.String()
}

// actionContext names the action whose with (or deeper) toks points into.
func actionContext(root *node, toks []string) string {
	for i := len(toks) - 1; i >= 1; i-- {
		if toks[i] == "with" {
			if a := lookup(root, toks[:i]).get("action").str(); a != "" {
				return "action " + a + ": "
			}
		}
	}
	return ""
}

// schemaAt resolves the "#/..." part of a schema URL in the raw document.
func schemaAt(doc map[string]any, url string) map[string]any {
	i := strings.IndexByte(url, '#')
	if i < 0 {
		return doc
	}
	var cur any = doc
	for _, t := range strings.Split(strings.TrimPrefix(url[i+1:], "/"), "/") {
		if t == "" {
			continue
		}
		t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[t]
	}
	m, _ := cur.(map[string]any)
	return m
}

func defName(url string) string {
	if i := strings.LastIndex(url, "/$defs/"); i >= 0 {
		return url[i+len("/$defs/"):]
	}
	return ""
}

var exclusiveSets = map[string][2]string{
	"with.sleep": {"duration", "until"},
	"with.llm":   {"prompt", "messages"},
}

func describeSchemaError(root *node, doc map[string]any, e *jsonschema.ValidationError) []schemaDiag {
	toks := e.InstanceLocation
	at := lookup(root, toks)
	pos := root.pos
	if at != nil {
		pos = at.pos
	}
	ctx := actionContext(root, toks)
	label := pathLabel(toks)
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		var known []string
		if s := schemaAt(doc, e.SchemaURL); s != nil && s["patternProperties"] != nil && s["properties"] == nil {
			// A map of variables: its keys must be identifiers.
			var out []schemaDiag
			for _, p := range k.Properties {
				out = append(out, schemaDiag{keyPos(root, toks, p), CodeSchemaPattern,
					fmt.Sprintf("%s%s: %q is not a valid variable name", ctx, label, p),
					"use letters, digits and underscores, starting with a letter or underscore"})
			}
			return out
		} else if s != nil {
			if props, ok := s["properties"].(map[string]any); ok {
				for p := range props {
					known = append(known, p)
				}
			}
		}
		sort.Strings(known)
		var out []schemaDiag
		for _, p := range k.Properties {
			hint := ""
			if len(known) > 0 {
				hint = "known fields: " + strings.Join(known, ", ")
				if s := closest(p, known); s != "" {
					hint = fmt.Sprintf("did you mean %q? %s", s, hint)
				}
			}
			where := label
			if len(toks) == 0 {
				where = "the top level"
			}
			out = append(out, schemaDiag{keyPos(root, toks, p), CodeUnknownField, fmt.Sprintf("%sunknown field %q in %s", ctx, p, where), hint})
		}
		return out
	case *kind.Required:
		var out []schemaDiag
		for _, m := range k.Missing {
			out = append(out, schemaDiag{pos, CodeSchemaRequired, fmt.Sprintf("%s%s: missing required field %q", ctx, label, m), ""})
		}
		return out
	case *kind.Type:
		got := k.Got
		if at != nil {
			got = at.kind.String()
		}
		return []schemaDiag{{pos, CodeSchemaType, fmt.Sprintf("%s%s must be %s, not %s", ctx, label, orList(k.Want), got), ""}}
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			b, _ := json.Marshal(w)
			want[i] = string(b)
		}
		return []schemaDiag{{pos, CodeSchemaEnum, fmt.Sprintf("%s%s must be one of %s", ctx, label, strings.Join(want, ", ")), ""}}
	case *kind.Const:
		b, _ := json.Marshal(k.Want)
		return []schemaDiag{{pos, CodeSchemaEnum, fmt.Sprintf("%s%s must be %s", ctx, label, b), ""}}
	case *kind.OneOf:
		if set, ok := exclusiveSets[defName(e.SchemaURL)]; ok {
			return []schemaDiag{{pos, CodeSchemaOneOf, fmt.Sprintf("%swrite exactly one of with.%s or with.%s", ctx, set[0], set[1]), ""}}
		}
		return []schemaDiag{{pos, CodeSchemaOneOf, fmt.Sprintf("%s%s: %s", ctx, label, k.LocalizedString(printer)), ""}}
	case *kind.Pattern:
		switch defName(e.SchemaURL) {
		case "duration", "durationOrTemplate":
			return []schemaDiag{{pos, CodeSchemaDuration, fmt.Sprintf("%s%s: %q is not a duration", ctx, label, k.Got), "write a number with a unit (ms, s, m, h, d), e.g. 30s, 5m, 2h or 1d12h"}}
		case "stepId", "identifier", "secretName":
			return []schemaDiag{{pos, CodeSchemaPattern, fmt.Sprintf("%s%s: %q is not a valid name", ctx, label, k.Got), "use letters, digits and underscores, starting with a letter or underscore"}}
		}
		return []schemaDiag{{pos, CodeSchemaPattern, fmt.Sprintf("%s%s: %q does not match %s", ctx, label, k.Got, k.Want), ""}}
	case *kind.Minimum, *kind.Maximum, *kind.ExclusiveMinimum, *kind.ExclusiveMaximum,
		*kind.MinItems, *kind.MaxItems, *kind.MinLength, *kind.MaxLength, *kind.UniqueItems:
		return []schemaDiag{{pos, CodeSchemaRange, fmt.Sprintf("%s%s: %s", ctx, label, e.ErrorKind.LocalizedString(printer)), ""}}
	}
	return []schemaDiag{{pos, CodeSchemaInvalid, fmt.Sprintf("%s%s: %s", ctx, label, e.ErrorKind.LocalizedString(printer)), ""}}
}

func orList(ws []string) string {
	out := make([]string, len(ws))
	for i, w := range ws {
		switch w {
		case "object":
			w = "a map"
		case "array":
			w = "a list"
		case "integer":
			w = "an integer"
		default:
			w = "a " + w
		}
		out[i] = w
	}
	return strings.Join(out, " or ")
}

// closest returns the candidate nearest to s by edit distance when it is
// close enough to be a likely typo.
func closest(s string, cands []string) string {
	best, bestD := "", 3
	for _, c := range cands {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
