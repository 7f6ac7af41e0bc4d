package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// While the store cannot be written, the step after a settled one does
// not start and the settled one is not reported: the run goes on once
// the store is back, each step exactly once.
func TestNextStepWaitsForTheSettlementToBeDurable(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	var started [3]atomic.Int32
	reported := make(chan int, 8)
	down := errors.New("connection refused")
	runner := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		started[s.Number].Add(1)
		n := s.Number
		s.OnDurable(func() { reported <- n })
		switch n {
		case 0:
			// The store goes away while step 0 finishes: its settlement
			// cannot become durable.
			fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: down})
			return ContinueNow([]byte("1")), nil
		case 1:
			return ContinueNow([]byte("2")), nil
		}
		return Succeed([]byte(`"done"`)), nil
	})
	e := newEnvCfg(t, fs, defaultQueueConfig(), runner)
	e.submit(RunSpec{RunID: "r1", Input: []byte("0")})
	e.start()
	if err := fs.WaitInjected(e.ctx, 5); err != nil {
		t.Fatal(err)
	}
	if n := started[1].Load(); n != 0 {
		t.Fatalf("step 1 started %d times while step 0's settlement could not reach the store", n)
	}
	select {
	case n := <-reported:
		t.Fatalf("step %d reported complete while the store was down", n)
	default:
	}
	fs.Clear()
	o := e.outcome()
	if o.Status != runstate.Succeeded {
		t.Fatalf("outcome %+v; want succeeded", o)
	}
	for i := range started {
		if n := started[i].Load(); n != 1 {
			t.Fatalf("step %d started %d times; want once", i, n)
		}
	}
	for want := 0; want < 3; want++ {
		if got := <-reported; got != want {
			t.Fatalf("reported step %d; want %d (in order)", got, want)
		}
	}
}
