package runtime

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// A step's runner is blocked on its own durable commits and status reads,
// so the WAL batch they wait for does not wait for the runner's worker
// (kv's group commit with company): a lone run whose step submits a
// child and reads its status makes no batch wait (HeldBatches stays 0),
// where before the batch waited for the very worker that waited on it.
func TestARunnersOwnCommitsDoNotWaitForItsWorker(t *testing.T) {
	var held atomic.Int64
	held.Store(-1)
	var e *env
	runner := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		if s.RunID != "parent" {
			return Succeed(nil), nil
		}
		before := e.q.DB().Stats().HeldBatches
		if _, err := e.rt.Submit(ctx, RunSpec{RunID: "child"}); err != nil {
			return StepOutcome{}, err
		}
		if _, err := e.rt.Status(ctx, "child"); err != nil {
			return StepOutcome{}, err
		}
		held.Store(e.q.DB().Stats().HeldBatches - before)
		return Succeed(nil), nil
	})
	e = newEnv(t, runner, Options{Concurrency: 1})
	e.submit(RunSpec{RunID: "parent"})
	e.start()
	for range 2 {
		if o := e.outcome(); o.Status != runstate.Succeeded {
			t.Fatalf("outcome %+v; want succeeded", o)
		}
	}
	if n := held.Load(); n != 0 {
		t.Fatalf("the runner's child submission and status read held %d WAL batches for company; want 0 (the run is alone)", n)
	}
}
