package runtime

import (
	"errors"
	"fmt"
	"time"
)

// OutcomeKind names what a step decided.
type OutcomeKind uint8

// The four step verdicts.
const (
	// OutcomeContinue enqueues the next step (see Trigger).
	OutcomeContinue OutcomeKind = iota + 1
	// OutcomeSucceed ends the run as Succeeded with a result.
	OutcomeSucceed
	// OutcomeFail ends the run as Failed with a reason; the step job is
	// acknowledged, not dead-lettered.
	OutcomeFail
	// OutcomeCancel ends the run as Cancelled with a reason; the step job
	// is acknowledged, not dead-lettered.
	OutcomeCancel
)

// String returns the lower-case name of the kind.
func (k OutcomeKind) String() string {
	switch k {
	case OutcomeContinue:
		return "continue"
	case OutcomeSucceed:
		return "succeed"
	case OutcomeFail:
		return "fail"
	case OutcomeCancel:
		return "cancel"
	}
	return fmt.Sprintf("OutcomeKind(%d)", uint8(k))
}

// TriggerKind names when a continued run's next step becomes claimable.
type TriggerKind uint8

// The three triggers of OutcomeContinue.
const (
	// TriggerImmediate makes the next step claimable at once.
	TriggerImmediate TriggerKind = iota + 1
	// TriggerAfter schedules the next step Trigger.Delay from now.
	TriggerAfter
	// TriggerOnSignal parks the next step until a signal for
	// Trigger.SignalKey arrives or Trigger.Timeout elapses.
	TriggerOnSignal
)

// String returns the lower-case name of the kind.
func (k TriggerKind) String() string {
	switch k {
	case TriggerImmediate:
		return "immediate"
	case TriggerAfter:
		return "after"
	case TriggerOnSignal:
		return "on_signal"
	}
	return fmt.Sprintf("TriggerKind(%d)", uint8(k))
}

// Trigger decides when the step after a Continue becomes claimable.
type Trigger struct {
	Kind TriggerKind
	// Delay is the wait of TriggerAfter.
	Delay time.Duration
	// SignalKey is the correlation key of TriggerOnSignal.
	SignalKey string
	// Timeout bounds the wait of TriggerOnSignal; when it elapses first the
	// next step runs with Step.Signal == nil.
	Timeout time.Duration
}

// StepOutcome is what a StepRunner returns for a step: a Go value built with
// ContinueNow, ContinueAfter, ContinueOnSignal, Succeed, Fail or CancelRun.
type StepOutcome struct {
	Kind OutcomeKind
	// Payload is the next step's input (OutcomeContinue).
	Payload []byte
	// Trigger is when the next step runs (OutcomeContinue).
	Trigger Trigger
	// Result is the run's result (OutcomeSucceed).
	Result []byte
	// Reason explains OutcomeFail and OutcomeCancel.
	Reason string
}

// ContinueNow continues the run with payload as the next step's input, at once.
func ContinueNow(payload []byte) StepOutcome {
	return StepOutcome{Kind: OutcomeContinue, Payload: payload, Trigger: Trigger{Kind: TriggerImmediate}}
}

// ContinueAfter continues the run with payload as the next step's input,
// claimable d from now (by the runtime's clock).
func ContinueAfter(payload []byte, d time.Duration) StepOutcome {
	return StepOutcome{Kind: OutcomeContinue, Payload: payload, Trigger: Trigger{Kind: TriggerAfter, Delay: d}}
}

// ContinueOnSignal continues the run with payload as the next step's input
// once a signal for key arrives (Runtime.Signal), or after timeout with no
// signal. A signal already buffered under key is consumed at once.
func ContinueOnSignal(payload []byte, key string, timeout time.Duration) StepOutcome {
	return StepOutcome{Kind: OutcomeContinue, Payload: payload,
		Trigger: Trigger{Kind: TriggerOnSignal, SignalKey: key, Timeout: timeout}}
}

// Succeed ends the run as Succeeded with result.
func Succeed(result []byte) StepOutcome { return StepOutcome{Kind: OutcomeSucceed, Result: result} }

// Fail ends the run as Failed. It is the runner's verdict: the step job is
// acknowledged, not dead-lettered (compare Permanent).
func Fail(reason string) StepOutcome { return StepOutcome{Kind: OutcomeFail, Reason: reason} }

// CancelRun ends the run as Cancelled; effects staged by the step are applied.
func CancelRun(reason string) StepOutcome { return StepOutcome{Kind: OutcomeCancel, Reason: reason} }

// validate reports an outcome the runtime cannot apply.
func (o StepOutcome) validate() error {
	switch o.Kind {
	case OutcomeSucceed, OutcomeFail, OutcomeCancel:
		return nil
	case OutcomeContinue:
		switch o.Trigger.Kind {
		case TriggerImmediate:
			return nil
		case TriggerAfter:
			if o.Trigger.Delay < 0 {
				return fmt.Errorf("%w: ContinueAfter with negative delay %v", ErrInvalidOutcome, o.Trigger.Delay)
			}
			return nil
		case TriggerOnSignal:
			if err := validateSignalKey(o.Trigger.SignalKey); err != nil {
				return fmt.Errorf("%w: ContinueOnSignal: %w", ErrInvalidOutcome, err)
			}
			if o.Trigger.Timeout < 0 {
				return fmt.Errorf("%w: ContinueOnSignal with negative timeout %v", ErrInvalidOutcome, o.Trigger.Timeout)
			}
			return nil
		}
		return fmt.Errorf("%w: Continue with unknown trigger %v", ErrInvalidOutcome, o.Trigger.Kind)
	}
	return fmt.Errorf("%w: unknown outcome kind %v; build outcomes with ContinueNow, ContinueAfter, ContinueOnSignal, Succeed, Fail or CancelRun", ErrInvalidOutcome, o.Kind)
}

// ErrorKind says how the runtime treats a failed step.
type ErrorKind uint8

const (
	// KindTransient retries the step with the queue's backoff up to its
	// maximum attempts, then dead-letters it and fails the run.
	KindTransient ErrorKind = iota + 1
	// KindPermanent dead-letters the step at once and fails the run.
	KindPermanent
)

// StepError is an infrastructure failure of a step (as opposed to the Fail
// verdict). Build it with Transient or Permanent; any other error a runner
// returns counts as transient.
type StepError struct {
	Kind ErrorKind
	Err  error
}

// Error returns the wrapped error's message.
func (e *StepError) Error() string {
	if e.Err == nil {
		if e.Kind == KindPermanent {
			return "permanent step error"
		}
		return "transient step error"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *StepError) Unwrap() error { return e.Err }

// Transient marks err as retryable: the step is retried with backoff.
func Transient(err error) error { return &StepError{Kind: KindTransient, Err: err} }

// Permanent marks err as not retryable: the step is dead-lettered at once.
func Permanent(err error) error { return &StepError{Kind: KindPermanent, Err: err} }

// IsPermanent reports whether err carries a permanent StepError.
func IsPermanent(err error) bool {
	var se *StepError
	return errors.As(err, &se) && se.Kind == KindPermanent
}
