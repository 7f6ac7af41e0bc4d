package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(tm Timer) bool {
	select {
	case <-tm.C():
		return true
	default:
		return false
	}
}

// A deadline armed with ResetAt fires at the deadline even when the clock
// moved between computing it and arming the timer (the scheduler's race:
// Reset(deadline-now) with a stale now fires late).
func TestResetAtKeepsTheDeadline(t *testing.T) {
	c := NewMock(t0)
	tm := c.NewTimer(time.Hour)
	deadline := c.Now().Add(5 * time.Second)
	c.Advance(3 * time.Second) // the clock moves before the timer is armed
	tm.ResetAt(deadline)
	c.Advance(2*time.Second - 1)
	if fired(tm) {
		t.Fatal("fired a nanosecond early")
	}
	c.Advance(1)
	if !fired(tm) {
		t.Fatal("did not fire at the deadline")
	}
}

func TestResetAtPastFiresAtOnce(t *testing.T) {
	c := NewMock(t0)
	tm := c.NewTimer(time.Hour)
	tm.ResetAt(t0.Add(-time.Second))
	if !fired(tm) || c.Timers() != 0 {
		t.Fatalf("a past deadline: fired=false or %d timers armed", c.Timers())
	}
}

func TestResetRearmsAfterNow(t *testing.T) {
	c := NewMock(t0)
	tm := c.NewTimer(time.Second)
	c.Advance(500 * time.Millisecond)
	tm.Reset(time.Second) // from the new now
	c.Advance(999 * time.Millisecond)
	if fired(tm) {
		t.Fatal("Reset counted from the old now")
	}
	c.Advance(time.Millisecond)
	if !fired(tm) {
		t.Fatal("Reset did not fire")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported it armed")
	}
}

func TestSystemResetAt(t *testing.T) {
	tm := System().NewTimer(time.Hour)
	tm.ResetAt(time.Now().Add(-time.Second))
	select {
	case <-tm.C():
	case <-time.After(time.Minute):
		t.Fatal("a past deadline on the system clock did not fire")
	}
}

func TestSleepWaitsForTheClock(t *testing.T) {
	c := NewMock(t0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // failure guard only
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Sleep(ctx, c, time.Second) }()
	if err := c.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second - 1)
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before its time", err)
	default:
	}
	c.Advance(1)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v; want nil", err)
	}
	if c.Timers() != 0 {
		t.Fatalf("%d timers armed after Sleep returned", c.Timers())
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	c := NewMock(t0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, c, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v; want context.Canceled", err)
	}
	if c.Timers() != 0 {
		t.Fatalf("%d timers armed after Sleep returned", c.Timers())
	}
}

// Mock.AfterFunc calls its function once the mock time reaches the
// deadline, in its own goroutine, and not before; d <= 0 calls it at once.
func TestMockAfterFunc(t *testing.T) {
	c := NewMock(t0)
	called := make(chan string, 2)
	c.AfterFunc(time.Minute, func() { called <- "minute" })
	c.AfterFunc(0, func() { called <- "now" })
	if got := <-called; got != "now" {
		t.Fatalf("first call %q; want the one due now", got)
	}
	if c.Timers() != 1 {
		t.Fatalf("%d armed timers; want the minute's", c.Timers())
	}
	c.Advance(59 * time.Second)
	select {
	case got := <-called:
		t.Fatalf("%q called before its deadline", got)
	default:
	}
	c.Advance(time.Second)
	if got := <-called; got != "minute" {
		t.Fatalf("call %q; want the minute's", got)
	}
}
