package actiondecl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/dsl"
)

// FileName is the declarations file Find looks for.
const FileName = "tqw-actions.json"

// Version is the format's version, the value of the file's "tqw" key.
const Version = "actions/v1"

// maxFileBytes bounds a declarations file (it holds schemas, not data).
const maxFileBytes = 4 << 20

// File is a declarations file: the actions a program registers besides
// the built-in ones.
type File struct {
	// TQW is Version.
	TQW string `json:"tqw"`
	// Actions are the declared actions by name.
	Actions map[string]Action `json:"actions"`
}

// Action declares one action.
type Action struct {
	// Summary says what the action does, for hovers and completion.
	Summary string `json:"summary,omitempty"`
	// With is the JSON Schema (2020-12) of the action's with; absent
	// accepts any map.
	With json.RawMessage `json:"with,omitempty"`
}

// ErrInvalid is matched by the errors Parse and Read return for a file
// that is not a valid declarations file.
var ErrInvalid = errors.New("actiondecl: invalid declarations file")

var actionName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// Parse decodes and checks a declarations file read from name: its
// version, each action's name (not a built-in one) and that each with
// schema compiles. Unknown keys are refused, so a typo is not ignored.
func Parse(name string, b []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: more than one JSON value", ErrInvalid, name)
	}
	if f.TQW != Version {
		return nil, fmt.Errorf("%w: %s: \"tqw\" is %q; want %q", ErrInvalid, name, f.TQW, Version)
	}
	for _, a := range f.Names() {
		if !actionName.MatchString(a) {
			return nil, fmt.Errorf("%w: %s: action name %q: want a letter or _, then letters, digits, _, . or -", ErrInvalid, name, a)
		}
		if slices.Contains(dsl.BuiltinActions, a) {
			return nil, fmt.Errorf("%w: %s: action %q is built in; declare only the program's own actions", ErrInvalid, name, a)
		}
		if err := compiles(a, f.Actions[a].With); err != nil {
			return nil, fmt.Errorf("%w: %s: action %q: its with schema: %v", ErrInvalid, name, a, err)
		}
	}
	return &f, nil
}

func compiles(name string, raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	url := "tqw:///actions/" + name
	if err := c.AddResource(url, doc); err != nil {
		return err
	}
	_, err = c.Compile(url)
	return err
}

// Read reads and parses the declarations file at path. Only a regular
// file is read, up to 4 MiB.
func Read(path string) (*File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("actiondecl: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, path)
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes; the limit is %d MiB", ErrInvalid, path, st.Size(), maxFileBytes>>20)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("actiondecl: %w", err)
	}
	return Parse(path, b)
}

// Find returns the FileName nearest to dir: in dir or the closest of its
// parents that has one; "" when none has.
func Find(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("actiondecl: %w", err)
	}
	for {
		p := filepath.Join(abs, FileName)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
		parent := filepath.Dir(abs)
		if parent == abs {
			return "", nil
		}
		abs = parent
	}
}

// Names returns the declared actions' names, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Actions))
	for n := range f.Actions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LoadOptions returns opts with the declared actions added to
// ExtraActions (an action opts already names keeps its schema).
func (f *File) LoadOptions(opts dsl.Options) dsl.Options {
	if f == nil || len(f.Actions) == 0 {
		return opts
	}
	merged := make(map[string]json.RawMessage, len(f.Actions)+len(opts.ExtraActions))
	for n, a := range f.Actions {
		merged[n] = a.With
	}
	for n, s := range opts.ExtraActions {
		merged[n] = s
	}
	opts.ExtraActions = merged
	return opts
}

// New returns a declarations file for the actions' with schemas by name
// (nil: any map), as actions.Registry.Schemas gives them, with optional
// summaries.
func New(withs map[string]json.RawMessage, summaries map[string]string) *File {
	f := &File{TQW: Version, Actions: make(map[string]Action, len(withs))}
	for n, s := range withs {
		f.Actions[n] = Action{Summary: summaries[n], With: s}
	}
	return f
}

// Encode returns f as indented JSON, actions sorted by name, so a
// regenerated file diffs only where a declaration changed.
func (f *File) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n  \"tqw\": ")
	v, _ := json.Marshal(f.TQW)
	b.Write(v)
	b.WriteString(",\n  \"actions\": {")
	for i, n := range f.Names() {
		if i > 0 {
			b.WriteString(",")
		}
		a := f.Actions[n]
		one, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("actiondecl: action %q: %w", n, err)
		}
		var ind bytes.Buffer
		if err := json.Indent(&ind, one, "    ", "  "); err != nil {
			return nil, fmt.Errorf("actiondecl: action %q: %w", n, err)
		}
		key, _ := json.Marshal(n)
		fmt.Fprintf(&b, "\n    %s: %s", key, ind.String())
	}
	if len(f.Actions) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("}\n}\n")
	return b.Bytes(), nil
}

// Schema returns the workflow JSON Schema base (schemas.WorkflowJSON)
// extended with f's actions: their names join the action enums (a
// foreach may run them too) and each one's with is checked against its
// schema, so editors check them like the built-in ones.
func (f *File) Schema(base []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, fmt.Errorf("actiondecl: the base schema: %w", err)
	}
	defs, _ := doc["$defs"].(map[string]any)
	if defs == nil {
		return nil, fmt.Errorf("actiondecl: the base schema has no $defs")
	}
	for _, enumDef := range []string{"actionName", "foreachActionName"} {
		d, _ := defs[enumDef].(map[string]any)
		if d == nil {
			return nil, fmt.Errorf("actiondecl: the base schema has no $defs/%s", enumDef)
		}
		enum, _ := d["enum"].([]any)
		descs, _ := d["enumDescriptions"].([]any)
		for _, n := range f.Names() {
			enum = append(enum, n)
			if descs != nil {
				descs = append(descs, f.Actions[n].Summary)
			}
		}
		d["enum"] = enum
		if descs != nil {
			d["enumDescriptions"] = descs
		}
		d["description"] = strings.TrimSuffix(fmt.Sprint(d["description"]), " tqw-dsl validate knows only these.") + " This schema adds the actions of " + FileName + "."
		delete(d, "markdownDescription")
	}
	for _, host := range []string{"step", "foreach"} {
		d, _ := defs[host].(map[string]any)
		if d == nil {
			return nil, fmt.Errorf("actiondecl: the base schema has no $defs/%s", host)
		}
		all, _ := d["allOf"].([]any)
		for _, n := range f.Names() {
			w := f.Actions[n].With
			if len(w) == 0 || string(w) == "null" {
				continue
			}
			var s any
			if err := json.Unmarshal(w, &s); err != nil {
				return nil, fmt.Errorf("actiondecl: action %q: %w", n, err)
			}
			defs["with."+n] = s
			all = append(all, map[string]any{
				"if": map[string]any{"type": "object", "properties": map[string]any{"action": map[string]any{"const": n}}, "required": []any{"action"}},
				"then": map[string]any{"type": "object", "properties": map[string]any{
					"with": map[string]any{"$ref": "#/$defs/with." + n}}},
			})
		}
		d["allOf"] = all
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("actiondecl: %w", err)
	}
	return append(out, '\n'), nil
}
