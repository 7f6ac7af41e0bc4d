package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// guard bounds a test that would otherwise hang on a broken Loop; it is a
// failure guard only, never what a test waits for.
func guard(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// untilStopped runs until its context ends, counting its runs.
func untilStopped(runs *atomic.Int32) func(context.Context) error {
	return func(ctx context.Context) error {
		runs.Add(1)
		<-ctx.Done()
		return nil
	}
}

func TestStopEndsARunningLoop(t *testing.T) {
	var runs atomic.Int32
	var cause error
	l := NewLoop(func(ctx context.Context) error {
		runs.Add(1)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil
	})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	select {
	case <-l.Stopped():
	default:
		t.Fatal("Stopped is open after Stop returned")
	}
	if runs.Load() != 1 || !errors.Is(cause, ErrStopped) || l.Err() != nil {
		t.Fatalf("runs %d, cause %v, Err %v; want 1 run cancelled with ErrStopped and no error", runs.Load(), cause, l.Err())
	}
}

func TestStartTwiceRunsOnce(t *testing.T) {
	var runs atomic.Int32
	l := NewLoop(untilStopped(&runs))
	for range 3 {
		if err := l.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	l.Stop()
	if runs.Load() != 1 {
		t.Fatalf("%d runs; want 1", runs.Load())
	}
	if err := l.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v; want ErrStopped", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("Start after Stop ran the function again (%d runs)", runs.Load())
	}
}

func TestStopBeforeStart(t *testing.T) {
	var runs atomic.Int32
	l := NewLoop(untilStopped(&runs))
	stopped := l.Stopped() // taken before anything happened
	l.Stop()
	select {
	case <-stopped:
	default:
		t.Fatal("Stop before Start left Stopped open")
	}
	if err := l.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v; want ErrStopped", err)
	}
	if runs.Load() != 0 {
		t.Fatalf("a Loop stopped before Start ran %d times", runs.Load())
	}
}

func TestStopTwice(t *testing.T) {
	var runs atomic.Int32
	l := NewLoop(untilStopped(&runs))
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Stop()
	l.Stop()
	if runs.Load() != 1 || l.Err() != nil {
		t.Fatalf("runs %d, Err %v", runs.Load(), l.Err())
	}
}

// A Loop whose function fails ends by itself: Stopped closes without a
// Stop, Err says why, and a later Stop returns at once.
func TestFatalEndIsSeenThroughStopped(t *testing.T) {
	ctx := guard(t)
	fatal := errors.New("the store was fenced")
	fail := make(chan struct{})
	l := NewLoop(func(ctx context.Context) error {
		<-fail
		return fatal
	})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatalf("Err = %v while running; want nil", l.Err())
	}
	close(fail)
	select {
	case <-l.Stopped():
	case <-ctx.Done():
		t.Fatal("a Loop that failed did not close Stopped")
	}
	if !errors.Is(l.Err(), fatal) {
		t.Fatalf("Err = %v; want %v", l.Err(), fatal)
	}
	l.Stop()
	if !errors.Is(l.Err(), fatal) {
		t.Fatalf("Err after Stop = %v; want %v", l.Err(), fatal)
	}
}

func TestStartContextEndsTheLoop(t *testing.T) {
	g := guard(t)
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	l := NewLoop(untilStopped(&runs))
	if err := l.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-l.Stopped():
	case <-g.Done():
		t.Fatal("the Loop outlived its Start context")
	}
}

// Start and Stop from many goroutines at once: under -race this finds
// unsynchronised state; the function runs at most once, and after every
// Stop returned the Loop has ended.
func TestConcurrentStartStop(t *testing.T) {
	for range 50 {
		var runs atomic.Int32
		l := NewLoop(untilStopped(&runs))
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if i%2 == 0 {
					if err := l.Start(context.Background()); err != nil && !errors.Is(err, ErrStopped) {
						t.Error(err)
					}
					return
				}
				l.Stop()
				select {
				case <-l.Stopped():
				default:
					t.Error("Stop returned with Stopped open")
				}
			})
		}
		wg.Wait()
		l.Stop() // a Start may have come after the last Stop
		if n := runs.Load(); n > 1 {
			t.Fatalf("the function ran %d times", n)
		}
		select {
		case <-l.Stopped():
		default:
			t.Fatal("Stopped open after the last Stop")
		}
	}
}

func TestBadInput(t *testing.T) {
	var l Loop
	if err := l.Start(context.Background()); err == nil {
		t.Fatal("Start of a Loop without a function succeeded")
	}
	l.Stop() // a zero Loop stops like one never started
	select {
	case <-l.Stopped():
	default:
		t.Fatal("Stop of a zero Loop left Stopped open")
	}
	var nilCtx context.Context
	if err := NewLoop(func(context.Context) error { return nil }).Start(nilCtx); err == nil {
		t.Fatal("Start(nil) succeeded")
	}
}
