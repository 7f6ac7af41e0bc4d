package queue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

func TestWorkConcurrencyAndDrain(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.DefaultConfig.LeaseDuration = time.Hour })
	ctx := ctxT(t)
	const jobs, conc = 12, 3
	for i := range jobs {
		f.enqueue("q", fmt.Sprint(i), EnqueueOptions{})
	}
	var running, peak atomic.Int32
	started := make(chan *Claim, jobs)
	release := make(chan struct{})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.q.Work(wctx, "q", WorkerOptions{Concurrency: conc}, func(ctx context.Context, c *Claim) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			started <- c
			<-release
			running.Add(-1)
			if c.Job.Payload[0] == '1' {
				return errors.New("fails") // nacked by Work
			}
			return nil // acked by Work
		})
	}()
	// Exactly conc handlers start; no more while they block.
	for range conc {
		<-started
	}
	if s := f.stats("q"); s.Claimed != conc {
		t.Fatalf("claimed %d, want %d", s.Claimed, conc)
	}
	// Stop claiming, then let the in-flight handlers finish: Work drains them.
	stop()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Work: %v", err)
	}
	if p := peak.Load(); p != conc {
		t.Fatalf("peak concurrency %d, want %d", p, conc)
	}
	// Jobs 0, 1, 2 ran: 1 failed (scheduled for retry), 0 and 2 were acked;
	// nothing was claimed after the stop.
	f.wantStats("q", Stats{Pending: jobs - conc, Scheduled: 1})
}

func TestWorkShutdownTimeout(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	f.enqueue("q", "stuck", EnqueueOptions{})
	wctx, stop := context.WithCancel(ctx)
	started := make(chan struct{})
	handlerErr := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- f.q.Work(wctx, "q", WorkerOptions{ShutdownTimeout: time.Minute}, func(ctx context.Context, c *Claim) error {
			close(started)
			<-ctx.Done()
			handlerErr <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	<-started
	timers := f.clock.Timers()
	stop()
	// Work arms its shutdown timer on the queue's clock; then time runs out.
	if err := f.clock.WaitForTimers(ctx, timers+1); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	if err := <-done; !errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Work: %v, want ErrShutdownTimeout", err)
	}
	if err := <-handlerErr; !errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("handler context cause %v", err)
	}
}

func TestWorkCancelReachesHandlerContext(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	id := f.enqueue("q", "x", EnqueueOptions{})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.q.Work(wctx, "q", WorkerOptions{}, func(ctx context.Context, c *Claim) error {
			close(started)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrCancelRequested) {
				return fmt.Errorf("unexpected cause %v", context.Cause(ctx))
			}
			return context.Cause(ctx) // Work nacks: the cancel removes the job
		})
	}()
	<-started
	registered := make(chan string, 1)
	hook := func(id string) { registered <- id }
	f.q.waitHook.Store(&hook)
	final := make(chan Job, 1)
	go func() {
		j, err := f.q.WaitForCompletion(ctx, id)
		if err != nil {
			t.Error(err)
		}
		final <- j
	}()
	<-registered
	if res, err := f.q.Cancel(ctx, id, &SettlementEffects{KVPuts: []KVWrite{{"cancelled", nil}}}); err != nil || res != CancelRequested {
		t.Fatal(res, err)
	}
	if j := <-final; j.State != StateCancelled {
		t.Fatalf("final state %s, want cancelled", j.State)
	}
	if _, ok := f.kvGet("cancelled"); !ok {
		t.Fatal("cancel effects not applied after the handler returned")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWorkRecoversPanics(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	id := f.enqueue("q", "x", EnqueueOptions{})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	handled := make(chan struct{}, 1)
	go func() {
		done <- f.q.Work(wctx, "q", WorkerOptions{}, func(ctx context.Context, c *Claim) error {
			defer func() { handled <- struct{}{} }()
			panic("boom")
		})
	}()
	<-handled
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j := f.job(id)
	if j.State != StateScheduled || j.LastError != "handler panicked: boom" {
		t.Fatalf("%+v", j)
	}
}

func TestWorkStopsWhenQueueCloses(t *testing.T) {
	f := newFixture(t, nil)
	done := make(chan error, 1)
	go func() {
		done <- f.q.Work(context.Background(), "q", WorkerOptions{Concurrency: 2}, func(ctx context.Context, c *Claim) error { return nil })
	}()
	if err := f.q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Work after Close: %v", err)
	}
	f.q = nil
}
