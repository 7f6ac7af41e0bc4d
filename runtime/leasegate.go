package runtime

import (
	"context"
	"errors"
	"fmt"
)

// AwaitLease blocks until the lease gate of Options.LeaseGate is valid for
// its margin, as the worker does before it starts a step, so a component
// that applies changes for other processes (the inbox of runtime/remote)
// applies none while the writer lease is not valid. It returns nil at once
// without a gate, and an error wrapping lease.ErrLost once the lease is
// lost for good (or ctx's error). It makes no request.
func (rt *Runtime) AwaitLease(ctx context.Context) error {
	if rt.cfg.gate == nil {
		return nil
	}
	if err := rt.cfg.gate.AwaitValid(ctx, rt.cfg.gateMargin); err != nil {
		return &gateError{err: err}
	}
	return nil
}

// leaseLost returns the error of a lost lease gate.
func (rt *Runtime) leaseLost(ctx context.Context) error {
	err := rt.cfg.gate.AwaitValid(ctx, 0)
	if err == nil {
		err = errors.New("the lease gate reported its lease lost")
	}
	return &gateError{err: err}
}

// gateError is a step or command left alone because the writer lease was
// not valid: lost, or the wait for it was cancelled.
type gateError struct{ err error }

func (e *gateError) Error() string { return fmt.Sprintf("runtime: writer lease: %v", e.err) }
func (e *gateError) Unwrap() error { return e.err }
