package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/leasetest"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// ranCounter is a one-step runner that counts its invocations.
func ranCounter(ran chan<- int) StepRunner {
	return steps{0: func(context.Context, *Step) (StepOutcome, error) {
		ran <- 0
		return Succeed([]byte(`"done"`)), nil
	}}
}

// TestLeaseGateHoldsClaims: while the lease is not valid the worker
// claims nothing; once it is, the run proceeds.
func TestLeaseGateHoldsClaims(t *testing.T) {
	g := leasetest.New(false)
	ran := make(chan int, 10)
	e := newEnv(t, ranCounter(ran), Options{LeaseGate: g, LeaseMargin: 3 * time.Second})
	e.submit(RunSpec{RunID: "r1"})
	e.start()
	g.WaitBlocked(t)
	if st, err := e.q.Stats(e.ctx, DefaultQueueName); err != nil || st.Claimed != 0 || st.Pending != 1 {
		t.Fatalf("stats %+v, %v; want the step pending, unclaimed", st, err)
	}
	select {
	case <-ran:
		t.Fatal("a step ran while the lease was not valid")
	default:
	}
	g.Set(true)
	if o := e.outcome(); o.Status != runstate.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
	for _, m := range g.Margins() {
		if m != 3*time.Second {
			t.Fatalf("AwaitValid asked for %v, want the 3s margin", m)
		}
	}
}

// TestLeaseGateBeforeRunner: a step claimed while the lease was valid
// does not start when the lease stopped being valid meanwhile.
func TestLeaseGateBeforeRunner(t *testing.T) {
	g := leasetest.New(false)
	g.PassNext(1) // the claim's check passes, the runner's does not
	ran := make(chan int, 10)
	// No hook: the notification loop would take the free pass.
	e := newEnv(t, ranCounter(ran), Options{LeaseGate: g, LeaseMargin: time.Second, Concurrency: 1, TerminalHook: noopTerminalHook{}})
	e.submit(RunSpec{RunID: "r1"})
	e.start()
	g.WaitBlocked(t)
	if st, err := e.q.Stats(e.ctx, DefaultQueueName); err != nil || st.Claimed != 1 {
		t.Fatalf("stats %+v, %v; want the step claimed", st, err)
	}
	select {
	case <-ran:
		t.Fatal("the runner was invoked while the lease was not valid")
	default:
	}
	g.Set(true)
	select {
	case <-ran:
	case <-e.ctx.Done():
		t.Fatal("the runner was not invoked once the lease was valid")
	}
}

// TestLeaseGateLostStopsRun: a lost lease ends Run at once with
// lease.ErrLost, cancelling the running step, also while nothing else
// happens.
func TestLeaseGateLostStopsRun(t *testing.T) {
	g := leasetest.New(true)
	entered := make(chan struct{})
	cancelled := make(chan error, 1)
	e := newEnv(t, steps{0: func(ctx context.Context, _ *Step) (StepOutcome, error) {
		close(entered)
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return StepOutcome{}, ctx.Err()
	}}, Options{LeaseGate: g, LeaseMargin: time.Second})
	e.submit(RunSpec{RunID: "r1"})
	e.start()
	<-entered
	g.Lose()
	select {
	case <-e.w.Done():
	case <-e.ctx.Done():
		t.Fatal("Run did not return after the lease was lost")
	}
	err := e.w.Shutdown(e.ctx)
	e.w = nil
	var lost *lease.LostError
	if !errors.Is(err, lease.ErrLost) || !errors.As(err, &lost) || lost.Holder.Owner != "other" {
		t.Fatalf("Run returned %v; want the lost lease", err)
	}
	if cause := <-cancelled; !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("the running step was cancelled with %v, want the lost lease", cause)
	}
}

func TestWithLeaseGateRejectsNegativeMargin(t *testing.T) {
	store := mem.New()
	q, err := queue.Open(context.Background(), store, queue.Options{Logger: quietLogger(), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := New(q, store, ranCounter(make(chan int, 1)), Options{LeaseGate: leasetest.New(true), LeaseMargin: -time.Second}); err == nil {
		t.Fatal("a negative margin was accepted")
	}
}
