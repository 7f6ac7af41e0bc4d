package dsl

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Kind is what a step does.
type Kind string

// Step kinds.
const (
	KindAction  Kind = "action"  // runs an action (action + with)
	KindForeach Kind = "foreach" // runs an action once per item
	KindCall    Kind = "call"    // runs a child workflow
	KindSucceed Kind = "succeed" // ends the run successfully
	KindFail    Kind = "fail"    // ends the run as failed
	KindSwitch  Kind = "switch"  // routes only (switch, optionally set and next)
	KindSet     Kind = "set"     // assigns variables only (set and/or next)
	// KindParallel runs its branches (blocks) at once, as child runs.
	KindParallel Kind = "parallel"
	// KindMap runs its block once per item, as durable child runs.
	KindMap Kind = "map"
)

// Workflow is a loaded, validated and compiled workflow file. It is
// immutable once Parse returns it and safe for concurrent use; callers must
// not modify its fields, slices or maps.
type Workflow struct {
	File        string // the file name given to Parse or Load
	Version     string // the language version, "v1"
	Name        string
	Description string
	Source      []byte // the exact bytes loaded
	Hash        string // hex SHA-256 of Source
	// InputSchema is the input JSON Schema as written (nil when absent).
	InputSchema any
	Secrets     []string  // declared secret names, as written
	Vars        *Template // initial variables (a map template), nil when none
	Defaults    Defaults
	Steps       []*Step // the top-level block's steps, in file order
	// OnError and Finally are the on_error and finally blocks (nil when
	// absent): parsed and checked here; running them is the interpreter's.
	OnError *Block
	Finally *Block
	// Timeout bounds the whole run from its submission (0: none); the
	// run's deadline is fixed once, durably, so no restart resets it.
	Timeout time.Duration

	input  *jsonschema.Schema
	index  map[string]int // step id -> position in all
	all    []*Step        // every step of every block
	blocks []*Block       // top level first, then in file order
}

// Block is a list of steps: the workflow's steps (Path ""), a parallel
// branch ("<step>/<branch>"), a map's steps ("<step>/item"), on_error
// ("on_error") or finally ("finally"). A block runs from its first step;
// next, switch, catch and on_timeout go to steps of the same block, and
// reaching its end (or succeed) ends it with the last output.
type Block struct {
	Path  string
	Steps []*Step
	// Owner is the parallel or map step the block belongs to; nil for the
	// top level, on_error and finally.
	Owner *Step
	pos   Pos
}

// Block returns the block with the given path, or nil.
func (w *Workflow) Block(path string) *Block {
	for _, b := range w.blocks {
		if b.Path == path {
			return b
		}
	}
	return nil
}

// Blocks returns every block: the top level first, then in file order.
func (w *Workflow) Blocks() []*Block { return w.blocks }

// Defaults are the settings steps inherit.
type Defaults struct {
	Timeout time.Duration
	Retry   *RetryPolicy
}

// Step returns the step with the given id, in any block, or nil.
func (w *Workflow) Step(id string) *Step {
	if i, ok := w.index[id]; ok {
		return w.all[i]
	}
	return nil
}

// Index returns the position of step id in its block.
func (w *Workflow) Index(id string) (int, bool) {
	if s := w.Step(id); s != nil {
		return s.Index, true
	}
	return 0, false
}

// Following returns the step after s in its block, or nil after the last
// one (where the block ends with the last output).
func (w *Workflow) Following(s *Step) *Step {
	if steps := s.blockSteps(w); s.Index+1 < len(steps) {
		return steps[s.Index+1]
	}
	return nil
}

// blockSteps are the steps of s's block (the top level's for a step
// built without one).
func (s *Step) blockSteps(w *Workflow) []*Step {
	if s.Block != nil {
		return s.Block.Steps
	}
	return w.Steps
}

// ValidateInput checks a run input (JSON-decoded: maps, slices, float64
// or json.Number, strings, bools, nil) against the workflow's input schema.
func (w *Workflow) ValidateInput(v any) error {
	if w.input == nil {
		return nil
	}
	if err := w.input.Validate(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInputInvalid, err)
	}
	return nil
}

// Step is one step of a workflow.
type Step struct {
	ID          string
	Description string
	Index       int
	Pos         Pos // where the step's map starts
	Kind        Kind
	// Action and With are set for KindAction.
	Action string
	With   *Template
	// Set assigns variables after the step, in the written order.
	Set    []Assignment
	Switch []Case
	// Next is the explicit next step (a step id or a template evaluating
	// to one); nil means the following step in the file.
	Next    *Template
	Foreach *Foreach  // KindForeach
	Call    *Call     // KindCall
	Succeed *Template // KindSucceed: the run's result
	Fail    *Template // KindFail: the failure message
	// Retry is the effective policy (the step's, else the defaults'); nil
	// means one attempt. Only action, foreach and call steps have one.
	Retry *RetryPolicy
	Catch []CatchRule
	// Timeout bounds one attempt (the step's, else the defaults'); 0 is none.
	// It is always 0 for wait_signal and sleep, whose with sets how long
	// they wait.
	Timeout time.Duration
	// OnTimeout is the step run when the step failed with timeout or
	// signal.timeout after its retries; "" when unset. Checked before Catch.
	OnTimeout string
	Parallel  *Parallel // KindParallel
	Map       *Map      // KindMap
	// Block is the block the step is in; Index is its position there.
	Block *Block

	ord int // position in Workflow.all
}

// Parallel runs its branches at once, each a block of its own.
type Parallel struct {
	Branches []Branch // in file order
	// FailFast (fail: fast, the default) cancels the other branches at the
	// first failure; fail: all waits for every branch, then fails with
	// parallel.failed when any failed.
	FailFast bool
}

// Branch is one branch of a parallel step; its block's path is
// "<step>/<Name>".
type Branch struct {
	Name  string
	Block *Block
}

// Map runs its block once per item of a list, at most Concurrency at once.
type Map struct {
	Items       *Template // evaluates to a list
	Concurrency int       // at least 1
	Block       *Block    // path "<step>/item"; its steps read item and index
	// tolerated failures: a count, or a percentage of the items when
	// percent is set.
	tolerated float64
	percent   bool
}

// MaxFailures is how many of total items may fail before the map step
// fails (tolerated_failures: a count, or "N%" of total rounded down).
func (m *Map) MaxFailures(total int) int {
	if m.percent {
		return int(math.Floor(m.tolerated * float64(total) / 100))
	}
	return int(m.tolerated)
}

// Assignment is one variable assigned by set.
type Assignment struct {
	Name  string
	Value *Template
}

// Case is one switch case.
type Case struct {
	Pos  Pos
	When *Expr
	Next *Template
}

// Foreach runs an action once per item.
type Foreach struct {
	Items       *Template // evaluates to a list
	Concurrency int       // at least 1
	Action      string
	With        *Template // may read item and index
}

// Call runs a child workflow.
type Call struct {
	// Workflow is the path as written; the interpreter resolves it relative
	// to the calling file and pins the child by content hash at submit.
	Workflow string
	Input    *Template
}

// CatchRule routes a run whose step failed after its retries.
type CatchRule struct {
	Pos  Pos
	On   []string // error types; empty matches every type except cancelled
	When *Expr    // nil: always
	// Set assigns variables when the rule matches, before going to Next;
	// it may read error, which later steps cannot.
	Set  []Assignment
	Next *Template
}

// MatchesType reports whether the rule's on list covers errType (the
// when condition is the caller's to evaluate).
func (r *CatchRule) MatchesType(errType string) bool {
	if len(r.On) == 0 {
		return errType != "cancelled"
	}
	return slices.Contains(r.On, errType)
}

// RetryPolicy says when and how often a failed attempt is re-run.
type RetryPolicy struct {
	MaxAttempts int           // total attempts including the first; at least 1
	Initial     time.Duration // delay before the second attempt
	Multiplier  float64       // delay growth per retry; at least 1
	MaxInterval time.Duration // cap on one delay
	Jitter      float64       // random spread as a fraction in [0, 1]
	On          []string      // error types to retry; empty means every retryable type
	When        *Expr         // nil: always
}

// Retry policy defaults for fields a policy leaves out.
const (
	defaultInitial     = time.Second
	defaultMultiplier  = 2.0
	defaultMaxInterval = 5 * time.Minute
)

// Retries reports whether the policy's on list covers the error e (the
// when condition is the caller's to evaluate). Without on it covers the
// errors their action marked retryable (e.Retryable), so a 404 is not
// retried but a 429 is.
func (p *RetryPolicy) Retries(e *ErrorInfo) bool {
	if len(p.On) == 0 {
		return e.Retryable
	}
	return slices.Contains(p.On, e.Type)
}

// RetriesType is Retries for a caller that knows only the error's type:
// without on it covers the types RetryableByDefault accepts with no status.
func (p *RetryPolicy) RetriesType(errType string) bool {
	if len(p.On) == 0 {
		return RetryableByDefault(errType, 0)
	}
	return slices.Contains(p.On, errType)
}

// RetryableByDefault reports whether the built-in actions and the
// interpreter mark an error of type errType (and HTTP status, 0 if none)
// retryable: timeout, http.status_5xx, http.connection, llm.rate_limit,
// memo, and http.status_4xx with status 408 or 429. An action may still
// judge one error otherwise (an http.connection whose TLS certificate was
// rejected is not retryable); ErrorInfo.Retryable carries its verdict.
func RetryableByDefault(errType string, status int) bool {
	switch errType {
	case "timeout", "http.status_5xx", "http.connection", "llm.rate_limit", "memo":
		return true
	case "http.status_4xx":
		return status == 408 || status == 429
	}
	return false
}

// Delay is the delay before attempt (2 for the first retry), before jitter:
// Initial × Multiplier^(attempt-2), capped at MaxInterval. A caller applying
// Jitter multiplies it by a factor drawn uniformly from [1-Jitter, 1+Jitter].
func (p *RetryPolicy) Delay(attempt int) time.Duration {
	if attempt < 2 {
		return 0
	}
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(attempt-2))
	if d > float64(p.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxInterval
	}
	return time.Duration(d)
}

// ErrorTypes are the built-in error types retry.on and catch.on accept:
// every type the built-in actions (package actions and its http, llm and
// shell packages) and the interpreter raise. Actions registered by an
// embedding program raise "custom.<name>" types.
var ErrorTypes = []string{
	"timeout", "http.status_4xx", "http.status_5xx", "http.connection",
	"http.response_too_large", "http.invalid_body", "http.unexpected_status",
	"llm.rate_limit", "llm.invalid_output", "memo", "shell.exit", "signal.timeout",
	"signal.key_taken", "call.failed", "expression", "validation", "cancelled",
	"parallel.failed", "map.failed",
}

var customErrorRE = regexp.MustCompile(`^custom\.[a-z0-9_]+(\.[a-z0-9_]+)*$`)

// isErrorType reports whether s is a built-in error type or a custom one
// ("custom." followed by dot-separated lower-case words).
// TypeRunTimeout is the error of a run that passed its deadline (the
// top-level timeout). It ends the run: retry and catch never see it, so
// retry.on and catch.on refuse it (error.uncatchable); on_error reads it.
const TypeRunTimeout = "run.timeout"

func isErrorType(s string) bool {
	return slices.Contains(ErrorTypes, s) || customErrorRE.MatchString(s)
}

// BuiltinActions are the actions every tqw process provides.
var BuiltinActions = []string{"http", "llm", "shell", "wait_signal", "sleep"}
