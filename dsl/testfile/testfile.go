package testfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/duration"
	"github.com/tqw-dsl/tqw/schemas"
)

// Diagnostic codes of test files, beside package dsl's yaml.*, file.*
// and schema.* codes.
const (
	CodeDuration     = "test.duration"      // an at: that is not a duration
	CodeTime         = "test.time"          // a clock: that is not an RFC 3339 time
	CodeDuplicate    = "test.duplicate"     // two cases of one name, or two mocks of one step or action
	CodeResultSchema = "test.result-schema" // a result_schema that does not compile
	CodeWorkflow     = "test.workflow"      // no workflow file to test, or one that does not load
	CodeUnknownStep  = "test.unknown-step"  // a step id that names no step of the workflow
	CodeStepKind     = "test.step-kind"     // a mock of a step that runs no action, a signal to a step that waits for none, an expectation on a child run's step
)

// Suffix ends the name of a test file: NAME.test.yaml tests NAME.tqw.yaml
// (or NAME.yaml).
const Suffix = ".test.yaml"

// DefaultStart is the virtual clock's start when a case gives no clock.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultRunID is a case's run id when it gives none.
const DefaultRunID = "test"

// Is reports whether path names a test file (NAME.test.yaml or
// NAME.test.yml), which no workflow command loads as a workflow.
func Is(path string) bool {
	base := filepath.Base(path)
	return strings.HasSuffix(base, Suffix) || strings.HasSuffix(base, ".test.yml")
}

// File is a parsed test file.
type File struct {
	// Path is the file's name as given; Workflow the path of the workflow
	// it tests (relative to the current folder when Path is), and
	// WorkflowPos where the file names it (1:1 when it does not).
	Path        string
	Workflow    string
	WorkflowPos dsl.Pos
	Cases       []*Case
}

// Case is one test case: one run of the workflow.
type Case struct {
	Name    string
	Pos     dsl.Pos
	Input   any
	RunID   string
	Start   time.Time
	Secrets map[string]string
	Mocks   []*Mock
	Signals []*Signal
	Expect  Expect
}

// Mock answers the attempts of one step (Step) or of every step running
// one action (Action): attempt n gets Replies[n-1], the last repeating.
type Mock struct {
	Step, Action string
	Pos          dsl.Pos
	Replies      []Reply
}

// Reply is what one attempt returns: Output, or Error when not nil.
type Reply struct {
	Output any
	Error  *MockError
}

// MockError is a typed action error; Retryable nil means the built-in
// actions' default for the type (dsl.RetryableByDefault).
type MockError struct {
	Type, Message string
	Status        int
	Retryable     *bool
}

// Signal is a signal a case sends to Key, or to the key step Step waits
// on; with HasAt at the virtual time start+At, else as soon as a run
// waits on it.
type Signal struct {
	Key, Step string
	Payload   any
	At        time.Duration
	HasAt     bool
	Pos       dsl.Pos
}

// Expect is what the run must do; a field is checked when its Has flag
// (or, for maps, its being non-nil) says it was given. Pos holds where
// each key of expect is, by key.
type Expect struct {
	Status       string
	Result       any
	HasResult    bool
	ResultSchema *jsonschema.Schema
	Path         []string
	HasPath      bool
	Vars         map[string]any
	Attempts     map[string]int
	Error        *ExpectError
	Pos          map[string]dsl.Pos
}

// ExpectError is the error that must fail the run: its type, and text
// its message contains.
type ExpectError struct {
	Type, Message string
}

// Read reads and parses the test file at path (a regular file, at most
// dsl.DefaultLimits.MaxFileBytes). A file that cannot be read is one
// file.read diagnostic.
func Read(path string) (*File, dsl.Diagnostics) {
	src, _, err := dsl.ReadFile(nil, path, dsl.DefaultLimits)
	if err != nil {
		return nil, dsl.Diagnostics{{File: path, Line: 1, Col: 1, EndLine: 1, EndCol: 1, Severity: dsl.SeverityError,
			Code: dsl.CodeFileRead, Message: err.Error()}}
	}
	return Parse(path, src)
}

// Parse parses a test file's bytes; name is the path diagnostics carry
// and the workflow's path is resolved against.
func Parse(name string, src []byte) (*File, dsl.Diagnostics) {
	p := &parser{name: name, pos: map[string]dsl.Pos{}, keyPos: map[string]dsl.Pos{}}
	root := p.yaml(src)
	if root == nil || p.diags.HasErrors() {
		return nil, p.diags
	}
	if !p.schema(root) {
		return nil, p.diags
	}
	f := p.file(root.(map[string]any))
	if p.diags.HasErrors() {
		return nil, p.diags
	}
	return f, p.diags
}

type parser struct {
	name  string
	diags dsl.Diagnostics
	// pos and keyPos are where the value at a JSON pointer starts, and
	// the key naming it.
	pos, keyPos map[string]dsl.Pos
	nodes       int
}

func (p *parser) errorf(at dsl.Pos, code, format string, args ...any) {
	p.diags = append(p.diags, dsl.Diagnostic{File: p.name, Line: at.Line, Col: at.Col, EndLine: at.Line, EndCol: at.Col + 1,
		Severity: dsl.SeverityError, Code: code, Message: fmt.Sprintf(format, args...)})
}

// at is where the value at pointer ptr is, or its nearest parent.
func (p *parser) at(ptr string) dsl.Pos {
	for {
		if v, ok := p.pos[ptr]; ok {
			return v
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return dsl.Pos{Line: 1, Col: 1}
		}
		ptr = ptr[:i]
	}
}

func (p *parser) yaml(src []byte) any {
	if len(src) > dsl.DefaultLimits.MaxFileBytes {
		p.errorf(dsl.Pos{Line: 1, Col: 1}, dsl.CodeFileTooLarge, "the file is larger than %d bytes", dsl.DefaultLimits.MaxFileBytes)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(dsl.Pos{Line: 1, Col: 1}, dsl.CodeYAMLEmpty, "the file is empty")
			return nil
		}
		line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		p.errorf(dsl.Pos{Line: line, Col: 1}, dsl.CodeYAMLSyntax, "YAML syntax: %s", msg)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(dsl.Pos{Line: extra.Line, Col: extra.Column}, dsl.CodeYAMLMultiDoc, "a test file is one YAML document")
		return nil
	}
	if len(doc.Content) == 0 {
		p.errorf(dsl.Pos{Line: 1, Col: 1}, dsl.CodeYAMLEmpty, "the file is empty")
		return nil
	}
	return p.value(doc.Content[0], "", 0)
}

// value converts a YAML node to a JSON value, noting positions.
func (p *parser) value(n *yaml.Node, ptr string, depth int) any {
	at := dsl.Pos{Line: n.Line, Col: n.Column}
	if depth > dsl.DefaultLimits.MaxDepth {
		p.errorf(at, dsl.CodeTooDeep, "nested deeper than %d", dsl.DefaultLimits.MaxDepth)
		return nil
	}
	if p.nodes++; p.nodes > dsl.DefaultLimits.MaxAliasNodes {
		if p.nodes == dsl.DefaultLimits.MaxAliasNodes+1 {
			p.errorf(at, dsl.CodeAliasBound, "more than %d values (aliases included)", dsl.DefaultLimits.MaxAliasNodes)
		}
		return nil
	}
	p.pos[ptr] = at
	switch n.Kind {
	case yaml.AliasNode:
		return p.value(n.Alias, ptr, depth+1)
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kat := dsl.Pos{Line: k.Line, Col: k.Column}
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" && k.Tag != "!!int" && k.Tag != "!!bool" && k.Tag != "!!float" {
				if k.Tag == "!!merge" {
					p.errorf(kat, dsl.CodeMergeKey, "YAML merge keys (<<) are not supported")
				} else {
					p.errorf(kat, dsl.CodeKeyType, "a key must be a string")
				}
				continue
			}
			if _, dup := m[k.Value]; dup {
				p.errorf(kat, dsl.CodeDuplicateKey, "duplicate key %q", k.Value)
				continue
			}
			child := ptr + "/" + escape(k.Value)
			p.keyPos[child] = kat
			m[k.Value] = p.value(v, child, depth+1)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			l = append(l, p.value(c, ptr+"/"+strconv.Itoa(i), depth+1))
		}
		return l
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil
		case "!!bool", "!!int", "!!float":
			var v any
			if err := n.Decode(&v); err != nil {
				p.errorf(at, dsl.CodeYAMLSyntax, "%v", err)
				return nil
			}
			switch x := v.(type) {
			case int:
				return int64(x)
			case uint64:
				return float64(x)
			}
			return v
		case "!!str", "!!timestamp", "!!binary":
			return n.Value
		}
		p.errorf(at, dsl.CodeYAMLSyntax, "custom tags (%s) are not supported", n.Tag)
		return nil
	}
	return nil
}

func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

var (
	printer    = message.NewPrinter(language.English)
	yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
)

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.WorkflowTestJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "https://tqw.dev/schemas/workflow-test.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
})

// schema validates the document against workflow-test.schema.json and
// reports each leaf error at the value it concerns.
func (p *parser) schema(root any) bool {
	sch, err := compiled()
	if err != nil {
		p.errorf(dsl.Pos{Line: 1, Col: 1}, dsl.CodeSchemaInvalid, "the embedded test schema does not compile: %v", err)
		return false
	}
	inst, err := jsonValue(root)
	if err != nil {
		p.errorf(dsl.Pos{Line: 1, Col: 1}, dsl.CodeSchemaType, "%v", err)
		return false
	}
	err = sch.Validate(inst)
	if err == nil {
		return true
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		p.errorf(dsl.Pos{Line: 1, Col: 1}, dsl.CodeSchemaType, "%v", err)
		return false
	}
	var leaves []*jsonschema.ValidationError
	collect(ve, &leaves)
	slices.SortStableFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		return slices.Compare(a.InstanceLocation, b.InstanceLocation)
	})
	seen := map[string]bool{}
	for _, l := range leaves {
		ptr := ""
		for _, t := range l.InstanceLocation {
			ptr += "/" + escape(t)
		}
		code, msg, at := dsl.CodeSchemaType, l.ErrorKind.LocalizedString(printer), p.at(ptr)
		switch k := l.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			code = dsl.CodeUnknownField
			if len(k.Properties) > 0 {
				if kp, ok := p.keyPos[ptr+"/"+escape(k.Properties[0])]; ok {
					at = kp
				}
				msg = fmt.Sprintf("unknown field %q", k.Properties[0])
			}
		case *kind.Required:
			code = dsl.CodeSchemaRequired
		case *kind.Enum, *kind.Const:
			code = dsl.CodeSchemaEnum
		case *kind.OneOf:
			code = dsl.CodeSchemaOneOf
		case *kind.Pattern, *kind.Format:
			code = dsl.CodeSchemaPattern
		case *kind.Minimum, *kind.Maximum, *kind.MinItems, *kind.MinLength:
			code = dsl.CodeSchemaRange
		}
		where := ptr
		if where == "" {
			where = "/"
		}
		msg = fmt.Sprintf("at %s: %s", where, msg)
		if k := code + at.String() + msg; !seen[k] {
			seen[k] = true
			p.errorf(at, code, "%s", msg)
		}
	}
	return false
}

func collect(e *jsonschema.ValidationError, out *[]*jsonschema.ValidationError) {
	if _, oneOf := e.ErrorKind.(*kind.OneOf); oneOf || len(e.Causes) == 0 {
		*out = append(*out, e)
		return
	}
	for _, c := range e.Causes {
		collect(c, out)
	}
}

// jsonValue is v as the validator reads JSON.
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// file decodes the document, which the schema accepted.
func (p *parser) file(m map[string]any) *File {
	f := &File{Path: p.name, WorkflowPos: dsl.Pos{Line: 1, Col: 1}}
	if w, ok := m["workflow"].(string); ok {
		f.Workflow = filepath.Join(filepath.Dir(p.name), filepath.FromSlash(w))
		f.WorkflowPos = p.at("/workflow")
	} else {
		f.Workflow = DefaultWorkflow(p.name)
	}
	shared := strings2(m["secrets"])
	names := map[string]bool{}
	for i, c := range m["cases"].([]any) {
		ptr := "/cases/" + strconv.Itoa(i)
		cm := c.(map[string]any)
		k := &Case{Name: cm["name"].(string), Pos: p.at(ptr), Input: cm["input"], RunID: DefaultRunID, Start: DefaultStart}
		if names[k.Name] {
			p.errorf(p.at(ptr+"/name"), CodeDuplicate, "a second case named %q", k.Name)
		}
		names[k.Name] = true
		if k.Input == nil {
			k.Input = map[string]any{}
		}
		if id, ok := cm["run_id"].(string); ok {
			k.RunID = id
		}
		if s, ok := cm["clock"].(string); ok {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				p.errorf(p.at(ptr+"/clock"), CodeTime, "clock %q is not an RFC 3339 time (2026-01-01T09:00:00Z)", s)
			}
			k.Start = t
		}
		k.Secrets = map[string]string{}
		for n, v := range shared {
			k.Secrets[n] = v
		}
		for n, v := range strings2(cm["secrets"]) {
			k.Secrets[n] = v
		}
		k.Mocks = p.mocks(cm["mocks"], ptr+"/mocks")
		k.Signals = p.signals(cm["signals"], ptr+"/signals")
		k.Expect = p.expect(cm["expect"].(map[string]any), ptr+"/expect")
		f.Cases = append(f.Cases, k)
	}
	return f
}

// DefaultWorkflow is the workflow a test file tests when it names none:
// NAME.tqw.yaml beside NAME.test.yaml, else NAME.yaml when only that exists.
func DefaultWorkflow(testPath string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(testPath, Suffix), ".test.yml")
	tqw := base + ".tqw.yaml"
	if _, err := os.Stat(tqw); err != nil {
		if _, err := os.Stat(base + ".yaml"); err == nil {
			return base + ".yaml"
		}
	}
	return tqw
}

func strings2(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, x := range m {
		out[k], _ = x.(string)
	}
	return out
}

func (p *parser) mocks(v any, ptr string) []*Mock {
	var out []*Mock
	seen := map[string]bool{}
	for i, x := range asList(v) {
		mp := ptr + "/" + strconv.Itoa(i)
		m := x.(map[string]any)
		mk := &Mock{Pos: p.at(mp)}
		mk.Step, _ = m["step"].(string)
		mk.Action, _ = m["action"].(string)
		key := "step " + mk.Step
		if mk.Action != "" {
			key = "action " + mk.Action
		}
		if seen[key] {
			p.errorf(mk.Pos, CodeDuplicate, "a second mock of %s", key)
		}
		seen[key] = true
		if seq, ok := m["sequence"].([]any); ok {
			for _, r := range seq {
				mk.Replies = append(mk.Replies, reply(r.(map[string]any)))
			}
		} else {
			mk.Replies = []Reply{reply(m)}
		}
		out = append(out, mk)
	}
	return out
}

func reply(m map[string]any) Reply {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return Reply{Output: m["output"]}
	}
	me := &MockError{}
	me.Type, _ = e["type"].(string)
	me.Message, _ = e["message"].(string)
	if me.Message == "" {
		me.Message = me.Type
	}
	if s, ok := e["status"].(int64); ok {
		me.Status = int(s)
	}
	if r, ok := e["retryable"].(bool); ok {
		me.Retryable = &r
	}
	return Reply{Error: me}
}

func (p *parser) signals(v any, ptr string) []*Signal {
	var out []*Signal
	for i, x := range asList(v) {
		sp := ptr + "/" + strconv.Itoa(i)
		m := x.(map[string]any)
		s := &Signal{Pos: p.at(sp), Payload: m["payload"]}
		s.Key, _ = m["key"].(string)
		s.Step, _ = m["step"].(string)
		if at, ok := m["at"].(string); ok {
			d, err := duration.Parse(at)
			if err != nil || at == "" {
				p.errorf(p.at(sp+"/at"), CodeDuration, "at %q is not a duration (30s, 2h, 3d)", at)
			}
			s.At, s.HasAt = d, true
		}
		out = append(out, s)
	}
	return out
}

func (p *parser) expect(m map[string]any, ptr string) Expect {
	e := Expect{Pos: map[string]dsl.Pos{}}
	for k := range m {
		e.Pos[k] = p.at(ptr + "/" + escape(k))
	}
	e.Status, _ = m["status"].(string)
	e.Result, e.HasResult = m["result"]
	if s, ok := m["result_schema"]; ok {
		inst, err := jsonValue(s)
		if err == nil {
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			url := "tqw-test:///" + strings.TrimPrefix(ptr, "/") + "/result_schema"
			if err = c.AddResource(url, inst); err == nil {
				e.ResultSchema, err = c.Compile(url)
			}
		}
		if err != nil {
			p.errorf(e.Pos["result_schema"], CodeResultSchema, "result_schema is not a valid JSON Schema: %s", schemaProblem(err))
		}
	}
	if l, ok := m["path"].([]any); ok {
		e.HasPath = true
		e.Path = []string{}
		for _, x := range l {
			e.Path = append(e.Path, x.(string))
		}
	}
	if v, ok := m["vars"].(map[string]any); ok {
		e.Vars = v
	}
	if a, ok := m["attempts"].(map[string]any); ok {
		e.Attempts = map[string]int{}
		for k, x := range a {
			n, _ := x.(int64)
			e.Attempts[k] = int(n)
		}
	}
	if em, ok := m["error"].(map[string]any); ok {
		e.Error = &ExpectError{}
		e.Error.Type, _ = em["type"].(string)
		e.Error.Message, _ = em["message"].(string)
	}
	return e
}

func asList(v any) []any { l, _ := v.([]any); return l }

// schemaProblem is the first leaf of a schema's refusal by the
// metaschema, "at /type: ...", else the error's first line.
func schemaProblem(err error) string {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		var leaves []*jsonschema.ValidationError
		collect(ve, &leaves)
		if len(leaves) > 0 {
			return fmt.Sprintf("at /%s: %s", strings.Join(leaves[0].InstanceLocation, "/"), leaves[0].ErrorKind.LocalizedString(printer))
		}
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
