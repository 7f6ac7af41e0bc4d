package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// fakeLease is a LeaseGate a test opens, closes and loses.
type fakeLease struct {
	mu      sync.Mutex
	valid   bool
	free    int // calls that pass while not valid
	asked   []time.Duration
	lostErr error
	lost    chan struct{}
	changed chan struct{}
	blocked chan struct{} // a value per call that blocks
}

func newFakeLease(valid bool) *fakeLease {
	return &fakeLease{valid: valid, lost: make(chan struct{}), changed: make(chan struct{}), blocked: make(chan struct{}, 100)}
}

func (f *fakeLease) AwaitValid(ctx context.Context, atLeast time.Duration) error {
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

func (f *fakeLease) Lost() <-chan struct{} { return f.lost }

func (f *fakeLease) set(valid bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.valid = valid
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeLease) lose() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostErr = &lease.LostError{Where: "writer-lease", Holder: lease.Info{Owner: "other"}}
	close(f.lost)
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeLease) waitBlocked(t *testing.T) {
	t.Helper()
	select {
	case <-f.blocked:
	case <-time.After(time.Minute):
		t.Fatal("nothing waited for the lease")
	}
}

func (f *fakeLease) margins() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.asked...)
}

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
	g := newFakeLease(false)
	ran := make(chan int, 10)
	e := newEnv(t, ranCounter(ran), Options{LeaseGate: g, LeaseMargin: 3 * time.Second})
	e.submit(RunSpec{RunID: "r1"})
	e.start()
	g.waitBlocked(t)
	if st, err := e.q.Stats(e.ctx, DefaultQueueName); err != nil || st.Claimed != 0 || st.Pending != 1 {
		t.Fatalf("stats %+v, %v; want the step pending, unclaimed", st, err)
	}
	select {
	case <-ran:
		t.Fatal("a step ran while the lease was not valid")
	default:
	}
	g.set(true)
	if o := e.outcome(); o.Status != runstate.Succeeded {
		t.Fatalf("outcome %+v", o)
	}
	for _, m := range g.margins() {
		if m != 3*time.Second {
			t.Fatalf("AwaitValid asked for %v, want the 3s margin", m)
		}
	}
}

// TestLeaseGateBeforeRunner: a step claimed while the lease was valid
// does not start when the lease stopped being valid meanwhile.
func TestLeaseGateBeforeRunner(t *testing.T) {
	g := newFakeLease(false)
	g.free = 1 // the claim's check passes, the runner's does not
	ran := make(chan int, 10)
	// No hook: the notification loop would take the free pass.
	e := newEnv(t, ranCounter(ran), Options{LeaseGate: g, LeaseMargin: time.Second, Concurrency: 1, TerminalHook: noopTerminalHook{}})
	e.submit(RunSpec{RunID: "r1"})
	e.start()
	g.waitBlocked(t)
	if st, err := e.q.Stats(e.ctx, DefaultQueueName); err != nil || st.Claimed != 1 {
		t.Fatalf("stats %+v, %v; want the step claimed", st, err)
	}
	select {
	case <-ran:
		t.Fatal("the runner was invoked while the lease was not valid")
	default:
	}
	g.set(true)
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
	g := newFakeLease(true)
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
	g.lose()
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
	if _, err := New(q, store, ranCounter(make(chan int, 1)), Options{LeaseGate: newFakeLease(true), LeaseMargin: -time.Second}); err == nil {
		t.Fatal("a negative margin was accepted")
	}
}
