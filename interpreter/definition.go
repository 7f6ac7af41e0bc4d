package interpreter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// definition is a parsed, pinned workflow with what the interpreter
// precomputes per step.
type definition struct {
	wf *dsl.Workflow
	// refs[i] lists the step ids step i's expressions read through
	// steps.<id>; all[i] is true when one reads steps dynamically.
	refs [][]string
	all  []bool
	// secretRefs[i] lists the secrets step i's with reads.
	secretRefs [][]string
}

var (
	stepRefRE   = regexp.MustCompile(`\bsteps\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\])`)
	stepsRE     = regexp.MustCompile(`\bsteps\b`)
	secretRefRE = regexp.MustCompile(`\bsecrets\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([^"']+)["']\s*\])`)
)

func newDefinition(wf *dsl.Workflow) *definition {
	d := &definition{wf: wf, refs: make([][]string, len(wf.Steps)), all: make([]bool, len(wf.Steps)),
		secretRefs: make([][]string, len(wf.Steps))}
	for i, s := range wf.Steps {
		for _, e := range stepExprs(s) {
			ms := stepRefRE.FindAllStringSubmatch(e.Source, -1)
			for _, m := range ms {
				id := m[1] + m[2]
				if !slices.Contains(d.refs[i], id) {
					d.refs[i] = append(d.refs[i], id)
				}
			}
			if len(stepsRE.FindAllStringIndex(e.Source, -1)) > len(ms) {
				d.all[i] = true
			}
		}
		var withExprs []*dsl.Expr
		if s.With != nil {
			withExprs = s.With.Exprs()
		}
		if s.Foreach != nil && s.Foreach.With != nil {
			withExprs = append(withExprs, s.Foreach.With.Exprs()...)
		}
		for _, e := range withExprs {
			for _, m := range secretRefRE.FindAllStringSubmatch(e.Source, -1) {
				if name := m[1] + m[2]; !slices.Contains(d.secretRefs[i], name) {
					d.secretRefs[i] = append(d.secretRefs[i], name)
				}
			}
		}
	}
	return d
}

// stepExprs returns every expression written in step s.
func stepExprs(s *dsl.Step) []*dsl.Expr {
	var out []*dsl.Expr
	tmpl := func(t *dsl.Template) {
		if t != nil {
			out = append(out, t.Exprs()...)
		}
	}
	expr := func(e *dsl.Expr) {
		if e != nil {
			out = append(out, e)
		}
	}
	tmpl(s.With)
	tmpl(s.Next)
	tmpl(s.Succeed)
	tmpl(s.Fail)
	for _, a := range s.Set {
		tmpl(a.Value)
	}
	for _, c := range s.Switch {
		expr(c.When)
		tmpl(c.Next)
	}
	if s.Foreach != nil {
		tmpl(s.Foreach.Items)
		tmpl(s.Foreach.With)
	}
	if s.Call != nil {
		tmpl(s.Call.Input)
	}
	if s.Retry != nil {
		expr(s.Retry.When)
	}
	for _, r := range s.Catch {
		expr(r.When)
		tmpl(r.Next)
		for _, a := range r.Set {
			tmpl(a.Value)
		}
	}
	return out
}

func defKey(hash string) string { return defsPrefix + hash }

// definition returns the parsed definition pinned under hash, reading the
// store on a cache miss.
func (v *View) definition(ctx context.Context, hash string) (*definition, error) {
	v.defMu.Lock()
	d := v.defs[hash]
	v.defMu.Unlock()
	if d != nil {
		return d, nil
	}
	src, _, err := v.store.Get(ctx, defKey(hash))
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrDefinitionMissing, hash)
	}
	if err != nil {
		return nil, fmt.Errorf("interpreter: read definition %s: %w", hash, err)
	}
	if err := checkDefinition(hash, src); err != nil {
		return nil, damaged(defKey(hash), err)
	}
	wf, _, err := dsl.ParseWith("defs/"+hash+".yaml", src, v.dslOpts)
	if err != nil {
		return nil, fmt.Errorf("%w: definition %s no longer loads: %w", ErrCorruptState, hash, err)
	}
	if wf.Hash != hash {
		return nil, fmt.Errorf("%w: definition object %s holds bytes hashing to %s", ErrCorruptState, hash, wf.Hash)
	}
	v.pins.add(hash)
	return v.cache(wf), nil
}

// checkDefinition verifies src, the bytes of the definition object named
// by hash, against that hash (the SHA-256 dsl computes of a source); the
// error says what is wrong, without the key.
func checkDefinition(hash string, src []byte) error {
	if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != hash {
		return fmt.Errorf("its %d bytes do not hash to its name", len(src))
	}
	return nil
}

func (v *View) cache(wf *dsl.Workflow) *definition {
	v.defMu.Lock()
	defer v.defMu.Unlock()
	if d := v.defs[wf.Hash]; d != nil {
		return d
	}
	d := newDefinition(wf)
	v.defs[wf.Hash] = d
	return d
}

// pin names a workflow definition and, by call step id, the definitions
// its call steps run: the whole tree is fixed when the run is submitted.
type pin struct {
	Hash  string          `msgpack:"h"`
	Calls map[string]*pin `msgpack:"c,omitempty"`
}

// Workflow is a workflow file loaded for submission, with every workflow
// it calls, resolved and parsed.
type Workflow struct {
	// Main is the loaded file.
	Main *dsl.Workflow
	// Diagnostics are the warnings of every loaded file.
	Diagnostics dsl.Diagnostics
	pin         *pin
	all         map[string]*dsl.Workflow // by hash
}

// UsesAction reports whether the workflow or a workflow it calls runs the
// named action.
func (w *Workflow) UsesAction(name string) bool {
	for _, wf := range w.all {
		for _, s := range wf.Steps {
			if s.Action == name || s.Foreach != nil && s.Foreach.Action == name {
				return true
			}
		}
	}
	return false
}

// LoadError is a workflow file (or a file it calls) that does not load.
type LoadError struct {
	File        string
	Diagnostics dsl.Diagnostics // nil when the file could not be read
	Err         error
}

// Error returns the file and the problem, one diagnostic per line.
func (e *LoadError) Error() string {
	if len(e.Diagnostics) > 0 {
		return e.Diagnostics.Errors().String()
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

// Unwrap returns the underlying error.
func (e *LoadError) Unwrap() error { return e.Err }

// Load reads the workflow file at path and, recursively, the files its
// call steps name (relative to the calling file), parsed with opts.
// Nothing is stored.
func Load(path string, opts dsl.Options) (*Workflow, error) {
	w := &Workflow{all: map[string]*dsl.Workflow{}}
	p, main, err := loadTree(path, opts, w, nil)
	if err != nil {
		return nil, err
	}
	w.Main, w.pin = main, p
	return w, nil
}

// LoadSource is Load for a workflow given as text (an HTTP request's
// inline YAML): src is parsed as the file named name, and the files its
// call steps name are read relative to the folder of name. Nothing is
// stored.
func LoadSource(name string, src []byte, opts dsl.Options) (*Workflow, error) {
	w := &Workflow{all: map[string]*dsl.Workflow{}}
	wf, diags, err := dsl.ParseWith(name, src, opts)
	if err != nil {
		return nil, &LoadError{File: name, Diagnostics: diags, Err: err}
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, &LoadError{File: name, Err: err}
	}
	p, err := w.addTree(name, wf, diags, opts, []string{abs})
	if err != nil {
		return nil, err
	}
	w.Main, w.pin = wf, p
	return w, nil
}

func loadTree(path string, opts dsl.Options, w *Workflow, stack []string) (*pin, *dsl.Workflow, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, &LoadError{File: path, Err: err}
	}
	if slices.Contains(stack, abs) {
		return nil, nil, &LoadError{File: path, Err: fmt.Errorf("%w: %s calls itself (through %v); tqw pins the whole call tree at submit, so calls cannot recurse", ErrRecursiveCall, path, stack)}
	}
	if _, err := os.Stat(path); err != nil {
		return nil, nil, &LoadError{File: path, Err: err}
	}
	wf, diags, err := dsl.LoadWith(path, opts)
	if err != nil {
		return nil, nil, &LoadError{File: path, Diagnostics: diags, Err: err}
	}
	p, err := w.addTree(path, wf, diags, opts, append(stack, abs))
	return p, wf, err
}

// addTree records wf, parsed from path, and loads the files its call
// steps name; stack holds the absolute paths of the callers and path's.
func (w *Workflow) addTree(path string, wf *dsl.Workflow, diags dsl.Diagnostics, opts dsl.Options, stack []string) (*pin, error) {
	w.Diagnostics = append(w.Diagnostics, diags...)
	w.all[wf.Hash] = wf
	p := &pin{Hash: wf.Hash}
	for _, s := range wf.Steps {
		if s.Call == nil {
			continue
		}
		child := s.Call.Workflow
		if !filepath.IsAbs(child) {
			child = filepath.Join(filepath.Dir(path), child)
		}
		cp, _, err := loadTree(child, opts, w, stack)
		if err != nil {
			var le *LoadError
			if errors.As(err, &le) && le.Diagnostics == nil && le.File == child {
				le.Err = fmt.Errorf("step %q calls it: %w", s.ID, le.Err)
			}
			return nil, err
		}
		if p.Calls == nil {
			p.Calls = map[string]*pin{}
		}
		p.Calls[s.ID] = cp
	}
	return p, nil
}

// ValidateInput checks a run input (plain or JSON-decoded values) against
// the main workflow's input schema; the error matches dsl.ErrInputInvalid.
func (w *Workflow) ValidateInput(input any) error {
	p, err := plain(input)
	if err != nil {
		return fmt.Errorf("%w: %v", dsl.ErrInputInvalid, err)
	}
	return validateInput(w.Main, p)
}
