package dsl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Severity says whether a diagnostic makes a workflow invalid.
type Severity string

// Severities.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Diagnostic codes. They are stable: tools and tests match on them.
const (
	CodeFileTooLarge   = "file.too-large"
	CodeFileRead       = "file.read"
	CodeYAMLSyntax     = "yaml.syntax"
	CodeYAMLEmpty      = "yaml.empty"
	CodeYAMLMultiDoc   = "yaml.multi-document"
	CodeDuplicateKey   = "yaml.duplicate-key"
	CodeAliasBound     = "yaml.alias-bound"
	CodeTooDeep        = "yaml.too-deep"
	CodeMergeKey       = "yaml.merge-key"
	CodeKeyType        = "yaml.key-type"
	CodeSchemaType     = "schema.type"
	CodeSchemaRequired = "schema.required"
	CodeUnknownField   = "schema.unknown-field"
	CodeSchemaEnum     = "schema.enum"
	CodeSchemaOneOf    = "schema.one-of"
	CodeSchemaDuration = "schema.duration"
	CodeSchemaPattern  = "schema.pattern"
	CodeSchemaRange    = "schema.range"
	CodeSchemaInvalid  = "schema.invalid"
	CodeTooManySteps   = "workflow.too-many-steps"
	CodeDuplicateID    = "step.duplicate-id"
	CodeUnknownStep    = "step.unknown-ref"
	CodeUnreachable    = "step.unreachable"
	CodeStepConflict   = "step.conflict"
	CodeStepKey        = "step.key-not-allowed"
	CodeStepEmpty      = "step.empty"
	CodeUnknownAction  = "step.unknown-action"
	CodeWaitNoTimeout  = "step.wait-no-timeout"
	CodeWaitKeyLiteral = "step.wait-key-literal"
	CodeRecursiveCall  = "call.recursive"
	CodeForeachWait    = "foreach.wait-action"
	CodeOnTimeout      = "step.on-timeout"
	CodeDuration       = "duration.invalid"
	CodeExprCompile    = "expr.compile"
	CodeExprStep       = "expr.unknown-step"
	CodeExprNotRun     = "expr.step-not-run"
	CodeExprTimeText   = "expr.time-text"
	CodeSecretScope    = "secret.outside-with"
	CodeSecretUnknown  = "secret.undeclared"
	CodeErrorType      = "error.unknown-type"
	CodeWithSchema     = "with.invalid"
	CodeExprType       = "with.not-a-string"
	CodeInputSchema    = "input.schema"
	// CodeHTTPCacheMethod is an http step with cache for a method that
	// may change something (not GET or HEAD) its cache.methods does not list.
	CodeHTTPCacheMethod = "http.cache-method"
	CodeInternal        = "internal"

	// The shell script rules (docs/DSL.md, "Shell scripts and templates").

	// CodeShellUnsafe is a ${ } in a place of a shell script where no
	// value can be inserted safely (a quoted here-document, $'...',
	// arithmetic, ...).
	CodeShellUnsafe = "shell.unsafe-template"
	// CodeShellRawExternal (a warning) is raw() inserting data from the
	// run input, a step's output, an error, a foreach item or a variable
	// set from one of those into a script as code.
	CodeShellRawExternal = "shell.raw-external"
	// CodeShellRawMisplaced is raw() anywhere but as the whole ${ } of a
	// shell script.
	CodeShellRawMisplaced = "shell.raw-misplaced"
	// CodeShellReservedEnv is a shell step's env variable whose name
	// starts with TQW_ARG_ (shellArgPrefix).
	CodeShellReservedEnv = "shell.reserved-env"

	// CodeSetReadsAssigned is the warning for a value in a set that reads a
	// variable another key of the same set assigns. Every value of a set reads
	// the variables as they were before the set (YAML mappings have no order),
	// so it sees the old value, which the author may not expect.
	CodeSetReadsAssigned = "set.reads-assigned"

	// CodeLabelInvalid is a labels: key or literal value the run label
	// rules refuse (runstate.ValidateLabels), the reserved key workflow,
	// or more labels than a run may carry.
	CodeLabelInvalid = "labels.invalid"
	// CodeLabelScope is a labels: template reading what a run does not
	// have when it is submitted (vars, steps, output, ...).
	CodeLabelScope = "labels.scope"

	// CodeTargetOtherBlock is a next, switch, catch or on_timeout target
	// that names a step of another block (docs/DSL.md, Blocks).
	CodeTargetOtherBlock = "step.target-other-block"
	// CodeExprOtherBlock is steps.<id> read where that step's block never
	// runs before (a step inside a branch or map read from outside it).
	CodeExprOtherBlock = "expr.step-other-block"
	// CodeMapTolerance is a tolerated_failures percentage outside 0-100%.
	CodeMapTolerance = "map.tolerated-failures"
)

// Codes of the run deadline and handlers.
const (
	// CodeRunTimeout is a top-level timeout that is not positive.
	CodeRunTimeout = "workflow.timeout"
	// CodeErrorUncatchable is run.timeout named in retry.on or catch.on:
	// the run's deadline ends the run, no retry or catch sees it.
	CodeErrorUncatchable = "error.uncatchable"
)

// The errors of the package, each matched with errors.Is.
var (
	// ErrInvalid is matched (errors.Is) by the error Load and Parse return when
	// the workflow has error diagnostics.
	ErrInvalid = errors.New("invalid workflow")

	// ErrInputInvalid is matched by the error ValidateInput returns.
	ErrInputInvalid = errors.New("run input does not match the workflow's input schema")

	// ErrNotRegular is matched by ReadFile's error for a path that names a
	// FIFO, a device, a socket, a folder or a /proc or /sys entry.
	ErrNotRegular = errors.New("not a regular file")

	// ErrEval is matched (errors.Is) by every evaluation error; the
	// interpreter reports such errors with type "expression".
	ErrEval = errors.New("expression evaluation failed")
)

// Diagnostic is one problem found in a workflow file. Line and Col are
// where it starts; EndLine and EndCol where the YAML token there ends
// (exclusive). Lines count from 1, columns count Unicode code points from 1.
type Diagnostic struct {
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Col      int      `json:"col"`
	EndLine  int      `json:"end_line"`
	EndCol   int      `json:"end_col"`
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`
	Message  string   `json:"message"`
	Hint     string   `json:"hint,omitempty"`
}

// String renders d as "file:line:col: severity: message (code)" followed by
// an indented hint line when there is one.
func (d Diagnostic) String() string {
	s := fmt.Sprintf("%s:%d:%d: %s: %s [%s]", d.File, d.Line, d.Col, d.Severity, d.Message, d.Code)
	if d.Hint != "" {
		s += "\n\thint: " + d.Hint
	}
	return s
}

// Diagnostics is a list of diagnostics, sorted by position once loading ends.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (ds Diagnostics) HasErrors() bool {
	for _, d := range ds {
		if d.Severity == SeverityError {
			return true
		}
	}
	return false
}

// Errors returns only the error diagnostics.
func (ds Diagnostics) Errors() Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == SeverityError {
			out = append(out, d)
		}
	}
	return out
}

// String renders one diagnostic per line.
func (ds Diagnostics) String() string {
	var sb strings.Builder
	for _, d := range ds {
		sb.WriteString(d.String())
		sb.WriteByte('\n')
	}
	return sb.String()
}

func (ds Diagnostics) sort() {
	sort.SliceStable(ds, func(i, j int) bool {
		if ds[i].Line != ds[j].Line {
			return ds[i].Line < ds[j].Line
		}
		return ds[i].Col < ds[j].Col
	})
}

// InvalidError is the error Load and Parse return for an invalid workflow.
// Its message is the first error diagnostic, with the count of the rest.
type InvalidError struct {
	Diagnostics Diagnostics
}

// Error implements error.
func (e *InvalidError) Error() string {
	errs := e.Diagnostics.Errors()
	if len(errs) == 0 {
		return ErrInvalid.Error()
	}
	d := errs[0]
	s := fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Message)
	if len(errs) > 1 {
		s += fmt.Sprintf(" (and %d more errors)", len(errs)-1)
	}
	return s
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// diagSink collects diagnostics for one file.
type diagSink struct {
	file  string
	diags Diagnostics
}

func (s *diagSink) add(sev Severity, p Pos, code, hint, format string, args ...any) {
	line, col := p.Line, p.Col
	if line == 0 {
		line, col = 1, 1
	}
	s.diags = append(s.diags, Diagnostic{
		File: s.file, Line: line, Col: col, Severity: sev, Code: code,
		Message: fmt.Sprintf(format, args...), Hint: hint,
	})
}

func (s *diagSink) errorf(p Pos, code, hint, format string, args ...any) {
	s.add(SeverityError, p, code, hint, format, args...)
}

func (s *diagSink) warnf(p Pos, code, hint, format string, args ...any) {
	s.add(SeverityWarning, p, code, hint, format, args...)
}
