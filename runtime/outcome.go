package runtime

import (
	"errors"
	"fmt"
	"time"
)

// outcomeKind names what a step decided.
type outcomeKind uint8

// The four step verdicts.
const (
	// outcomeContinue enqueues the next step (see trigger).
	outcomeContinue outcomeKind = iota + 1
	// outcomeSucceed ends the run as Succeeded with a result.
	outcomeSucceed
	// outcomeFail ends the run as Failed with a reason; the step job is
	// acknowledged, not dead-lettered.
	outcomeFail
	// outcomeCancel ends the run as Cancelled with a reason; the step job
	// is acknowledged, not dead-lettered.
	outcomeCancel
)

// String returns the lower-case name of the kind.
func (k outcomeKind) String() string {
	switch k {
	case outcomeContinue:
		return "continue"
	case outcomeSucceed:
		return "succeed"
	case outcomeFail:
		return "fail"
	case outcomeCancel:
		return "cancel"
	}
	return fmt.Sprintf("outcomeKind(%d)", uint8(k))
}

// triggerKind names when a continued run's next step becomes claimable.
type triggerKind uint8

// The three triggers of outcomeContinue.
const (
	// triggerImmediate makes the next step claimable at once.
	triggerImmediate triggerKind = iota + 1
	// triggerAfter schedules the next step trigger.Delay from now.
	triggerAfter
	// triggerOnSignal parks the next step until a signal for
	// trigger.SignalKey arrives or trigger.Timeout elapses.
	triggerOnSignal
)

// String returns the lower-case name of the kind.
func (k triggerKind) String() string {
	switch k {
	case triggerImmediate:
		return "immediate"
	case triggerAfter:
		return "after"
	case triggerOnSignal:
		return "on_signal"
	}
	return fmt.Sprintf("triggerKind(%d)", uint8(k))
}

// trigger decides when the step after a Continue becomes claimable.
type trigger struct {
	Kind triggerKind
	// Delay is the wait of triggerAfter.
	Delay time.Duration
	// SignalKey is the correlation key of triggerOnSignal.
	SignalKey string
	// Timeout bounds the wait of triggerOnSignal; when it elapses first the
	// next step runs with Step.Signal == nil.
	Timeout time.Duration
}

// StepOutcome is what a StepRunner returns for a step: a Go value built with
// ContinueNow, ContinueAfter, ContinueOnSignal, Succeed, Fail or CancelRun
// (the zero value is invalid: the run fails as with a permanent step
// error). Its verdict and trigger are set by those constructors only; the
// runtime reads them.
type StepOutcome struct {
	kind outcomeKind
	// Payload is the next step's input (a Continue outcome). With Fail
	// or CancelRun it may be set to the state a Redrive resumes from
	// (default: the ending step's own input).
	Payload []byte
	// trigger is when the next step runs (a Continue outcome).
	trigger trigger
	// Result is the run's result (Succeed).
	Result []byte
	// Reason explains Fail and CancelRun.
	Reason string
}

// ContinueNow continues the run with payload as the next step's input, at once.
func ContinueNow(payload []byte) StepOutcome {
	return StepOutcome{kind: outcomeContinue, Payload: payload, trigger: trigger{Kind: triggerImmediate}}
}

// ContinueAfter continues the run with payload as the next step's input,
// claimable d from now (by the runtime's clock).
func ContinueAfter(payload []byte, d time.Duration) StepOutcome {
	return StepOutcome{kind: outcomeContinue, Payload: payload, trigger: trigger{Kind: triggerAfter, Delay: d}}
}

// ContinueOnSignal continues the run with payload as the next step's input
// once a signal for key arrives (Runtime.Signal), or after timeout with no
// signal. A signal already buffered under key is consumed at once.
func ContinueOnSignal(payload []byte, key string, timeout time.Duration) StepOutcome {
	return StepOutcome{kind: outcomeContinue, Payload: payload,
		trigger: trigger{Kind: triggerOnSignal, SignalKey: key, Timeout: timeout}}
}

// Succeed ends the run as Succeeded with result.
func Succeed(result []byte) StepOutcome { return StepOutcome{kind: outcomeSucceed, Result: result} }

// Fail ends the run as Failed. It is the runner's verdict: the step job is
// acknowledged, not dead-lettered (compare Permanent).
func Fail(reason string) StepOutcome { return StepOutcome{kind: outcomeFail, Reason: reason} }

// CancelRun ends the run as Cancelled; effects staged by the step are applied.
func CancelRun(reason string) StepOutcome { return StepOutcome{kind: outcomeCancel, Reason: reason} }

// validate reports an outcome the runtime cannot apply.
func (o StepOutcome) validate() error {
	switch o.kind {
	case outcomeSucceed, outcomeFail, outcomeCancel:
		return nil
	case outcomeContinue:
		switch o.trigger.Kind {
		case triggerImmediate:
			return nil
		case triggerAfter:
			if o.trigger.Delay < 0 {
				return fmt.Errorf("%w: ContinueAfter with negative delay %v", errInvalidOutcome, o.trigger.Delay)
			}
			return nil
		case triggerOnSignal:
			if err := validateSignalKey(o.trigger.SignalKey); err != nil {
				return fmt.Errorf("%w: ContinueOnSignal: %w", errInvalidOutcome, err)
			}
			if o.trigger.Timeout < 0 {
				return fmt.Errorf("%w: ContinueOnSignal with negative timeout %v", errInvalidOutcome, o.trigger.Timeout)
			}
			return nil
		}
		return fmt.Errorf("%w: Continue with unknown trigger %v", errInvalidOutcome, o.trigger.Kind)
	}
	return fmt.Errorf("%w: unknown outcome kind %v; build outcomes with ContinueNow, ContinueAfter, ContinueOnSignal, Succeed, Fail or CancelRun", errInvalidOutcome, o.kind)
}

// StepError is an infrastructure failure of a step (as opposed to the Fail
// verdict). Build it with Transient or Permanent; any other error a runner
// returns counts as transient.
type StepError struct {
	// Permanent dead-letters the step at once and fails the run; otherwise
	// the step is retried with the queue's backoff up to its maximum
	// attempts, then dead-lettered and the run failed.
	Permanent bool
	Err       error
}

// Error returns the wrapped error's message.
func (e *StepError) Error() string {
	if e.Err == nil {
		if e.Permanent {
			return "permanent step error"
		}
		return "transient step error"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *StepError) Unwrap() error { return e.Err }

// Transient marks err as retryable: the step is retried with backoff.
func Transient(err error) error { return &StepError{Err: err} }

// Permanent marks err as not retryable: the step is dead-lettered at once.
func Permanent(err error) error { return &StepError{Permanent: true, Err: err} }

// IsPermanent reports whether err carries a permanent StepError.
func IsPermanent(err error) bool {
	var se *StepError
	return errors.As(err, &se) && se.Permanent
}
