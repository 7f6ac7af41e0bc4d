package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStopped is the cause with which Stop cancels a Loop's context, and
// what Start returns (wrapped) for a Loop that ended already.
var ErrStopped = errors.New("service: stopped")

// Service is a background goroutine with a lifecycle (see the package
// documentation).
type Service interface {
	// Start starts the service's goroutine and returns at once.
	Start(ctx context.Context) error
	// Stop stops the service and returns once its goroutine returned.
	Stop()
	// Stopped is closed once the service's goroutine returned.
	Stopped() <-chan struct{}
	// Err returns the error the service ended with, nil while it runs or
	// after a clean end.
	Err() error
}

type state int

const (
	idle state = iota
	running
	ended
)

// Loop is a Service running one function in its own goroutine.
type Loop struct {
	run func(ctx context.Context) error

	mu      sync.Mutex
	state   state
	cancel  context.CancelCauseFunc
	stopped chan struct{} // closed once run returned, or at a Stop before Start; made lazily for a zero Loop
	err     error
}

var _ Service = (*Loop)(nil)

// NewLoop returns a Loop that runs run when started. run returns when
// its context ends (nil then), or earlier with the error that ends the
// service by itself.
func NewLoop(run func(ctx context.Context) error) *Loop {
	return &Loop{run: run, stopped: make(chan struct{})}
}

// Start runs the Loop's function in a new goroutine, with a context that
// ends when ctx does or when Stop is called. It returns nil at once; on a
// running Loop it does nothing, and on one that ended (or was stopped
// before it started) it returns an error wrapping ErrStopped.
func (l *Loop) Start(ctx context.Context) error {
	if ctx == nil {
		return errors.New("service: Start needs a context")
	}
	if l.run == nil {
		return errors.New("service: the Loop has no function to run (make it with NewLoop)")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case running:
		return nil
	case ended:
		return fmt.Errorf("%w: a Loop runs once; make a new one", ErrStopped)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	l.state, l.cancel = running, cancel
	stopped := l.stoppedLocked()
	go func() {
		err := l.run(rctx)
		cancel(nil)
		l.mu.Lock()
		l.err, l.state = err, ended
		l.mu.Unlock()
		close(stopped)
	}()
	return nil
}

// Stop ends the Loop: it cancels the function's context (cause
// ErrStopped) and waits until the function returned. Before Start it
// ends the Loop without running it. It must not be called from the
// function itself.
func (l *Loop) Stop() {
	l.mu.Lock()
	stopped := l.stoppedLocked()
	switch l.state {
	case idle:
		l.state = ended
		close(stopped)
	case running:
		l.cancel(ErrStopped)
	}
	l.mu.Unlock()
	<-stopped
}

// Stopped is closed once the Loop's function returned, or at a Stop
// before Start. It can be taken at any time, also before Start.
func (l *Loop) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stoppedLocked()
}

// stoppedLocked returns the Stopped channel, made here for a zero Loop.
func (l *Loop) stoppedLocked() chan struct{} {
	if l.stopped == nil {
		l.stopped = make(chan struct{})
	}
	return l.stopped
}

// Err returns what the Loop's function returned once it did: nil after a
// clean end, the error that ended it by itself otherwise. It is nil while
// the Loop runs.
func (l *Loop) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
