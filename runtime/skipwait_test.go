package runtime

import (
	"context"
	"errors"
	stdruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// waitSkipper waits on signal key k1 at step 0 (once released), and
// succeeds with its input at every later step; PrepareSkip prefixes
// "skipped:" and records the waiting payload.
type waitSkipper struct {
	entered, release chan struct{}
	once             *sync.Once
}

func (w waitSkipper) RunStep(_ context.Context, s *Step) (StepOutcome, error) {
	if s.Number == 0 {
		w.once.Do(func() { close(w.entered) })
		<-w.release
		return ContinueOnSignal([]byte("waiting"), "k1", time.Hour), nil
	}
	return Succeed(s.Payload), nil
}

func (waitSkipper) PrepareRedrive(context.Context, *RedriveSpec, []byte) error {
	return ErrNotRedrivable
}

func (waitSkipper) SkipsWait(arg []byte) bool { return string(arg) != "retry" }

func (waitSkipper) PrepareSkip(_ context.Context, runID string, payload, arg []byte, eff *Effects) ([]byte, error) {
	if string(arg) == "refuse" {
		return nil, ErrNotRedrivable
	}
	if err := eff.Put("app/skipped/"+runID, payload); err != nil {
		return nil, err
	}
	return append([]byte("skipped:"), payload...), nil
}

func TestSkipAWaitingStep(t *testing.T) {
	w := waitSkipper{entered: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "r1"})
	<-w.entered
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, nil); !errors.Is(err, ErrNotRedrivable) || !strings.Contains(err.Error(), "is running") {
		t.Fatalf("a skip while the step runs: %v", err)
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", []byte("retry"), nil); !errors.Is(err, ErrNotRedrivable) || !strings.Contains(err.Error(), "only a failed or cancelled run can be redriven") {
		t.Fatalf("a plain redrive of an active run: %v; want it refused as a redrive, not as a skip", err)
	}
	close(w.release)
	var waiting *stepPointer
	for waiting == nil {
		p, err := loadPointer(e.ctx, e.q, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if p != nil && p.Step == 1 {
			if j, err := e.q.GetJob(e.ctx, p.JobID); err == nil && j.State == queue.StateScheduled {
				waiting = p
			}
		}
		if e.ctx.Err() != nil {
			t.Fatal("the run never waited on its signal")
		}
		stdruntime.Gosched()
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", []byte("refuse"), nil); !errors.Is(err, ErrNotRedrivable) {
		t.Fatalf("a refusing runner: %v", err)
	}
	if v, _ := kvGet(e.ctx, e.q, sigWaitKey("k1")); string(v) != waiting.JobID {
		t.Fatalf("after a refused skip the wait entry is %q; want the waiting job %s", v, waiting.JobID)
	}
	out, err := e.rt.Redrive(e.ctx, "r1", nil, nil)
	if err != nil || out.JobID == waiting.JobID {
		t.Fatalf("skip: %+v %v", out, err)
	}
	if o := e.outcome(); o.Status != runstate.Succeeded || string(o.Result) != "skipped:waiting" {
		t.Fatalf("after the skip: %+v", o)
	}
	if _, err := e.q.GetJob(e.ctx, waiting.JobID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the waiting job: %v; want it removed", err)
	}
	if v, _ := kvGet(e.ctx, e.q, sigWaitKey("k1")); v != nil {
		t.Fatalf("the wait entry %q stays", v)
	}
	if v, _ := kvGet(e.ctx, e.q, "app/skipped/r1"); string(v) != "waiting" {
		t.Fatalf("the runner's effect: %q", v)
	}
	if res, err := e.rt.Signal(e.ctx, "k1", []byte("late")); err != nil || res != signal.Buffered {
		t.Fatalf("a signal to the old key: %v %v; want it buffered", res, err)
	}
}

// TestRemoveWaitingIsOneGuardedCommit: the removal, the new job and the
// writes land together, or (a guard failed, the job is not scheduled)
// nothing does.
func TestRemoveWaitingIsOneGuardedCommit(t *testing.T) {
	e := newEnv(t, redriver{})
	res, err := e.q.Enqueue(e.ctx, "jobs", []byte("p"), queue.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	eff := func() *queue.SettlementEffects {
		return &queue.SettlementEffects{KVPuts: []queue.KVWrite{{Key: "app/x", Value: []byte("1")}},
			Enqueue: []queue.NewJob{{Queue: "jobs", Payload: []byte("next"), Options: queue.EnqueueOptions{ID: "next"}}}}
	}
	if st, ok, err := e.q.RemoveWaiting(e.ctx, res.ID, eff(), []queue.KVWrite{{Key: "app/guard", Value: []byte("v")}}); err != nil || ok || st != queue.StateScheduled {
		t.Fatalf("a failed guard: %s %v %v", st, ok, err)
	}
	if v, _ := kvGet(e.ctx, e.q, "app/x"); v != nil {
		t.Fatal("a failed guard wrote its effects")
	}
	if _, err := e.q.GetJob(e.ctx, "next"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("a failed guard enqueued: %v", err)
	}
	if st, ok, err := e.q.RemoveWaiting(e.ctx, res.ID, eff(), []queue.KVWrite{{Key: "app/guard"}}); err != nil || !ok || st != queue.StateScheduled {
		t.Fatalf("remove: %s %v %v", st, ok, err)
	}
	if v, _ := kvGet(e.ctx, e.q, "app/x"); string(v) != "1" {
		t.Fatalf("effect %q", v)
	}
	if _, err := e.q.GetJob(e.ctx, res.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the removed job: %v", err)
	}
	if j, err := e.q.GetJob(e.ctx, "next"); err != nil || j.State != queue.StatePending {
		t.Fatalf("the new job: %+v %v", j, err)
	}
	if st, ok, err := e.q.RemoveWaiting(e.ctx, "next", eff(), nil); err != nil || ok || st != queue.StatePending {
		t.Fatalf("a pending job: %s %v %v; want it left", st, ok, err)
	}
}
