package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/internal/service"
	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Run works the runtime's queues until ctx is done: it runs steps (up to
// the configured concurrency), delivers terminal notifications, reconciles
// steps dead-lettered by the queue itself and, with retention configured,
// sweeps expired runs (first sweep at startup).
//
// When ctx is done Run stops claiming, lets running steps finish for up to
// the shutdown timeout, then cancels their contexts (cause ErrShutdown) and
// waits for them to return. A step that returns an error after the shutdown
// cancelled it is retried later; an outcome it returns is settled as usual.
// Run returns nil after a graceful stop, or the error that stopped the
// queue: closed, fenced (kv.ErrFenced) or stopped after a failed WAL write
// (kv.ErrStopped); Run sees the last two as soon as they happen, not at the
// next claim.
func (rt *Runtime) Run(ctx context.Context) error {
	hardCtx, hardStop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardStop(ErrShutdown)

	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	loop := func(name string, conc int, h stepHandler) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rt.claimLoop(loopCtx, hardCtx, name, conc, h); err != nil {
				errc <- err
			}
		}()
	}
	// The background loops end with loopCtx; Run stops them and waits
	// for them before it returns.
	background := []*service.Loop{
		service.NewLoop(untilDone(rt.reconcileLoop)),
		service.NewLoop(untilDone(rt.sweepLoop)),
		service.NewLoop(untilDone(rt.sealLoop)),
	}
	for _, s := range background {
		_ = s.Start(loopCtx) // a new Loop always starts
	}

	loop(rt.cfg.queueName, rt.cfg.concurrency, rt.handleStep)
	if _, noop := rt.cfg.hook.(noopTerminalHook); !noop {
		loop(rt.cfg.notifyQueue, rt.cfg.notifyConc, rt.handleNotification)
	}
	// A store that stops (fenced, or a failed WAL write) ends Run at once,
	// also while every slot is busy and no claim waits to notice it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-rt.q.DB().Stopped():
			err := rt.q.DB().Err()
			if errors.Is(err, kv.ErrClosed) {
				err = queue.ErrClosed // the queue closed its kv
			}
			errc <- fmt.Errorf("runtime: the store stopped accepting commits: %w", err)
		case <-loopCtx.Done():
		}
	}()
	if g := rt.cfg.gate; g != nil {
		// A lost lease stops everything at once, also while no claim waits.
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-g.Lost():
				errc <- rt.leaseLost(loopCtx)
			case <-loopCtx.Done():
			}
		}()
	}

	// Once ctx is done, give running steps the shutdown timeout.
	stopped := make(chan struct{})
	go func() {
		select {
		case <-loopCtx.Done():
		case <-stopped:
			return
		}
		if rt.cfg.shutdownTimeout > 0 {
			t := rt.clock.NewTimer(rt.cfg.shutdownTimeout)
			defer t.Stop()
			select {
			case <-t.C():
			case <-stopped:
				return
			}
		}
		hardStop(ErrShutdown)
	}()

	var first error
	go func() { wg.Wait(); close(errc) }()
	for err := range errc {
		if first == nil {
			first = err
			// Cancel the running steps with err before the loops stop:
			// stopping them first lets the shutdown timer cancel them
			// with ErrShutdown instead.
			hardStop(err)
			stopLoops()
		}
	}
	close(stopped)
	stopLoops()
	for _, s := range background {
		s.Stop()
	}
	return first
}

// untilDone makes a loop that ends only with its context a service's
// function.
func untilDone(loop func(ctx context.Context)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		loop(ctx)
		return nil
	}
}

// Worker is a Run started in the background by Spawn.
type Worker struct {
	cancel context.CancelFunc
	run    *service.Loop // Run, ended by cancel
}

// Spawn starts Run in a goroutine. Stop it with Worker.Shutdown.
func (rt *Runtime) Spawn(ctx context.Context) *Worker {
	ctx, cancel := context.WithCancel(ctx)
	w := &Worker{cancel: cancel, run: service.NewLoop(rt.Run)}
	_ = w.run.Start(ctx) // a new Loop always starts
	return w
}

// Shutdown stops the worker gracefully and waits until it returned or ctx
// is done. It returns Run's error.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.cancel()
	select {
	case <-w.run.Stopped():
		return w.run.Err()
	case <-ctx.Done():
		return fmt.Errorf("runtime: worker shutdown: %w", ctx.Err())
	}
}

// Done is closed when the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.run.Stopped() }

// IsFatal reports whether err makes writing impossible for this
// process: the queue closed, its kv was fenced, closed or stopped after a
// WAL failure, or the writer lease was lost. A loop that meets such an
// error ends with it instead of retrying; the worker and the inbox of
// runtime/remote both judge by it.
func IsFatal(err error) bool {
	return errors.Is(err, queue.ErrClosed) || errors.Is(err, kv.ErrFenced) || errors.Is(err, kv.ErrClosed) ||
		errors.Is(err, kv.ErrStopped) || errors.Is(err, lease.ErrLost)
}

// settleDepth bounds the steps in flight per worker slot, running or
// settling: a step frees its slot when its runner returns, and its
// settlement then waits for the durable commit while the slot runs the
// next step, so commits of many steps group into one WAL PUT.
const settleDepth = 4

// stepHandler processes one claim; it calls release (from its own
// goroutine) once it no longer needs its worker slot (its runner
// returned), and returns when done. reserve takes another slot without
// waiting (false when none is free or the loop stops); a handler that
// took one returns the claim it will run next in it (a run's next step,
// claimed in its predecessor's settlement), or nil, and the slot goes
// back.
type stepHandler func(ctx context.Context, c *queue.Claim, release func(), reserve func() bool) (next *queue.Claim)

// claimLoop claims jobs of queueName while ctx lives and runs h on each in
// its own goroutine: at most conc hold a slot at a time, and at most
// settleDepth*conc are in flight including those settling. Handlers get
// hardCtx, which outlives ctx by the shutdown timeout. It returns once
// every handler did.
func (rt *Runtime) claimLoop(ctx, hardCtx context.Context, queueName string, conc int, h stepHandler) error {
	slots := make(chan struct{}, conc)
	inflight := make(chan struct{}, settleDepth*conc)
	// Long-lived handler goroutines, one per in-flight place: a step's call
	// chain is deep, and a fresh goroutine per step would grow (copy) its
	// stack every time.
	work := make(chan *queue.Claim)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(work)
	for range cap(inflight) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				// While a run's steps go on here, its settlements count as
				// one committer's: a WAL batch may wait (a bounded time,
				// kv.Options.CommitDelay) for the next one to join it
				// instead of going out without it.
				committer := rt.q.DB().Committer()
				cctx := kv.WithCommitter(hardCtx, committer)
				// A run whose next step its settlement claimed goes on
				// here, in the slot reserved for it, without a trip
				// through the queue's ready index and the claim loop.
				for c != nil {
					released, reserved := false, false
					release := func() {
						if !released {
							released = true
							<-slots
						}
					}
					reserve := func() bool {
						if reserved || ctx.Err() != nil {
							return false
						}
						select {
						case slots <- struct{}{}:
							reserved = true
							return true
						default:
							return false
						}
					}
					next := h(cctx, c, release, reserve)
					release()
					if next == nil && reserved {
						<-slots
					}
					c = next
				}
				committer.Leave()
				<-inflight
			}
		}()
	}
	// start cannot block for long: a place in inflight was taken for c,
	// so a handler goroutine is free or about to be.
	start := func(c *queue.Claim) { work <- c }
	acquire := func() bool {
		select {
		case inflight <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			<-inflight
			return false
		}
		if ctx.Err() != nil { // both were ready: stopping wins
			<-slots
			<-inflight
			return false
		}
		return true
	}
	for {
		if !acquire() {
			return nil
		}
		// Claim nothing while the writer lease is not valid.
		if err := rt.AwaitLease(ctx); err != nil {
			<-slots
			<-inflight
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("runtime: claim from queue %s: %w", queueName, err)
		}
		c, err := rt.q.ClaimWait(ctx, queueName)
		if err != nil || c == nil {
			<-slots
			<-inflight
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				continue
			}
			if IsFatal(err) {
				return fmt.Errorf("runtime: claim from queue %s: %w", queueName, err)
			}
			rt.log.Warn("claim failed; retrying", "queue", queueName, "err", err)
			if !rt.pause(ctx, rt.cfg.reconcileEvery) {
				return nil
			}
			continue
		}
		start(c)
		// Fill the remaining free slots in one batch claim.
		free := min(conc-len(slots), cap(inflight)-len(inflight))
		if free <= 0 || ctx.Err() != nil {
			continue
		}
		more, err := rt.q.ClaimBatch(ctx, queueName, free)
		if err != nil && !IsFatal(err) && ctx.Err() == nil {
			rt.log.Warn("batch claim failed", "queue", queueName, "err", err)
		}
		for _, c := range more {
			// Cannot block: only this loop takes slots, and at most free.
			inflight <- struct{}{}
			slots <- struct{}{}
			start(c)
		}
	}
}

// pause waits d on the runtime's clock (clock.Sleep); false when ctx
// ended first.
func (rt *Runtime) pause(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, rt.clock, d) == nil
}
