package interpreter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
)

// Error types the interpreter raises itself, besides the actions' own.
const (
	TypeExpression    = "expression"
	TypeValidation    = "validation"
	TypeTimeout       = "timeout"
	TypeSignalTimeout = "signal.timeout"
	// TypeSignalKeyTaken: wait_signal's key has a waiter in another run.
	TypeSignalKeyTaken = "signal.key_taken"
	TypeCallFailed     = "call.failed"
	TypeCancelled      = "cancelled"
	// TypeUnexpected is an action failure that carries no type.
	TypeUnexpected = "custom.unexpected"
)

// stepErr is a failed attempt of a step, as retry and catch see it.
type stepErr struct {
	info   dsl.ErrorInfo
	output any // partial output, nil when none
}

func newStepErr(typ, format string, args ...any) *stepErr {
	return &stepErr{info: dsl.ErrorInfo{Type: typ, Message: fmt.Sprintf(format, args...), Retryable: dsl.RetryableByDefault(typ, 0)}}
}

func exprErr(err error) *stepErr {
	return &stepErr{info: dsl.ErrorInfo{Type: TypeExpression, Message: err.Error(), Retryable: dsl.RetryableByDefault(TypeExpression, 0)}}
}

// classify turns an action's error into a stepErr.
func classify(err error) *stepErr {
	if ae, ok := actions.AsError(err); ok {
		out, _ := plain(ae.Output)
		return &stepErr{info: dsl.ErrorInfo{Type: ae.Type, Message: ae.Message, Status: ae.Status, Retryable: ae.Retryable}, output: out}
	}
	if errors.Is(err, dsl.ErrEval) {
		return exprErr(err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return newStepErr(TypeTimeout, "%v", err)
	}
	return newStepErr(TypeUnexpected, "%v", err)
}
