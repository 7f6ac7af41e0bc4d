package dsl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tqw-dsl/tqw/dsl/duration"
)

// Limits bound what the loader accepts, so a hostile or broken file costs
// bounded time and memory. Zero fields take the defaults.
type Limits struct {
	MaxFileBytes  int // default 1 MiB
	MaxAliasNodes int // nodes aliases may add in total; default 100,000
	MaxDepth      int // nesting of maps and lists; default 64
	MaxSteps      int // default 10,000
}

// DefaultLimits are the bounds Parse applies when Options leave them zero.
var DefaultLimits = Limits{MaxFileBytes: 1 << 20, MaxAliasNodes: 100_000, MaxDepth: 64, MaxSteps: 10_000}

func (l Limits) withDefaults() Limits {
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultLimits.MaxFileBytes
	}
	if l.MaxAliasNodes <= 0 {
		l.MaxAliasNodes = DefaultLimits.MaxAliasNodes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultLimits.MaxSteps
	}
	return l
}

// Options tune loading.
type Options struct {
	// ExtraActions are actions an embedding program registers, by name,
	// each with the JSON Schema of its with (nil accepts any map). A with
	// is checked against it as written, so typed fields take literals.
	ExtraActions map[string]json.RawMessage
	Limits       Limits
}

// Load reads and parses the workflow file at path with default options.
func Load(path string) (*Workflow, Diagnostics, error) {
	return LoadWith(path, Options{})
}

// LoadWith reads (ReadFile) and parses the workflow file at path.
func LoadWith(path string, opts Options) (*Workflow, Diagnostics, error) {
	src, _, err := ReadFile(nil, path, opts.Limits)
	if err != nil {
		return nil, nil, err
	}
	return ParseWith(path, src, opts)
}

// ReadFile reads the workflow file at path (a name inside root when root
// is not nil: os.Root refuses a path or symlink that leads out of it). It
// reads only a regular file, and at most lim.MaxFileBytes+1 bytes (one
// past the bound, so ParseWith reports file.too-large): the file is
// opened with O_NONBLOCK, so opening a FIFO never waits for a writer,
// and checked with fstat before any read, so nothing is read from a
// FIFO, device, socket or /proc entry (whose reads may never end or
// never be bounded). The error names the file. info is the file's, as
// fstat saw it (os.SameFile tells two names of one file apart).
func ReadFile(root *os.Root, path string, lim Limits) (src []byte, info os.FileInfo, err error) {
	lim = lim.withDefaults()
	open := os.OpenFile
	if root != nil {
		open = root.OpenFile
	}
	f, err := open(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("dsl: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("dsl: %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("dsl: %s: %w (%s): a workflow is read from a regular file only", path, ErrNotRegular, fileKind(st.Mode()))
	}
	if kind := pseudoFS(f); kind != "" {
		return nil, nil, fmt.Errorf("dsl: %s: %w (a %s entry): a workflow is read from a regular file only", path, ErrNotRegular, kind)
	}
	src, err = io.ReadAll(io.LimitReader(f, int64(lim.MaxFileBytes)+1))
	if err != nil {
		return nil, nil, fmt.Errorf("dsl: reading %s: %w", path, err)
	}
	return src, st, nil
}

// fileKind names what a file that is not regular is, for ReadFile's error.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a folder"
	}
	return "a " + m.Type().String() + " file"
}

// Parse parses src as the workflow file filename with default options.
func Parse(filename string, src []byte) (*Workflow, Diagnostics, error) {
	return ParseWith(filename, src, Options{})
}

// ParseWith parses src as the workflow file filename. It returns every
// diagnostic found; when any is an error the workflow is nil and the error
// is an *InvalidError (errors.Is(err, ErrInvalid)). Warnings alone leave a
// usable workflow and a nil error.
func ParseWith(filename string, src []byte, opts Options) (*Workflow, Diagnostics, error) {
	lim := opts.Limits.withDefaults()
	sink := &diagSink{file: filename}
	w := parse(sink, src, opts, lim)
	sink.diags.sort()
	setEnds(src, sink.diags)
	if sink.diags.HasErrors() {
		return nil, sink.diags, &InvalidError{Diagnostics: sink.diags}
	}
	if w == nil {
		return nil, sink.diags, errors.New("dsl: internal error: no workflow and no diagnostics")
	}
	return w, sink.diags, nil
}

func parse(sink *diagSink, src []byte, opts Options, lim Limits) *Workflow {
	if len(src) > lim.MaxFileBytes {
		sink.errorf(Pos{1, 1}, CodeFileTooLarge, "split the workflow into parent and child workflows with call", "the file is larger than %d bytes", lim.MaxFileBytes)
		return nil
	}
	root := parseYAML(sink, src, lim)
	if root == nil || sink.diags.HasErrors() {
		return nil
	}
	if steps := root.get("steps"); steps != nil && steps.kind == kList && len(steps.items) > lim.MaxSteps {
		sink.errorf(steps.pos, CodeTooManySteps, "split the workflow into parent and child workflows with call", "the workflow has %d steps; the bound is %d", len(steps.items), lim.MaxSteps)
		return nil
	}
	// A file that fails the schema costs no rule checks: their follow-on
	// errors would only add noise to the schema's, which say what to fix
	// first.
	validateSchema(sink, root, root.toAny())
	if sink.diags.HasErrors() {
		return nil
	}
	return checkRules(sink, root, src, opts)
}

// checkRules runs build. It does not panic on any tree (build never
// assumes what the schema guarantees, and FuzzRules checks it), so the
// recover is a last resort: a loader bug becomes an internal diagnostic
// instead of crashing the process that loads the file.
func checkRules(sink *diagSink, root *node, src []byte, opts Options) (w *Workflow) {
	defer func() {
		if r := recover(); r != nil {
			w = nil
			sink.errorf(root.pos, CodeInternal, "please report this with the file", "internal error while checking the workflow: %v", r)
		}
	}()
	var exprs exprCompiler
	return build(sink, root, src, opts, &exprs)
}

// build turns the tree into a Workflow, running the rule checks. It never
// panics on any tree, schema-valid or not (FuzzRules); exprs holds the
// expressions already compiled, if any.
func build(sink *diagSink, root *node, src []byte, opts Options, exprs *exprCompiler) *Workflow {
	var spec fileSpec
	if err := decodeStrict(root, &spec); err != nil {
		sink.errorf(root.pos, CodeSchemaInvalid, "", "%v", err)
		return nil
	}
	sum := sha256.Sum256(src)
	b := &builder{sink: sink, opts: opts, spec: &spec, root: root, exprs: exprs,
		w: &Workflow{Source: slices.Clone(src), Hash: hex.EncodeToString(sum[:]), File: sink.file}}
	b.build()
	return b.w
}

// builder turns a schema-valid spec into a Workflow, running the semantic
// checks as it goes.
type builder struct {
	sink    *diagSink
	opts    Options
	spec    *fileSpec
	root    *node
	w       *Workflow
	exprs   *exprCompiler
	secrets map[string]bool
	// anySecret lets standalone templates (CompileTemplate) read any secret.
	anySecret bool
	// pending step references, checked once the graph is known.
	stepRefs []stepRefUse
	edges    []Edge
	hints    int // "did you mean" searches done so far
	shell    shellChecks
	// labelScope is set while labels: compile: a name out of scope there
	// is CodeLabelScope.
	labelScope bool
	// By step position in w.all: each step's spec, its YAML map and the
	// names its block adds to every expression of the step (item, index).
	specs  []*stepSpec
	nodes  []*node
	scopes []scope
}

// block builds one list of steps (specs, decoded from list) into a Block:
// the one builder of every block, so the top level, branches, map steps,
// on_error and finally obey the same rules. sc is what the block's
// expressions may read besides what their place grants (item and index in
// a map's steps); a nested block inherits its owner's.
func (b *builder) block(path string, list *node, specs []*stepSpec, owner *Step, sc scope) *Block {
	blk := &Block{Path: path, Owner: owner, pos: list.at(Pos{})}
	if owner != nil {
		sc |= b.scopes[owner.ord]
	}
	b.w.blocks = append(b.w.blocks, blk)
	blk.Steps = make([]*Step, len(specs))
	for i, ss := range specs {
		ord := len(b.w.all)
		id := ss.ID.str()
		if j, dup := b.w.index[id]; dup {
			first := b.specs[j]
			b.sink.errorf(ss.ID.at(ss.At), CodeDuplicateID, fmt.Sprintf("the first %q is at line %d; give each step its own id (unique in the file, across blocks)", id, first.ID.at(first.At).Line), "duplicate step id %q", id)
		} else {
			b.w.index[id] = ord
		}
		item := &node{kind: kMap, pos: ss.At}
		if list != nil && i < len(list.items) {
			item = list.items[i]
		}
		b.w.all = append(b.w.all, nil)
		b.specs, b.nodes, b.scopes = append(b.specs, ss), append(b.nodes, item), append(b.scopes, sc)
		st := b.step(ord, ss, blk, i)
		b.w.all[ord], blk.Steps[i] = st, st
	}
	return blk
}

type stepRefUse struct {
	from int // the step (position in w.all) whose expression reads steps.<id>; -1 at top level
	pos  Pos
	id   string
}

func (b *builder) build() {
	s, w := b.spec, b.w
	w.Version = s.TQW.str()
	w.Name = s.Name.str()
	w.Description = s.Description.str()
	b.secrets = map[string]bool{}
	if s.Secrets != nil {
		for _, it := range s.Secrets.items {
			w.Secrets = append(w.Secrets, it.str())
			b.secrets[it.str()] = true
		}
	}
	if s.Input != nil {
		w.InputSchema = s.Input.toAny()
		sch, err := compileSchemaValue("input.json", w.InputSchema)
		if err != nil {
			b.sink.errorf(s.Input.pos, CodeInputSchema, "input must be a JSON Schema (2020-12)", "input is not a valid JSON Schema: %s", schemaProblem(err))
		}
		w.input = sch
	}
	if s.Vars != nil {
		w.Vars = b.template(s.Vars, scInput|scRun, -1)
	}
	if s.Timeout != nil {
		w.Timeout = b.duration(s.Timeout)
		if _, perr := duration.Parse(s.Timeout.str()); perr == nil && w.Timeout <= 0 {
			b.sink.errorf(s.Timeout.pos, CodeRunTimeout, "write how long a run may take, e.g. 2h, or leave timeout out for no deadline", "the run timeout must be positive, got %q", s.Timeout.str())
		}
	}
	if s.Defaults != nil {
		w.Defaults.Timeout = b.duration(s.Defaults.Timeout)
		w.Defaults.Retry = b.retry(s.Defaults.Retry, -1)
	}
	// labels: and outputs: (labels.go); outputs read steps.X of any step,
	// checked to exist with the steps' own references (checkStepRefs).
	b.labels(s.Labels)
	if s.Outputs != nil {
		w.Outputs = b.template(s.Outputs, scAfter, -1)
	}
	w.index = make(map[string]int, len(s.Steps))
	w.Steps = b.block("", b.root.get("steps"), s.Steps, nil, 0).Steps
	if s.OnError != nil {
		// Handlers read the run's error (and run.outcome) everywhere.
		w.OnError = b.block("on_error", b.root.get("on_error"), s.OnError, nil, scError)
	}
	if s.Finally != nil {
		w.Finally = b.block("finally", b.root.get("finally"), s.Finally, nil, scError)
	}
	nested := w.blocks[1:]
	sort.SliceStable(nested, func(i, j int) bool { return nested[i].pos.before(nested[j].pos) })
	b.edges = w.edges()
	b.checkTargets()
	b.checkReachable()
	b.checkStepRefs()
	b.checkRawScripts()
	b.checkSetReads()
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// stepKeys lists the keys a step of each kind may have besides id and description.
var stepKeys = map[Kind][]string{
	KindAction:   {"action", "with", "set", "switch", "next", "retry", "catch", "timeout", "on_timeout"},
	KindForeach:  {"foreach", "set", "switch", "next", "retry", "catch", "timeout", "on_timeout"},
	KindCall:     {"call", "set", "switch", "next", "retry", "catch", "timeout", "on_timeout"},
	KindSucceed:  {"succeed"},
	KindFail:     {"fail"},
	KindSwitch:   {"switch", "set", "next"},
	KindSet:      {"set", "next"},
	KindParallel: {"parallel", "set", "switch", "next", "retry", "catch", "timeout", "on_timeout"},
	KindMap:      {"map", "set", "switch", "next", "retry", "catch", "timeout", "on_timeout"},
}

// step builds the step at position i of w.all, the index-th of blk.
func (b *builder) step(i int, ss *stepSpec, blk *Block, index int) *Step {
	st := &Step{ID: ss.ID.str(), Description: ss.Description.str(), Index: index, Pos: ss.At, Block: blk, ord: i}
	stepNode := b.nodes[i]
	present := stepNode.key // the key node, for positions
	// The kind is set by the one kind key; routing steps have none.
	var kinds []string
	for _, k := range []string{"action", "foreach", "call", "parallel", "map", "succeed", "fail"} {
		if present(k) != nil {
			kinds = append(kinds, k)
		}
	}
	switch {
	case len(kinds) > 1:
		b.sink.errorf(present(kinds[1]).pos, CodeStepConflict, "split it into two steps",
			"step %q has both %s and %s; a step has at most one of action, foreach, call, parallel, map, succeed, fail", st.ID, kinds[0], kinds[1])
		return st
	case len(kinds) == 1:
		st.Kind = Kind(kinds[0])
	case present("switch") != nil:
		st.Kind = KindSwitch
	case present("set") != nil || present("next") != nil:
		st.Kind = KindSet
	default:
		b.sink.errorf(ss.At, CodeStepEmpty, "add action, foreach, call, parallel, map, succeed, fail, switch, set or next", "step %q does nothing", st.ID)
		return st
	}
	allowed := stepKeys[st.Kind]
	for _, key := range stepNode.keys {
		k := key.scalar.(string)
		if k == "id" || k == "description" || slices.Contains(allowed, k) {
			continue
		}
		hint := fmt.Sprintf("a %s step may have: %s", st.Kind, strings.Join(allowed, ", "))
		if k == "with" && st.Kind == KindForeach {
			hint = "put with inside foreach, next to its action"
		} else if k == "with" {
			hint = "with needs an action"
		}
		b.sink.errorf(key.pos, CodeStepKey, hint, "%s is not allowed in a %s step", k, st.Kind)
	}
	handled := st.Kind == KindAction || st.Kind == KindForeach || st.Kind == KindCall || st.Kind == KindParallel || st.Kind == KindMap
	switch st.Kind {
	case KindAction:
		st.Action = ss.Action.str()
		b.checkAction(ss.Action, ss.With, st)
		st.With = b.withTemplate(st.Action, ss.With, scBase|scSecrets, i)
	case KindForeach:
		f := ss.Foreach
		if f == nil { // foreach: null, a schema error
			f = &foreachSpec{At: present("foreach").pos}
		}
		st.Foreach = &Foreach{Action: f.Action.str(), Concurrency: 1}
		if f.Concurrency != nil {
			st.Foreach.Concurrency = int(asInt(f.Concurrency))
		}
		b.checkAction(f.Action, f.With, st)
		if waits(st.Foreach.Action) {
			// Items run inside one durable step; a wait parks the whole
			// run between steps, so it cannot be one item of many.
			b.sink.errorf(f.Action.pos, CodeForeachWait, "to wait once per item, use a map step: its items are durable child runs, which may wait, sleep or call (docs/DSL.md, Blocks, parallel and map)",
				"foreach cannot run %s: each item's action must finish inside the step", st.Foreach.Action)
		}
		st.Foreach.Items = b.template(f.Items, scBase, i)
		st.Foreach.With = b.withTemplate(st.Foreach.Action, f.With, scBase|scItem|scSecrets, i)
	case KindCall:
		c := ss.Call
		if c == nil { // call: null, a schema error
			c = &callSpec{At: present("call").pos}
		}
		st.Call = &Call{Workflow: c.Workflow.str()}
		if strings.Contains(st.Call.Workflow, "${") {
			b.sink.errorf(c.Workflow.pos, CodeStepKey, "write the path literally: children are pinned when the run is submitted", "call.workflow cannot be a template")
		}
		st.Call.Input = b.template(c.Input, scBase, i)
	case KindParallel:
		b.parallel(st, ss.Parallel)
	case KindMap:
		b.mapStep(st, ss.Map)
	case KindSucceed:
		st.Succeed = b.template(ss.Succeed, scAfter, i)
	case KindFail:
		st.Fail = b.template(ss.Fail, scAfter, i)
	}
	st.Set = b.assignments(ss.Set, scAfter, i)
	for _, c := range ss.Switch {
		st.Switch = append(st.Switch, Case{Pos: c.At, When: b.expr(c.When, scAfter, i), Next: b.template(c.Next, scAfter, i)})
	}
	if ss.Next != nil {
		st.Next = b.template(ss.Next, scAfter, i)
	}
	if handled {
		inner := st.Action
		if st.Foreach != nil {
			inner = st.Foreach.Action
		}
		if waits(inner) && ss.Timeout != nil {
			hint := "bound the wait with with.timeout"
			if inner == "sleep" {
				hint = "a sleep lasts exactly its with.duration or until"
			}
			b.sink.errorf(present("timeout").pos, CodeStepKey, hint, "timeout is not allowed on a step that runs %s", inner)
		}
		st.Retry = b.w.Defaults.Retry
		if ss.Retry != nil {
			st.Retry = b.retry(ss.Retry, i)
		}
		if !waits(inner) {
			st.Timeout = b.w.Defaults.Timeout
			if ss.Timeout != nil {
				st.Timeout = b.duration(ss.Timeout)
			}
		}
		for _, c := range ss.Catch {
			r := CatchRule{Pos: c.At, On: b.errorTypes(c.On), When: b.expr(c.When, scHandler, i), Set: b.assignments(c.Set, scHandler, i), Next: b.template(c.Next, scHandler, i)}
			st.Catch = append(st.Catch, r)
		}
		st.OnTimeout = ss.OnTimeout.str()
	}
	return st
}

// waits reports whether action is one whose length its with sets, so the
// step and default timeouts do not apply to it.
func waits(action string) bool { return action == "wait_signal" || action == "sleep" }

func (b *builder) assignments(n *node, sc scope, step int) []Assignment {
	if n == nil {
		return nil
	}
	out := make([]Assignment, len(n.keys))
	for k, key := range n.keys {
		out[k] = Assignment{Name: key.scalar.(string), Value: b.template(n.vals[k], sc, step)}
	}
	return out
}

func asInt(n *node) int64 {
	switch x := n.scalar.(type) {
	case int64:
		return x
	case uint64:
		return int64(min(x, 1<<62))
	case float64:
		return int64(x)
	}
	return 0
}

func asFloat(n *node) float64 {
	switch x := n.scalar.(type) {
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

func (b *builder) duration(n *node) time.Duration {
	if n == nil {
		return 0
	}
	d, err := duration.Parse(n.str())
	if err != nil {
		b.sink.errorf(n.pos, CodeDuration, "write a number with a unit (ms, s, m, h, d), e.g. 30s, 5m, 2h or 1d12h", "%v", err)
	}
	return d
}

func (b *builder) retry(r *retrySpec, step int) *RetryPolicy {
	if r == nil {
		return nil
	}
	p := &RetryPolicy{MaxAttempts: 1, Initial: defaultInitial, Multiplier: defaultMultiplier, MaxInterval: defaultMaxInterval}
	if r.MaxAttempts != nil {
		p.MaxAttempts = int(asInt(r.MaxAttempts))
	}
	if r.Initial != nil {
		p.Initial = b.duration(r.Initial)
	}
	if r.Multiplier != nil {
		p.Multiplier = asFloat(r.Multiplier)
	}
	if r.MaxInterval != nil {
		p.MaxInterval = b.duration(r.MaxInterval)
	}
	if r.Jitter != nil {
		p.Jitter = asFloat(r.Jitter)
	}
	p.On = b.errorTypes(r.On)
	p.When = b.expr(r.When, scHandler, step)
	return p
}

func (b *builder) errorTypes(n *node) []string {
	if n == nil {
		return nil
	}
	var out []string
	for _, it := range n.items {
		t := it.str()
		if t == TypeRunTimeout {
			b.sink.errorf(it.pos, CodeErrorUncatchable, "the run's deadline ends the run; clean up in on_error, which reads error.type == \"run.timeout\"",
				"%s cannot be retried or caught", t)
			continue
		}
		if !isErrorType(t) {
			hint := "known types: " + strings.Join(ErrorTypes, ", ") + "; actions an embedding program registers raise custom.<name>"
			if c := b.closest(t, ErrorTypes); c != "" {
				hint = fmt.Sprintf("did you mean %q? %s", c, hint)
			}
			b.sink.errorf(it.pos, CodeErrorType, hint, "unknown error type %q", t)
			continue
		}
		out = append(out, t)
	}
	return out
}

func (b *builder) knownActions() []string {
	known := slices.Clone(BuiltinActions)
	for name := range b.opts.ExtraActions {
		if !slices.Contains(known, name) {
			known = append(known, name)
		}
	}
	sort.Strings(known[len(BuiltinActions):])
	return known
}

// checkAction checks what the schema cannot: the action exists, extra
// actions' with-schemas, and the cross-field rules of the built-in ones.
func (b *builder) checkAction(actionNode, with *node, st *Step) {
	name, at := actionNode.str(), actionNode.at(st.Pos)
	if slices.Contains(BuiltinActions, name) {
		b.checkBuiltinWith(name, with, at)
		return
	}
	raw, ok := b.opts.ExtraActions[name]
	if !ok {
		known := b.knownActions()
		hint := "known actions: " + strings.Join(known, ", ")
		if c := b.closest(name, known); c != "" {
			hint = fmt.Sprintf("did you mean %q? %s", c, hint)
		}
		b.sink.errorf(at, CodeUnknownAction, hint, "step %q: unknown action %q", st.ID, name)
		return
	}
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	if err != nil {
		b.sink.errorf(at, CodeWithSchema, "fix the program that registers the action", "action %q: its with-schema is not JSON: %v", name, err)
		return
	}
	sch, err := compileSchemaValue("action/"+name+".json", doc)
	if err != nil {
		b.sink.errorf(at, CodeWithSchema, "fix the program that registers the action", "action %q: its with-schema does not compile: %s", name, schemaProblem(err))
		return
	}
	var v any = map[string]any{}
	pos := at
	if with != nil {
		v, pos = with.toAny(), with.pos
	}
	if err := sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			var leaves []*jsonschema.ValidationError
			collectLeaves(ve, &leaves)
			for _, l := range leaves {
				p := pos
				if n := lookup(with, l.InstanceLocation); n != nil {
					p = n.pos
				}
				b.sink.errorf(p, CodeWithSchema, "", "action %s: with%s: %s", name, pointerSuffix(l.InstanceLocation), l.ErrorKind.LocalizedString(printer))
			}
			return
		}
		b.sink.errorf(pos, CodeWithSchema, "", "action %s: %v", name, err)
	}
}

func pointerSuffix(toks []string) string {
	if len(toks) == 0 {
		return ""
	}
	return "." + pathLabel(toks)
}

// checkBuiltinWith checks a built-in action's with; at is the action's
// position, for a with the step does not have.
func (b *builder) checkBuiltinWith(name string, with *node, at Pos) {
	staticDuration := func(key string) {
		if n := with.get(key); n != nil && !strings.Contains(n.str(), "${") {
			b.duration(n)
		}
	}
	switch name {
	case "http", "shell", "llm":
		staticDuration("timeout")
		if name == "http" {
			b.checkHTTPCache(with)
		}
	case "wait_signal":
		if with.get("timeout") == nil {
			b.sink.errorf(with.at(at), CodeWaitNoTimeout, "add with.timeout (e.g. 72h) and on_timeout to say where the run goes then", "action wait_signal: with.timeout is required so that a run never waits forever")
		}
		staticDuration("timeout")
		b.checkSchemaField(with.get("schema"), "with.schema")
		if n := with.get("key"); n != nil && n.kind == kString && !strings.Contains(n.str(), "${") {
			b.sink.warnf(n.pos, CodeWaitKeyLiteral, `put the run id in the key, e.g. key: "deploy-window:${ run.id }", or catch signal.key_taken`,
				"wait_signal key %q is the same in every run: a key has one waiter at a time, so a second run reaching this step while one waits fails with signal.key_taken", n.str())
		}
	case "sleep":
		staticDuration("duration")
		if n := with.get("until"); n != nil && !strings.Contains(n.str(), "${") {
			if _, err := time.Parse(time.RFC3339, n.str()); err != nil {
				b.sink.errorf(n.pos, CodeWithSchema, "write e.g. 2027-01-01T09:00:00Z", "action sleep: with.until %q is not an RFC 3339 time", n.str())
			}
		}
	}
	if name == "llm" {
		b.checkSchemaField(with.get("response_schema"), "with.response_schema")
		secret, pos := "OPENAI_API_KEY", with.at(at)
		if n := with.get("api_key_secret"); n != nil {
			secret, pos = n.str(), n.pos
		}
		if !b.secrets[secret] {
			b.sink.errorf(pos, CodeSecretUnknown, fmt.Sprintf("add %s to secrets at the top of the file", secret), "action llm reads secret %s, which is not declared", secret)
		}
	}
}

// checkHTTPCache refuses cache on an http step whose method is not one
// the cache allows: GET and HEAD, or those cache.methods lists. A method
// given by an expression is checked when the step runs.
func (b *builder) checkHTTPCache(with *node) {
	c := with.get("cache")
	if c == nil || c.kind == kBool && c.scalar != true {
		return
	}
	allowed := []string{"GET", "HEAD"}
	if ms := c.get("methods"); ms != nil {
		allowed = nil
		for _, m := range ms.items {
			allowed = append(allowed, strings.ToUpper(m.str()))
		}
	}
	method, pos := "GET", c.pos
	if m := with.get("method"); m != nil {
		method, pos = strings.ToUpper(m.str()), m.pos
	}
	if strings.Contains(method, "${") || slices.Contains(allowed, method) {
		return
	}
	b.sink.errorf(pos, CodeHTTPCacheMethod, fmt.Sprintf("drop cache, or write cache: {methods: [%s]} if this %s only reads", method, method),
		"action http: cache keeps %s responses only; a %s may change something, and a fork or redrive reusing its response would not send it", strings.Join(allowed, " and "), method)
}

func (b *builder) checkSchemaField(n *node, label string) {
	if n == nil {
		return
	}
	if _, err := compileSchemaValue(label+".json", n.toAny()); err != nil {
		b.sink.errorf(n.pos, CodeWithSchema, "write a JSON Schema (2020-12)", "%s is not a valid JSON Schema: %s", label, schemaProblem(err))
	}
}

// expr compiles an expression (a when) read in scope by step (-1: top level).
func (b *builder) expr(n *node, sc scope, step int) *Expr {
	if n == nil {
		return nil
	}
	src := strings.TrimSpace(n.str())
	if strings.HasPrefix(src, "${") && strings.HasSuffix(src, "}") {
		b.sink.errorf(n.pos, CodeExprCompile, "when is always an expression: drop the ${ }", "write when without ${ }: %q", src)
		return nil
	}
	return b.compileExpr(src, n.pos, sc, step)
}

func (b *builder) compileExpr(src string, pos Pos, sc scope, step int) *Expr {
	if step >= 0 && step < len(b.scopes) {
		sc |= b.scopes[step] // what the step's block adds
	}
	c := b.exprs.compile(src)
	if c.err != nil {
		b.sink.errorf(pos, CodeExprCompile, "see https://expr-lang.org/docs/language-definition", "expression %q: %s", src, exprMessage(c.err))
		return nil
	}
	if b.misplacedRaw(src, c, pos) {
		return nil
	}
	if c.timeText != "" {
		b.sink.errorf(pos, CodeExprTimeText, fmt.Sprintf("write date(%s) for a time, duration(%s) for a duration", c.timeText, c.timeText),
			"expression %q applies %s to a time or duration and %s, whose value is stored as text (times as RFC 3339, durations as 1h30m)", src, c.timeTextOp, c.timeText)
		return nil
	}
	ok := true
	for i, sn := range scopeNames {
		if c.idents&(1<<i) == 0 || sc&sn.bit != 0 {
			continue
		}
		ok = false
		code, hint := CodeExprCompile, sn.hint
		if sn.name == "secrets" {
			code = CodeSecretScope
		}
		if b.labelScope {
			code, hint = CodeLabelScope, "labels are set when the run is submitted, before any step runs: they read input and run only"
		}
		b.sink.errorf(pos, code, hint, "expression %q reads %s, which is not available here", src, sn.name)
	}
	for _, r := range c.refs {
		switch r.root {
		case "secrets":
			if sc&scSecrets != 0 && !b.secrets[r.name] && !b.anySecret {
				ok = false
				b.sink.errorf(pos, CodeSecretUnknown, fmt.Sprintf("add %s to secrets at the top of the file", r.name), "expression %q reads secret %s, which is not declared", src, r.name)
			}
		case "steps":
			if sc&scSteps != 0 {
				b.stepRefs = append(b.stepRefs, stepRefUse{from: step, pos: pos, id: r.name})
			}
		}
	}
	if !ok {
		return nil
	}
	return &Expr{Source: src, Pos: pos, prog: c.prog}
}

func exprMessage(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// template compiles a value whose strings may hold ${ } pieces.
func (b *builder) template(n *node, sc scope, step int) *Template {
	if n == nil {
		return nil
	}
	return &Template{Pos: n.pos, root: b.tnode(n, sc, step)}
}

func (b *builder) tnode(n *node, sc scope, step int) tnode {
	switch n.kind {
	case kMap:
		t := tMap{keys: make([]string, len(n.keys)), vals: make([]tnode, len(n.vals))}
		static := true
		for i, k := range n.keys {
			t.keys[i] = k.scalar.(string)
			t.vals[i] = b.tnode(n.vals[i], sc, step)
			if _, ok := t.vals[i].(tLiteral); !ok {
				static = false
			}
		}
		if static { // built from the children's values: no second walk
			m := make(map[string]any, len(t.keys))
			for i, k := range t.keys {
				m[k] = t.vals[i].(tLiteral).v
			}
			return tLiteral{m}
		}
		return t
	case kList:
		t := tList{items: make([]tnode, len(n.items))}
		static := true
		for i, it := range n.items {
			t.items[i] = b.tnode(it, sc, step)
			if _, ok := t.items[i].(tLiteral); !ok {
				static = false
			}
		}
		if static {
			l := make([]any, len(t.items))
			for i, it := range t.items {
				l[i] = it.(tLiteral).v
			}
			return tLiteral{l}
		}
		return t
	case kString:
		s := n.scalar.(string)
		if !strings.Contains(s, "${") {
			return tLiteral{s}
		}
		parts, srcs, err := splitTemplate(s)
		if err != nil {
			b.sink.errorf(n.pos, CodeExprCompile, "write ${ expression }; write $${ for a literal ${", "template %q: %v", s, err)
			return tLiteral{s}
		}
		if len(srcs) == 0 {
			return tLiteral{parts[0].text}
		}
		out := make([]tPart, len(parts))
		for i, p := range parts {
			if p.e == nil {
				out[i] = p
				continue
			}
			e := b.compileExpr(p.text, n.pos, sc, step)
			if e == nil {
				return tLiteral{s}
			}
			out[i] = tPart{e: e}
		}
		if len(out) == 1 {
			return tWhole{out[0].e}
		}
		return tConcat{out}
	}
	return tLiteral{n.scalar}
}
