package actions

import (
	"context"
	"errors"
	"fmt"
)

// Error types the built-in actions produce. Workflows match them in
// `retry.on` and `catch.on`; custom actions may add their own, preferably
// prefixed with the action name ("myaction.something").
const (
	TypeTimeout          = "timeout"
	TypeHTTP4xx          = "http.status_4xx"
	TypeHTTP5xx          = "http.status_5xx"
	TypeHTTPConnection   = "http.connection"
	TypeLLMRateLimit     = "llm.rate_limit"
	TypeLLMInvalidOutput = "llm.invalid_output"
	TypeShellExit        = "shell.exit"
	TypeValidation       = "validation"
	TypeCancelled        = "cancelled"
)

// Error is a typed action error. The interpreter matches Type against
// `retry.on` and `catch.on`, exposes Type, Message and Status to `catch` as
// `error`, and retries only when Retryable is true (unless the workflow's
// retry policy says otherwise).
type Error struct {
	// Type classifies the failure, e.g. "http.status_5xx" (see the Type constants).
	Type string
	// Message says what went wrong, for people.
	Message string
	// Status is the HTTP status or the process exit code; 0 when neither applies.
	Status int
	// Retryable reports whether another attempt can succeed.
	Retryable bool
	// Output is the partial output an attempt produced before failing (a
	// response body, a process's stdout and stderr), so `catch` can inspect
	// it; nil when there is none. JSON-compatible like any output.
	Output any
	// Err is the underlying cause, if any.
	Err error
}

// Error returns "<type>: <message>".
func (e *Error) Error() string {
	return e.Type + ": " + e.Message
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// NewError returns an Error of type typ whose message is
// fmt.Sprintf(format, args...). A %w verb in format becomes the Error's Err,
// so errors.Is and errors.As see through it.
func NewError(typ string, retryable bool, format string, args ...any) *Error {
	wrapped := fmt.Errorf(format, args...)
	return &Error{Type: typ, Message: wrapped.Error(), Retryable: retryable, Err: errors.Unwrap(wrapped)}
}

// WithStatus sets e.Status and returns e, for chaining after NewError.
func (e *Error) WithStatus(status int) *Error {
	e.Status = status
	return e
}

// WithOutput sets e.Output and returns e, for chaining after NewError.
func (e *Error) WithOutput(output any) *Error {
	e.Output = output
	return e
}

// AsError returns the *Error in err's chain, if any.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// IsType reports whether err's chain holds an *Error of type typ.
func IsType(err error, typ string) bool {
	e, ok := AsError(err)
	return ok && e.Type == typ
}

// ContextError classifies a failure that happened because ctx is done: a
// passed deadline (the attempt's timeout) is a retryable "timeout", a
// cancellation is a non-retryable "cancelled". It returns nil while ctx is
// still live, so callers can write
//
//	if e := actions.ContextError(ctx, what); e != nil { return nil, e }
//
// after any failed operation. what names the operation for the message.
func ContextError(ctx context.Context, what string) *Error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return NewError(TypeTimeout, true, "%s: timed out: %w", what, err)
	default:
		cause := context.Cause(ctx)
		return NewError(TypeCancelled, false, "%s: cancelled: %w", what, cause)
	}
}
