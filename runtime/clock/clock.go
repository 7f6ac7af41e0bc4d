package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the stack's only source of time: every timestamp the queue
// writes on a job, every timer of its scheduler, reaper, sweeper and worker
// shutdown deadline, and the runtime's, lease's and interpreter's times
// come from the one Clock they are given.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed, as
	// time.AfterFunc does: a wake-up that needs no goroutine waiting.
	AfterFunc(d time.Duration, f func())
}

// Timer is a one-shot timer created by a Clock.
type Timer interface {
	// C returns the channel the fire time is delivered on (buffered, one value).
	C() <-chan time.Time
	// Stop prevents the timer from firing and discards an unreceived fire;
	// it reports whether the timer was armed.
	Stop() bool
	// Reset stops the timer, discards an unreceived fire and arms it again
	// to fire d after now.
	Reset(d time.Duration)
	// ResetAt is Reset to fire at t (at once if t is not after now): a
	// deadline read from the store stays exact even if the clock moves
	// between reading now and arming the timer.
	ResetAt(t time.Time)
}

// System returns the wall clock.
func System() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return &systemTimer{t: time.NewTimer(d)} }

func (systemClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

type systemTimer struct{ t *time.Timer }

func (t *systemTimer) C() <-chan time.Time   { return t.t.C }
func (t *systemTimer) Stop() bool            { return t.t.Stop() }
func (t *systemTimer) Reset(d time.Duration) { t.t.Reset(d) }
func (t *systemTimer) ResetAt(at time.Time)  { t.t.Reset(time.Until(at)) }

// Mock is a Clock that moves only when told to. Advance and Set fire
// every timer whose deadline has been reached, in deadline order. It is safe
// for concurrent use.
type Mock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*mockTimer]struct{} // armed timers
	changed chan struct{}           // closed and replaced when the armed set grows
}

// NewMock returns a Mock reading start.
func NewMock(start time.Time) *Mock {
	return &Mock{now: start, timers: map[*mockTimer]struct{}{}, changed: make(chan struct{})}
}

// Now returns the mock time.
func (c *Mock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the mock time reaches now+d; a
// timer with d <= 0 fires at once.
func (c *Mock) NewTimer(d time.Duration) Timer {
	t := &mockTimer{clock: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f in its own goroutine once the mock time reaches
// now+d (at once when d <= 0). It counts as an armed timer until then.
func (c *Mock) AfterFunc(d time.Duration, f func()) {
	t := &mockTimer{clock: c, ch: make(chan time.Time, 1), fn: f}
	t.Reset(d)
}

// Advance moves the mock time forward by d and fires the timers that are due.
func (c *Mock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.fireLocked()
	c.mu.Unlock()
}

// Set moves the mock time to t (forward or backward) and fires the timers
// that are due.
func (c *Mock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.fireLocked()
	c.mu.Unlock()
}

// WaitForTimers blocks until at least n timers are armed, so a test can know
// that the goroutines it wants to drive are waiting on the clock before it
// calls Advance. It returns ctx's error if ctx ends first.
func (c *Mock) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		armed, ch := len(c.timers), c.changed
		c.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Timers returns the number of armed timers.
func (c *Mock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func (c *Mock) fireLocked() {
	var due []*mockTimer
	for t := range c.timers {
		if !t.when.After(c.now) {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		delete(c.timers, t)
		t.fireLocked(c.now)
	}
}

// fireLocked delivers a fire at now: f's goroutine for an AfterFunc, else
// the time on C.
func (t *mockTimer) fireLocked(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.ch <- now:
	default: // an undrained earlier fire is still in C; like time.Timer, keep one
	}
}

// drain discards an unreceived fire, as time.Timer's Stop and Reset do since
// Go 1.23, so a reset timer never delivers a stale time.
func (t *mockTimer) drain() {
	select {
	case <-t.ch:
	default:
	}
}

type mockTimer struct {
	clock *Mock
	ch    chan time.Time
	when  time.Time
	fn    func() // set for AfterFunc
}

func (t *mockTimer) C() <-chan time.Time { return t.ch }

func (t *mockTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	_, armed := c.timers[t]
	delete(c.timers, t)
	t.drain()
	return armed
}

func (t *mockTimer) Reset(d time.Duration) {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	t.resetLocked(c.now.Add(d))
}

func (t *mockTimer) ResetAt(at time.Time) {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	t.resetLocked(at)
}

func (t *mockTimer) resetLocked(at time.Time) {
	c := t.clock
	t.when = at
	t.drain()
	if !at.After(c.now) {
		delete(c.timers, t)
		t.fireLocked(c.now)
		return
	}
	c.timers[t] = struct{}{}
	close(c.changed)
	c.changed = make(chan struct{})
}

// Sleep waits d on c: it returns nil once d has passed, or ctx's error
// when ctx ends first. Every wait of the stack between two attempts or
// two passes is a Sleep, so a test drives it with a Mock.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
