package interpreter

import (
	"cmp"
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
	// refs[s] lists the step ids step s's expressions read through
	// steps.<id>; all[s] is true when one reads steps dynamically. Every
	// step of every block has its entries.
	refs map[*dsl.Step][]string
	all  map[*dsl.Step]bool
	// secretRefs[s] lists the secrets step s's with reads.
	secretRefs map[*dsl.Step][]string
	// outputRefs and outputAll are refs and all for the workflow's
	// outputs: map.
	outputRefs []string
	outputAll  bool
}

var (
	stepRefRE   = regexp.MustCompile(`\bsteps\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\])`)
	stepsRE     = regexp.MustCompile(`\bsteps\b`)
	secretRefRE = regexp.MustCompile(`\bsecrets\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([^"']+)["']\s*\])`)
)

func newDefinition(wf *dsl.Workflow) *definition {
	d := &definition{wf: wf, refs: map[*dsl.Step][]string{}, all: map[*dsl.Step]bool{}, secretRefs: map[*dsl.Step][]string{}}
	for s := range allSteps(wf) {
		d.refs[s], d.all[s] = readsSteps(stepExprs(s))
		var withExprs []*dsl.Expr
		if s.With != nil {
			withExprs = s.With.Exprs()
		}
		if s.Foreach != nil && s.Foreach.With != nil {
			withExprs = append(withExprs, s.Foreach.With.Exprs()...)
		}
		for _, e := range withExprs {
			for _, m := range secretRefRE.FindAllStringSubmatch(e.Source, -1) {
				if name := m[1] + m[2]; !slices.Contains(d.secretRefs[s], name) {
					d.secretRefs[s] = append(d.secretRefs[s], name)
				}
			}
		}
	}
	if wf.Outputs != nil {
		d.outputRefs, d.outputAll = readsSteps(wf.Outputs.Exprs())
	}
	return d
}

// readsSteps returns the step ids exprs read through steps.<id>, and
// whether one reads steps dynamically (then every output is read).
func readsSteps(exprs []*dsl.Expr) (refs []string, all bool) {
	for _, e := range exprs {
		ms := stepRefRE.FindAllStringSubmatch(e.Source, -1)
		for _, m := range ms {
			if id := m[1] + m[2]; !slices.Contains(refs, id) {
				refs = append(refs, id)
			}
		}
		if len(stepsRE.FindAllStringIndex(e.Source, -1)) > len(ms) {
			all = true
		}
	}
	return refs, all
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
	if s.Map != nil {
		tmpl(s.Map.Items)
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
	d := v.defs.get(hash)
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
	if d := v.defs.get(wf.Hash); d != nil {
		return d
	}
	d := newDefinition(wf)
	v.defs.add(wf.Hash, d)
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

// Tree returns the loaded file and every workflow it calls (each once),
// the loaded file first, then by file name.
func (w *Workflow) Tree() []*dsl.Workflow {
	out := []*dsl.Workflow{w.Main}
	var rest []*dsl.Workflow
	for _, wf := range w.all {
		if wf != w.Main {
			rest = append(rest, wf)
		}
	}
	slices.SortFunc(rest, func(a, b *dsl.Workflow) int { return cmp.Compare(a.File, b.File) })
	return append(out, rest...)
}

// UsesAction reports whether the workflow or a workflow it calls runs the
// named action.
func (w *Workflow) UsesAction(name string) bool {
	for _, wf := range w.all {
		for s := range allSteps(wf) {
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

// MaxCallTree bounds the workflows one load reads: the file and each call
// step's, a file called twice counting twice (the run pins each call). With
// each file bounded by dsl.Limits.MaxFileBytes, a load costs bounded time.
const MaxCallTree = 1000

// ErrNotInFolder is matched by the error of a load confined to a folder
// (InFolder) for a file that is not a workflow file of it: outside it (an
// absolute path, a .. out, a symlink out) or missing, with one message
// for both, so the error does not tell whether a path outside exists.
var ErrNotInFolder = errors.New("no such workflow file in the workflows folder")

// ErrCallTreeTooLarge is matched by the error of a load whose call tree
// holds more than MaxCallTree workflows.
var ErrCallTreeTooLarge = errors.New("interpreter: call tree too large")

// LoadOption changes which files Load and LoadSource may read.
type LoadOption func(*loader)

// InFolder confines a load to the folder dir, as serve confines the
// workflows of its API: Load's path and every call step's workflow name
// a file inside dir, relative to dir (Load) or to the calling file's
// folder (calls). An absolute path, a path that leads out with .., and a
// symlink that points out are refused as ErrNotInFolder, as is a missing
// file; files are opened through os.Root, which refuses escapes the path
// alone does not show. With dir "" nothing is in the folder: a workflow
// given to LoadSource may call nothing.
func InFolder(dir string) LoadOption {
	return func(l *loader) { l.confined, l.dir = true, dir }
}

// loader is the state of one Load or LoadSource.
type loader struct {
	opts     dsl.Options
	confined bool
	dir      string
	root     *os.Root // the folder when confined; nil without one
	w        *Workflow
	loads    int
	files    map[string]*loadedFile // by path as opened
}

type loadedFile struct {
	wf   *dsl.Workflow
	info os.FileInfo
}

// frame is one file of the chain of callers being loaded.
type frame struct {
	path string      // as opened: relative to the folder when confined
	info os.FileInfo // nil for text given to LoadSource
}

func newLoader(opts dsl.Options, lopts []LoadOption) (*loader, error) {
	l := &loader{opts: opts, w: &Workflow{all: map[string]*dsl.Workflow{}}, files: map[string]*loadedFile{}}
	for _, o := range lopts {
		o(l)
	}
	if l.confined && l.dir != "" {
		root, err := os.OpenRoot(l.dir)
		if err != nil {
			return nil, &LoadError{File: l.dir, Err: fmt.Errorf("opening the workflows folder: %w", err)}
		}
		l.root = root
	}
	return l, nil
}

func (l *loader) close() {
	if l.root != nil {
		_ = l.root.Close()
	}
}

// display names a path as opened for messages and the workflow's File.
func (l *loader) display(path string) string {
	if l.confined {
		return filepath.Join(l.dir, path)
	}
	return path
}

// Load reads the workflow file at path and, recursively, the files its
// call steps name (relative to the calling file), parsed with opts. Only
// regular files are read (dsl.ReadFile), at most MaxCallTree of them;
// InFolder confines the load to a folder. Nothing is stored.
func Load(path string, opts dsl.Options, lopts ...LoadOption) (*Workflow, error) {
	l, err := newLoader(opts, lopts)
	if err != nil {
		return nil, err
	}
	defer l.close()
	if l.confined {
		path = filepath.Clean(path)
		if !filepath.IsLocal(path) || l.root == nil {
			return nil, &LoadError{File: path, Err: ErrNotInFolder}
		}
	}
	p, main, err := l.loadTree(path, nil)
	if err != nil {
		return nil, err
	}
	l.w.Main, l.w.pin = main, p
	return l.w, nil
}

// LoadSource is Load for a workflow given as text (an HTTP request's
// inline YAML): src is parsed as the file named name, and the files its
// call steps name are read relative to the folder of name (with InFolder,
// name is relative to the folder). Nothing is stored.
func LoadSource(name string, src []byte, opts dsl.Options, lopts ...LoadOption) (*Workflow, error) {
	l, err := newLoader(opts, lopts)
	if err != nil {
		return nil, err
	}
	defer l.close()
	path := name
	if l.confined {
		path = filepath.Clean(name)
	}
	wf, diags, err := dsl.ParseWith(l.display(path), src, opts)
	if err != nil {
		return nil, &LoadError{File: l.display(path), Diagnostics: diags, Err: err}
	}
	l.loads++
	p, err := l.addTree(path, wf, diags, []frame{{path: path}})
	if err != nil {
		return nil, err
	}
	l.w.Main, l.w.pin = wf, p
	return l.w, nil
}

func (l *loader) loadTree(path string, stack []frame) (*pin, *dsl.Workflow, error) {
	shown := l.display(path)
	if l.loads++; l.loads > MaxCallTree {
		return nil, nil, &LoadError{File: shown, Err: fmt.Errorf("%w: more than %d workflows (a file called twice counts twice)", ErrCallTreeTooLarge, MaxCallTree)}
	}
	f := l.files[path]
	if f == nil {
		src, info, err := dsl.ReadFile(l.root, path, l.opts.Limits)
		if err != nil {
			if l.confined && !errors.Is(err, dsl.ErrNotRegular) {
				err = ErrNotInFolder // one message for missing and forbidden
			}
			return nil, nil, &LoadError{File: shown, Err: err}
		}
		f = &loadedFile{info: info}
		if err := l.checkRecursion(shown, info, stack); err != nil {
			return nil, nil, err
		}
		wf, diags, err := dsl.ParseWith(shown, src, l.opts)
		if err != nil {
			return nil, nil, &LoadError{File: shown, Diagnostics: diags, Err: err}
		}
		l.w.Diagnostics = append(l.w.Diagnostics, diags...)
		f.wf = wf
		l.files[path] = f
	} else if err := l.checkRecursion(shown, f.info, stack); err != nil {
		return nil, nil, err
	}
	p, err := l.addTree(path, f.wf, nil, append(stack, frame{path: path, info: f.info}))
	return p, f.wf, err
}

// checkRecursion refuses a file that is one of its own callers, by
// identity (os.SameFile), so neither another name of it nor a symlink
// loop hides the cycle.
func (l *loader) checkRecursion(shown string, info os.FileInfo, stack []frame) error {
	for _, fr := range stack {
		if fr.info != nil && os.SameFile(fr.info, info) {
			chain := make([]string, len(stack))
			for i, c := range stack {
				chain[i] = l.display(c.path)
			}
			return &LoadError{File: shown, Err: fmt.Errorf("%w: %s calls itself (through %v); tqw pins the whole call tree at submit, so calls cannot recurse", ErrRecursiveCall, shown, chain)}
		}
	}
	return nil
}

// addTree records wf, parsed from path, and loads the files its call
// steps name; stack holds the callers and path.
func (l *loader) addTree(path string, wf *dsl.Workflow, diags dsl.Diagnostics, stack []frame) (*pin, error) {
	l.w.Diagnostics = append(l.w.Diagnostics, diags...)
	l.w.all[wf.Hash] = wf
	p := &pin{Hash: wf.Hash}
	for s := range allSteps(wf) {
		if s.Call == nil {
			continue
		}
		child := s.Call.Workflow
		if !filepath.IsAbs(child) {
			child = filepath.Join(filepath.Dir(path), child)
		}
		var (
			cp  *pin
			err error
		)
		if l.confined && (filepath.IsAbs(s.Call.Workflow) || !filepath.IsLocal(child) || l.root == nil) {
			err = &LoadError{File: l.display(child), Err: ErrNotInFolder}
		} else {
			cp, _, err = l.loadTree(child, stack)
		}
		if err != nil {
			var le *LoadError
			if errors.As(err, &le) && le.Diagnostics == nil && le.File == l.display(child) {
				if l.confined {
					// Named as the step writes it: the resolved path
					// would tell where the folder is.
					le.File = l.display(path)
					le.Err = fmt.Errorf("step %q calls %s: %w", s.ID, s.Call.Workflow, le.Err)
				} else {
					le.Err = fmt.Errorf("step %q calls it: %w", s.ID, le.Err)
				}
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
