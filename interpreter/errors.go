package interpreter

import (
	"bytes"
	"context"
	"encoding/json"
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
	// TypeSignalRejected is the error type of an OutcomeSignalRejected record.
	TypeSignalRejected = "signal.rejected"
	// TypeRunTimeout is the error of a run past its deadline.
	TypeRunTimeout = dsl.TypeRunTimeout
	// TypeMapFailed is the error of a map step more of whose items failed
	// than it tolerates.
	TypeMapFailed = "map.failed"
	// TypeParallelFailed is the error of a parallel step a branch of which
	// failed; its message names each failed branch and its error.
	TypeParallelFailed = "parallel.failed"
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

// MaxInputSize bounds a run's input, measured as compact JSON: the input
// rides in every step's state, which the queue caps at 16 MiB with the
// variables beside it. Pass larger data by reference (a URL, an object
// key).
const MaxInputSize = 4 << 20

// ErrInputTooLarge is matched by the refusal of an input over
// MaxInputSize; it also matches dsl.ErrInputInvalid.
var ErrInputTooLarge = fmt.Errorf("%w: the input is too large", dsl.ErrInputInvalid)

// CheckInputJSON refuses a JSON input over MaxInputSize before anything
// decodes it; whitespace does not count.
func CheckInputJSON(raw []byte) error {
	if len(raw) <= MaxInputSize {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil // not JSON: the decoder says why
	}
	return checkInputLen(b.Len())
}

// checkInputSize refuses a decoded input whose compact JSON is over
// MaxInputSize.
func checkInputSize(input any) error {
	b, err := json.Marshal(input)
	if err != nil {
		return fmt.Errorf("%w: %v", dsl.ErrInputInvalid, err)
	}
	return checkInputLen(len(b))
}

func checkInputLen(n int) error {
	if n > MaxInputSize {
		return fmt.Errorf("%w: %.1f MiB of JSON; the limit is %d MiB (pass large data by reference: a URL or an object key)",
			ErrInputTooLarge, float64(n)/(1<<20), MaxInputSize>>20)
	}
	return nil
}
