package interpreter

import (
	"context"
	"errors"
	"time"

	"github.com/tqw-dsl/tqw/dsl/duration"
	"github.com/tqw-dsl/tqw/runtime"
)

// The run deadline (the workflow's top-level timeout). It is fixed once,
// at the run's first step, from the run's submission time (the runtime's
// durable run record), and rides in the state, so neither a crash nor a
// restart nor a redelivery moves it. Past it the current step is
// cancelled, whatever it does: an action's context ends at the deadline,
// a sleep, wait_signal or call is scheduled to wake at it at the latest
// (Capped), and a step delivered after it does not run. The run then
// fails with dsl.TypeRunTimeout, which retry and catch never see.

// errRunDeadline is the cause of a step context ended by the deadline.
var errRunDeadline = errors.New("interpreter: the run's deadline passed")

// fixDeadline sets the run's deadline at its first step. A child run
// that executes a block of its parent's definition (a parallel branch, a
// map item) has none of its own: its parent's deadline cancels it.
func (x *exec) fixDeadline() {
	if x.wf.Timeout > 0 && x.st.RunDeadline == 0 && x.st.Block == "" && x.st.End == nil {
		submitted := x.rs.Submitted
		if submitted.IsZero() {
			submitted = x.start // a runtime that does not say: the first step
		}
		x.st.RunDeadline = submitted.Add(x.wf.Timeout).UnixMilli()
	}
}

// deadline is when the current step's block must have ended (the run's
// deadline, or a handler block's own); zero when never.
func (st *state) deadline() time.Time {
	ms := st.RunDeadline
	if st.End != nil {
		ms = st.HandlerDeadline // handlers run past the run's deadline
	}
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// bound caps ctx at the current block's deadline, with errRunDeadline as
// the cause, so an action's own timeout and the run's tell apart.
func (x *exec) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	dl := x.st.deadline()
	if dl.IsZero() {
		return ctx, func() {}
	}
	// Relative to the interpreter's clock, as a step's own timeout is.
	return context.WithTimeoutCause(ctx, dl.Sub(x.it.now()), errRunDeadline)
}

// pastDeadline reports whether ctx ended because the deadline passed.
func pastDeadline(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errRunDeadline)
}

// capWait returns the wait d cut at the current block's deadline, and
// records in next whether it was cut.
func (x *exec) capWait(next *state, d time.Duration) time.Duration {
	next.Capped = false
	dl := x.st.deadline()
	if dl.IsZero() {
		return d
	}
	if left := max(dl.Sub(x.it.now()), 0); d >= left {
		next.Capped = true
		return left
	}
	return d
}

// expired reports whether the current step starts past its block's
// deadline: the clock says so, or the wait it wakes from was cut at the
// deadline and its timer (not a signal) woke it.
func (x *exec) expired() bool {
	dl := x.st.deadline()
	if dl.IsZero() {
		return false
	}
	if x.st.Capped {
		switch x.st.Phase {
		case phaseSignal, phaseCall:
			if x.rs.Signal == nil {
				return true
			}
		default:
			return true
		}
	}
	return !x.it.now().Before(dl)
}

// deadlinePassed ends the current step at the deadline: the wait it was
// in is abandoned (its wait record dropped, its child run cancelled) and
// the run fails with run.timeout.
func (x *exec) deadlinePassed(ctx context.Context) (runtime.StepOutcome, error) {
	if err := x.abandonWait(ctx); err != nil {
		return runtime.StepOutcome{}, err
	}
	if x.st.End != nil {
		return x.failRun(newStepErr(TypeRunTimeout, "the %s handler did not end within %s", x.st.Block, duration.Format(HandlerTimeout)))
	}
	e := newStepErr(TypeRunTimeout, "the run did not end within its timeout of %s (deadline %s)",
		duration.Format(x.wf.Timeout), x.st.deadline().UTC().Format(time.RFC3339))
	return x.failRun(e)
}
