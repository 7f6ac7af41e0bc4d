package dsl

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/compiler"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/optimizer"
	"github.com/expr-lang/expr/parser/lexer"
	"github.com/expr-lang/expr/vm"

	"github.com/tqw-dsl/tqw/dsl/duration"
)

// Env is what expressions and templates read when they are evaluated.
// Fields a context does not offer (for example Error outside catch) are
// simply not reachable there: the loader rejected such references.
type Env struct {
	Input   any                  // the run input
	Vars    map[string]any       // the run's variables
	Steps   map[string]StepState // outputs of steps that ran, by id
	Output  any                  // this step's output (or the previous step's in a step without an action)
	Error   *ErrorInfo           // the error being handled (catch and retry.when)
	Run     RunInfo              // facts about the run
	Item    any                  // the current foreach item
	Index   int                  // the current foreach index (0-based)
	Secrets map[string]string    // secret values; only with templates can read them
	// Now returns the current time for now(); nil makes now() an error, so
	// that no expression reads the wall clock behind the caller's back.
	Now func() time.Time
	// UUID returns a new id for uuid(); nil makes uuid() an error.
	UUID func() string
}

// StepState is what an expression sees of a finished step.
type StepState struct {
	Output any `expr:"output" json:"output"`
}

// ErrorInfo is the error a catch rule or retry.when examines.
type ErrorInfo struct {
	Type    string `expr:"type" json:"type"`
	Message string `expr:"message" json:"message"`
	Status  int    `expr:"status" json:"status,omitempty"`
	// Retryable is the verdict of the action that raised the error: whether
	// another attempt can succeed. A retry policy without on retries
	// exactly these errors (RetryPolicy.Retries).
	Retryable bool `expr:"retryable" json:"retryable,omitempty"`
	// Step is the id of the step that raised the error; set only for the
	// run's error that on_error and finally read (a history record's
	// error is its own step's, so JSON leaves it out).
	Step string `expr:"step" json:"-" msgpack:"Step,omitempty"`
}

// RunInfo describes the run an expression is evaluated in.
type RunInfo struct {
	ID       string `expr:"id" json:"id"`
	Workflow string `expr:"workflow" json:"workflow"`
	Step     string `expr:"step" json:"step"`
	Attempt  int    `expr:"attempt" json:"attempt"`
	// Outcome is how the run ends, in on_error and finally: failed,
	// timed_out, cancelled or succeeded; "" in the run's own steps.
	Outcome string `expr:"outcome" json:"outcome,omitempty"`
}

// evalError is an expression that failed at run time.
type evalError struct {
	Pos    Pos
	Source string
	Err    error
}

// Error implements error.
func (e *evalError) Error() string {
	return fmt.Sprintf("%s: evaluating %q: %v", e.Pos, e.Source, e.Err)
}

// Unwrap returns the underlying error.
func (e *evalError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrEval) true.
func (e *evalError) Is(target error) bool { return target == ErrEval }

// scope is the set of names an expression may read where it is written.
type scope uint16

const (
	scInput scope = 1 << iota
	scVars
	scSteps
	scOutput
	scError
	scRun
	scItem
	scSecrets

	scBase    = scInput | scVars | scSteps | scRun
	scAfter   = scBase | scOutput           // set, switch, next, succeed, fail
	scHandler = scBase | scOutput | scError // catch and retry.when
)

// scopeNames maps each environment name to the scope bit that grants it
// and to the hint given where it is not granted.
var scopeNames = []struct {
	name string
	bit  scope
	hint string
}{
	{"input", scInput, ""},
	{"vars", scVars, "vars are readable once the run has started, not in the initial vars"},
	{"steps", scSteps, "steps are readable once the run has started, not in the initial vars"},
	{"output", scOutput, "output is readable after the step ran: in set, switch, next, succeed, fail, retry.when and catch"},
	{"error", scError, "error is readable only in catch rules, retry.when, on_error and finally"},
	{"run", scRun, ""},
	{"item", scItem, "item and index exist only in a foreach's with and in a map's steps"},
	{"index", scItem, "item and index exist only in a foreach's with and in a map's steps"},
	{"secrets", scSecrets, "read secrets only inside an action's with, so they are never stored"},
}

// exprEnv is the environment expressions run in: a map from each name
// of the environment to its value. A map rather than a struct because expr
// compiles a map environment's names to plain constant loads, while a
// struct's names cost a reflective fmt.Sprintf per reference at compile
// time (about 5 % of a 1,000-step load). The loader checks scope on the AST
// afterwards, so its messages can say why a name is not available; at run
// time every name is filled from Env.
type exprEnv = map[string]any

// exprEnvTypes gives the checker the type of every name, by a value of
// it; untypedNames have no fixed type (any). Keep both in step with
// Env.exprEnv.
var exprEnvTypes = map[string]any{
	"input":    nil,
	"vars":     map[string]any{},
	"steps":    map[string]StepState{},
	"output":   nil,
	"error":    ErrorInfo{},
	"run":      RunInfo{},
	"item":     nil,
	"index":    0,
	"secrets":  map[string]string{},
	"now":      func() (time.Time, error) { return time.Time{}, nil },
	"uuid":     func() (string, error) { return "", nil },
	"duration": parseDurationFn,
	"raw":      rawFn,
}

var untypedNames = []string{"input", "output", "item"}

// newExprConfig returns expr's configuration for the environment. It is
// built once per load: it holds caches that are not safe for concurrent use.
func newExprConfig() *conf.Config {
	cfg := conf.CreateNew()
	expr.Env(exprEnvTypes)(cfg)
	anyType := reflect.TypeFor[any]()
	for _, name := range untypedNames {
		cfg.Env.Fields[name] = cfg.NtCache.FromType(anyType)
	}
	cfg.Check()
	return cfg
}

func parseDurationFn(s string) (time.Duration, error) { return duration.Parse(s) }

func (env *Env) exprEnv() exprEnv {
	vars, steps, secrets := env.Vars, env.Steps, env.Secrets
	if vars == nil {
		vars = map[string]any{}
	}
	if steps == nil {
		steps = map[string]StepState{}
	}
	if secrets == nil {
		secrets = map[string]string{}
	}
	var errInfo ErrorInfo
	if env.Error != nil {
		errInfo = *env.Error
	}
	now, id := env.Now, env.UUID
	return exprEnv{
		"input": env.Input, "vars": vars, "steps": steps, "output": env.Output,
		"error": errInfo, "run": env.Run, "item": env.Item, "index": env.Index,
		"secrets": secrets, "duration": parseDurationFn, "raw": rawFn,
		"now": func() (time.Time, error) {
			if now == nil {
				return time.Time{}, errors.New("now() is not available: Env.Now is not set")
			}
			return now(), nil
		},
		"uuid": func() (string, error) {
			if id == nil {
				return "", errors.New("uuid() is not available: Env.UUID is not set")
			}
			return id(), nil
		},
	}
}

// Expr is a compiled expression with the place it was written.
type Expr struct {
	Source string // the expression text, without ${ }
	Pos    Pos
	prog   *vm.Program
}

// Eval runs the expression against env.
func (e *Expr) Eval(env *Env) (any, error) {
	return e.eval(env.exprEnv())
}

func (e *Expr) eval(m exprEnv) (any, error) {
	v, err := expr.Run(e.prog, m)
	if err != nil {
		return nil, &evalError{Pos: e.Pos, Source: e.Source, Err: err}
	}
	return v, nil
}

// EvalBool runs the expression and requires a boolean result.
func (e *Expr) EvalBool(env *Env) (bool, error) {
	v, err := e.Eval(env)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, &evalError{Pos: e.Pos, Source: e.Source, Err: fmt.Errorf("want true or false, got %T", v)}
	}
	return b, nil
}

// nameRef is a literal steps.<id>, secrets.<name> or vars.<name>
// reference in an expression.
type nameRef struct {
	root string // "steps", "secrets" or "vars"
	name string
}

// refVisitor collects the environment names an expression reads (bit i
// set: scopeNames[i]) and its literal member references.
type refVisitor struct {
	idents uint16
	refs   []nameRef
	// timeText is the first operand a time or duration meets with a value
	// whose type is known only at run time (timeTextOp the operator).
	timeText, timeTextOp string
}

var (
	timeType     = reflect.TypeOf(time.Time{})
	durationType = reflect.TypeOf(time.Duration(0))
)

// timeLike reports a time or a duration as expr's checker types it.
func timeLike(t reflect.Type) bool { return t == timeType || t == durationType }

// dynamic reports an operand whose type is known only at run time: what
// variables, inputs and outputs hold, where times and durations are text.
func dynamic(t reflect.Type) bool { return t == nil || t.Kind() == reflect.Interface }

func (v *refVisitor) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.BinaryNode:
		switch x.Operator {
		case "+", "-", "<", ">", "<=", ">=", "==", "!=":
			if v.timeText != "" {
				break
			}
			if timeLike(x.Left.Type()) && dynamic(x.Right.Type()) {
				v.timeText, v.timeTextOp = x.Right.String(), x.Operator
			} else if timeLike(x.Right.Type()) && dynamic(x.Left.Type()) {
				v.timeText, v.timeTextOp = x.Left.String(), x.Operator
			}
		}
	case *ast.IdentifierNode:
		for i, sn := range scopeNames {
			if sn.name == x.Value {
				v.idents |= 1 << i
			}
		}
	case *ast.MemberNode:
		if id, ok := x.Node.(*ast.IdentifierNode); ok && (id.Value == "steps" || id.Value == "secrets" || id.Value == "vars") {
			if s, ok := x.Property.(*ast.StringNode); ok {
				v.refs = append(v.refs, nameRef{id.Value, s.Value})
			}
		}
	}
}

// compiled is the cached result of compiling one source.
type compiled struct {
	prog   *vm.Program
	idents uint16 // environment names read, as in refVisitor
	refs   []nameRef
	// timeText and timeTextOp are refVisitor's.
	timeText, timeTextOp string
	err                  error
}

// exprCompiler compiles expressions for one load, caching by source. It
// builds expr's configuration once per load instead of once per
// expression (expr.Compile rebuilds its builtin table on every call); the
// configuration holds caches, so it is never shared between loads.
type exprCompiler struct {
	cache  map[string]*compiled
	config *conf.Config
}

// compileProgramSafe is compileProgram with expr's own panics, should an
// odd input trigger one, turned into a compile error for that expression.
func (c *exprCompiler) compileProgramSafe(src string) (prog *vm.Program, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.config = nil // its caches may be half-updated
			prog, err = nil, fmt.Errorf("the expression compiler failed: %v", r)
		}
	}()
	return c.compileProgram(src)
}

// maxExprNesting bounds how deep brackets nest in one expression. expr's
// parser recurses once per level and counts parentheses toward none of its
// limits, so half a million of them in a 1 MiB file overflow the goroutine
// stack: a fatal error, not a panic that compileProgramSafe could recover.
const maxExprNesting = 256

// checkNesting rejects a source whose (, [ and { nest deeper than
// maxExprNesting, counted on expr's own tokens so brackets inside string
// literals do not count. A source that does not lex is left to the parser,
// which reports it.
func checkNesting(src string) error {
	source := file.NewSource(src)
	l := lexer.New()
	l.Reset(source)
	depth := 0
	for {
		t, err := l.Next()
		if err != nil {
			return nil // io.EOF, or a lexing error the parser reports
		}
		if t.Kind != lexer.Bracket {
			continue
		}
		switch t.Value {
		case "(", "[", "{":
			if depth++; depth > maxExprNesting {
				e := &file.Error{Location: t.Location, Message: fmt.Sprintf("brackets nest deeper than %d levels; split the expression into vars or set steps", maxExprNesting)}
				return e.Bind(source)
			}
		default:
			depth--
		}
	}
}

func (c *exprCompiler) compileProgram(src string) (*vm.Program, error) {
	if c.config == nil {
		c.config = newExprConfig()
	}
	if err := checkNesting(src); err != nil {
		return nil, err
	}
	tree, err := checker.ParseCheck(src, c.config)
	if err != nil {
		return nil, err
	}
	if err := optimizer.Optimize(&tree.Node, c.config); err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			return nil, fe.Bind(tree.Source)
		}
		return nil, err
	}
	return compiler.Compile(tree, c.config)
}

func (c *exprCompiler) compile(src string) *compiled {
	if r, ok := c.cache[src]; ok {
		return r
	}
	r := c.compileOne(src)
	if c.cache == nil {
		c.cache = map[string]*compiled{}
	}
	c.cache[src] = r
	return r
}

// compileOne compiles src without consulting or filling the cache.
func (c *exprCompiler) compileOne(src string) *compiled {
	r := &compiled{}
	prog, err := c.compileProgramSafe(src)
	if err != nil {
		r.err = err
	} else {
		r.prog = prog
		v := &refVisitor{}
		root := prog.Node()
		ast.Walk(&root, v)
		r.idents, r.refs, r.timeText, r.timeTextOp = v.idents, v.refs, v.timeText, v.timeTextOp
	}
	return r
}

// Template is a compiled value: a literal, a string with ${ } pieces, or a
// map or list of templates. A string that is exactly one ${ expr } keeps
// the expression's type; otherwise pieces are rendered as text (maps and
// lists as JSON, null as the empty string).
type Template struct {
	Pos  Pos
	root tnode
}

// Eval renders the template against env.
func (t *Template) Eval(env *Env) (any, error) {
	if t == nil {
		return nil, nil
	}
	if lit, ok := t.root.(tLiteral); ok {
		return cloneValue(lit.v), nil
	}
	return t.root.eval(env.exprEnv())
}

// cloneValue deep-copies maps and lists, so callers may modify what a
// template returns without changing the shared, immutable workflow.
func cloneValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneValue(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = cloneValue(e)
		}
		return l
	}
	return v
}

// Static returns the template's value when it contains no expression.
func (t *Template) Static() (any, bool) {
	if t == nil {
		return nil, true
	}
	lit, ok := t.root.(tLiteral)
	if !ok {
		return nil, false
	}
	return cloneValue(lit.v), true
}

// Exprs returns the expressions inside the template, in order.
func (t *Template) Exprs() []*Expr {
	var out []*Expr
	if t != nil {
		t.root.exprs(&out)
	}
	return out
}

type tnode interface {
	eval(m exprEnv) (any, error)
	exprs(out *[]*Expr)
}

type tLiteral struct{ v any }

func (l tLiteral) eval(exprEnv) (any, error) { return cloneValue(l.v), nil }
func (tLiteral) exprs(*[]*Expr)              {}

type tWhole struct{ e *Expr }

func (w tWhole) eval(m exprEnv) (any, error) { return w.e.eval(m) }
func (w tWhole) exprs(out *[]*Expr)          { *out = append(*out, w.e) }

type tPart struct {
	text string
	e    *Expr
}

type tConcat struct{ parts []tPart }

func (c tConcat) eval(m exprEnv) (any, error) {
	var sb strings.Builder
	for _, p := range c.parts {
		if p.e == nil {
			sb.WriteString(p.text)
			continue
		}
		v, err := p.e.eval(m)
		if err != nil {
			return nil, err
		}
		s, err := Stringify(v)
		if err != nil {
			return nil, &evalError{Pos: p.e.Pos, Source: p.e.Source, Err: err}
		}
		sb.WriteString(s)
	}
	return sb.String(), nil
}

func (c tConcat) exprs(out *[]*Expr) {
	for _, p := range c.parts {
		if p.e != nil {
			*out = append(*out, p.e)
		}
	}
}

type tMap struct {
	keys []string
	vals []tnode
}

func (t tMap) eval(m exprEnv) (any, error) {
	out := make(map[string]any, len(t.keys))
	for i, k := range t.keys {
		v, err := t.vals[i].eval(m)
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

func (t tMap) exprs(out *[]*Expr) {
	for _, v := range t.vals {
		v.exprs(out)
	}
}

type tList struct{ items []tnode }

func (t tList) eval(m exprEnv) (any, error) {
	out := make([]any, len(t.items))
	for i, it := range t.items {
		v, err := it.eval(m)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (t tList) exprs(out *[]*Expr) {
	for _, it := range t.items {
		it.exprs(out)
	}
}

// Stringify renders a value the way templates embed it in text: strings
// as they are, null as "", numbers in their shortest form, times in RFC
// 3339, durations in the DSL's notation, maps and lists as JSON.
func Stringify(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	case time.Duration:
		return duration.Format(x), nil
	case fmt.Stringer:
		return x.String(), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("cannot render %T as text: %w", v, err)
	}
	return string(b), nil
}

// splitTemplate cuts s into text and ${ } pieces. "$${" is a literal "${".
// It returns an error for an unterminated ${.
func splitTemplate(s string) (parts []tPart, srcs []string, err error) {
	var text strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			text.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			text.WriteByte(s[i])
			i++
			continue
		}
		end := matchBrace(s, i+2)
		if end < 0 {
			return nil, nil, fmt.Errorf("unterminated ${ at offset %d: close it with }", i)
		}
		if text.Len() > 0 {
			parts = append(parts, tPart{text: text.String()})
			text.Reset()
		}
		src := strings.TrimSpace(s[i+2 : end])
		if src == "" {
			return nil, nil, fmt.Errorf("empty ${ } at offset %d", i)
		}
		parts = append(parts, tPart{text: src, e: &Expr{}})
		srcs = append(srcs, src)
		i = end + 1
	}
	if text.Len() > 0 {
		parts = append(parts, tPart{text: text.String()})
	}
	return parts, srcs, nil
}

// matchBrace returns the index of the } closing a ${ whose body starts at
// i, skipping braces inside string literals and nested { }.
func matchBrace(s string, i int) int {
	depth := 1
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\'', '`':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' && c != '`' {
					i++
				}
			}
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// CompileExpr compiles a standalone expression (no ${ }) that may read
// every name of the environment, secrets included. Tools such as
// `tqw-dsl eval` use it; workflows are compiled by Parse.
func CompileExpr(src string) (*Expr, error) {
	var c exprCompiler
	r := c.compile(strings.TrimSpace(src))
	if r.err != nil {
		return nil, fmt.Errorf("expression %q: %s", src, exprMessage(r.err))
	}
	return &Expr{Source: strings.TrimSpace(src), Pos: Pos{1, 1}, prog: r.prog}, nil
}

// CompileTemplate compiles a standalone template string that may read
// every name of the environment, secrets included.
func CompileTemplate(s string) (*Template, error) {
	b := &builder{sink: &diagSink{file: "template"}, anySecret: true, exprs: &exprCompiler{}}
	t := b.template(&node{kind: kString, pos: Pos{1, 1}, scalar: s, size: 1}, ^scope(0), -1)
	if errs := b.sink.diags.Errors(); len(errs) > 0 {
		return nil, errors.New(errs[0].Message)
	}
	return t, nil
}
