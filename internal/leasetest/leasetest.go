// Package leasetest is a writer lease for tests: a lease.Gate that
// a test makes valid, invalid or lost at will, and that reports every
// wait. It imports nothing of the runtime, so the runtime's own internal
// tests can use it as well as the packages above it.
package leasetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/lease"
)

// Fake is a lease gate a test opens, closes and loses.
type Fake struct {
	mu      sync.Mutex
	valid   bool
	free    int // calls that pass while not valid
	asked   []time.Duration
	lostErr error
	lost    chan struct{}
	changed chan struct{}
	blocked chan struct{} // a value per call that blocks
}

// New returns a gate that starts valid or not.
func New(valid bool) *Fake {
	return &Fake{valid: valid, lost: make(chan struct{}), changed: make(chan struct{}), blocked: make(chan struct{}, 100)}
}

// AwaitValid returns once the gate is valid, with the lease's LostError
// once it is lost, or with the context's error.
func (f *Fake) AwaitValid(ctx context.Context, atLeast time.Duration) error {
	f.mu.Lock()
	f.asked = append(f.asked, atLeast)
	if f.free > 0 {
		f.free--
		f.mu.Unlock()
		return nil
	}
	f.mu.Unlock()
	for first := true; ; first = false {
		f.mu.Lock()
		if f.lostErr != nil {
			err := f.lostErr
			f.mu.Unlock()
			return err
		}
		if f.valid {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		if first {
			f.blocked <- struct{}{}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Lost is closed when the test loses the lease.
func (f *Fake) Lost() <-chan struct{} { return f.lost }

// Set makes the gate valid or not and wakes every waiter.
func (f *Fake) Set(valid bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.valid = valid
	close(f.changed)
	f.changed = make(chan struct{})
}

// PassNext lets the next n waits pass whatever the gate's state.
func (f *Fake) PassNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.free = n
}

// Lose loses the lease to another holder, for good.
func (f *Fake) Lose() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostErr = &lease.LostError{Where: "writer-lease", Holder: lease.Info{Owner: "other"}}
	close(f.lost)
	close(f.changed)
	f.changed = make(chan struct{})
}

// WaitBlocked returns once a wait blocked on the gate.
func (f *Fake) WaitBlocked(t testing.TB) {
	t.Helper()
	select {
	case <-f.blocked:
	case <-time.After(time.Minute):
		t.Fatal("nothing waited for the lease")
	}
}

// Margins returns the validity margin each wait asked for, in order.
func (f *Fake) Margins() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.asked...)
}
