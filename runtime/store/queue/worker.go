package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Handler processes one claim. It should settle c (Ack, Nack or
// DeadLetter). If it returns without settling, Work settles for it: an error
// nacks with the error's text, nil acks without effects. A panic is
// recovered and nacks. Its context is cancelled with cause
// ErrCancelRequested when Cancel is requested for the job, and with cause
// ErrShutdownTimeout when Work's shutdown deadline passes.
type Handler func(ctx context.Context, c *Claim) error

// WorkerOptions configure Work.
type WorkerOptions struct {
	// Concurrency is how many jobs are handled at once; default 1.
	Concurrency int
	// ShutdownTimeout bounds how long Work waits for in-flight handlers
	// once its context ends (measured on the queue's Clock); default 30s.
	ShutdownTimeout time.Duration
}

// Work claims jobs of queue and runs h on each, with at most
// opts.Concurrency in flight, until ctx ends; then it stops claiming and
// waits up to opts.ShutdownTimeout for the in-flight handlers. It returns
// nil after a clean drain, an ErrShutdownTimeout error when handlers were
// still running at the deadline (their claims stay leased and the reaper or
// the next Open requeues them), or the error that stopped claiming (for
// example ErrClosed, kv.ErrFenced, or kv.ErrStopped after a WAL write
// failed: then Work returns as soon as its handlers did, without waiting
// for new work).
func (q *Queue) Work(ctx context.Context, queue string, opts WorkerOptions, h Handler) error {
	if err := validName("queue name", queue); err != nil {
		return err
	}
	if h == nil {
		return invalidf("Work on queue %q: nil handler", queue)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	// Handlers outlive ctx (they drain); hardCtx ends them at the deadline.
	hardCtx, hardStop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardStop(nil)
	claimCtx, stopClaiming := context.WithCancelCause(ctx)
	defer stopClaiming(nil)

	var inFlight atomic.Int64
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := q.ClaimWait(claimCtx, queue)
				if err != nil {
					if claimCtx.Err() == nil {
						stopClaiming(err)
					}
					return
				}
				inFlight.Add(1)
				q.handle(hardCtx, c, h)
				inFlight.Add(-1)
			}
		}()
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()
	stopped := func() error {
		if cause := context.Cause(claimCtx); cause != nil && ctx.Err() == nil {
			return fmt.Errorf("queue: worker on %q stopped claiming: %w", queue, cause)
		}
		return nil
	}
	select {
	case <-allDone:
		return stopped()
	case <-claimCtx.Done():
	}
	timer := q.clock.NewTimer(opts.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-allDone:
		return stopped()
	case <-timer.C():
		hardStop(ErrShutdownTimeout)
		return fmt.Errorf("%w: worker on %q: %d handlers still running after %s; their jobs will be requeued when their leases expire",
			ErrShutdownTimeout, queue, inFlight.Load(), opts.ShutdownTimeout)
	}
}

// handle runs h on c and settles c if h did not.
func (q *Queue) handle(hardCtx context.Context, c *Claim, h Handler) {
	hctx, cancel := context.WithCancelCause(hardCtx)
	go func() {
		select {
		case <-c.Cancelled:
			cancel(ErrCancelRequested)
		case <-hctx.Done():
		}
	}()
	err := callHandler(hctx, c, h)
	cancel(context.Canceled)
	if c.Settled() {
		return
	}
	sctx := context.WithoutCancel(hardCtx)
	if err != nil {
		_, err = q.Nack(sctx, c, err.Error(), nil)
	} else {
		err = q.Ack(sctx, c, nil)
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrClaimLost):
		q.log.Warn("settling after handler: claim lost", "job", c.Job.ID, "err", err)
	default:
		q.log.Error("settling after handler failed", "job", c.Job.ID, "err", err)
	}
}

func callHandler(ctx context.Context, c *Claim, h Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, c)
}
