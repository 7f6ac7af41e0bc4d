package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 13: the terminal hook as a notification job.

type filterHook struct {
	calls   atomic.Int32
	outcome chan *runstate.Outcome
	fail    int32 // transient failures before success
	perm    bool
}

func (h *filterHook) Observes(o *runstate.Outcome) bool { return o.Headers["notify"] == "yes" }

func (h *filterHook) OnTermination(_ context.Context, o *runstate.Outcome, eff *TerminalEffects) error {
	n := h.calls.Add(1)
	if h.perm {
		return Permanent(errors.New("hook refuses"))
	}
	if n <= h.fail {
		_ = eff.Put("app/hook-failed-attempt", []byte("x"))
		return errors.New("hook flaky")
	}
	if err := eff.Put("app/notified/"+o.RunID, []byte(o.Status.String())); err != nil {
		return err
	}
	if err := eff.Enqueue("followups", []byte(o.RunID), queue.EnqueueOptions{}); err != nil {
		return err
	}
	h.outcome <- o
	return nil
}

func TestTerminalHookAtLeastOnceWithEffects(t *testing.T) {
	h := &filterHook{outcome: make(chan *runstate.Outcome, 10), fail: 1}
	e := newEnv(t, echo(), Options{TerminalHook: h})
	e.start()
	e.submit(RunSpec{RunID: "quiet", Input: []byte("q")})
	e.submit(RunSpec{RunID: "loud", Input: []byte("l"), Headers: map[string]string{"notify": "yes"}})
	e.waitRun("quiet", inState(runstate.StateSucceeded))
	e.waitRun("loud", inState(runstate.StateSucceeded))
	// The first delivery failed and is retried after the queue's backoff.
	var notify queue.Stats
	for notify.Scheduled != 1 {
		notify, _ = e.q.Stats(e.ctx, e.rt.NotifyQueueName())
		if e.ctx.Err() != nil {
			t.Fatal("notification not retried")
		}
		yield()
	}
	e.clock.Advance(time.Minute)
	o := <-h.outcome
	if o.RunID != "loud" || o.Status != runstate.Succeeded || string(o.Result) != "l" || h.calls.Load() != 2 {
		t.Fatalf("hook saw %+v after %d calls", o, h.calls.Load())
	}
	for {
		if s, _ := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); s.Pending+s.Scheduled+s.Claimed == 0 {
			break
		}
		yield()
	}
	if v, _ := e.q.KVGet(e.ctx, "app/notified/loud"); string(v) != "succeeded" {
		t.Fatalf("hook KV effect: %q", v)
	}
	if _, err := e.q.KVGet(e.ctx, "app/hook-failed-attempt"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatal("effects of a failed hook attempt applied")
	}
	if s, _ := e.q.Stats(e.ctx, "followups"); s.Pending != 1 {
		t.Fatalf("hook enqueue effect: %+v", s)
	}
	if _, err := e.q.KVGet(e.ctx, "app/notified/quiet"); !errors.Is(err, queue.ErrNotFound) || h.calls.Load() != 2 {
		t.Fatal("a run the hook does not observe was notified")
	}
}

func TestTerminalHookPermanentErrorDeadLettersNotification(t *testing.T) {
	h := &filterHook{outcome: make(chan *runstate.Outcome, 10), perm: true}
	e := newEnv(t, echo(), Options{TerminalHook: h})
	e.start()
	e.submit(RunSpec{RunID: "x", Headers: map[string]string{"notify": "yes"}})
	for {
		if s, _ := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); s.Dead == 1 {
			break
		}
		if e.ctx.Err() != nil {
			t.Fatal("notification not dead-lettered")
		}
		yield()
	}
	if h.calls.Load() != 1 {
		t.Fatalf("%d hook calls", h.calls.Load())
	}
}

func TestNoopTerminalHookEnqueuesNothing(t *testing.T) {
	e := newEnv(t, echo(), Options{TerminalHook: noopTerminalHook{}})
	e.start()
	e.submit(RunSpec{RunID: "n"})
	e.waitRun("n", inState(runstate.StateSucceeded))
	if s, _ := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); s != (queue.Stats{}) {
		t.Fatalf("notification queue %+v", s)
	}
}

// Runs whose step the reaper dead-letters are reconciled to Failed, with a
// notification.
func TestReaperDeadLetterReconciledToFailed(t *testing.T) {
	g := newGate(t)
	r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		g.entered <- s
		<-g.release
		return Succeed(nil), nil
	})
	cfg := defaultQueueConfig()
	cfg.MaxAttempts = 1
	e := newEnvCfg(t, mem.New(), cfg, r)
	e.start()
	out := e.submit(RunSpec{RunID: "reaped"})
	<-g.entered
	e.clock.Advance(2 * time.Minute)
	if _, err := e.q.Reap(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitJob(out.JobID, func(j queue.Job) bool { return j.State == queue.StateDead })
	e.waitRun("reaped", inState(runstate.StateFailed)) // from the dead job or reconciled
	// The worker's reconcile loop may get there first (its timer fired
	// with the Advance); either way exactly one notification follows.
	if _, err := e.rt.Reconcile(e.ctx); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	o := e.outcome()
	if o.RunID != "reaped" || o.Status != runstate.Failed || o.Error == "" {
		t.Fatalf("outcome %+v", o)
	}
	if _, err := e.q.KVGet(e.ctx, runKey("reaped")); !errors.Is(err, queue.ErrNotFound) {
		t.Fatal("run record left")
	}
	if n, _ := e.rt.Reconcile(e.ctx); n != 0 {
		t.Fatal("reconciled twice")
	}
	g.open() // the late runner's settlement is refused
}

// A step dead-lettered by crash recovery at open is reconciled by the worker
// at startup.
func TestCrashRecoveryDeadLetterReconciledAtStartup(t *testing.T) {
	cfg := defaultQueueConfig()
	cfg.MaxAttempts = 1
	e := newEnvCfg(t, mem.New(), cfg, echo())
	e.submit(RunSpec{RunID: "crashed"})
	if c, err := e.q.Claim(e.ctx, DefaultQueueName); err != nil || c == nil {
		t.Fatalf("claim %v %v", c, err)
	}
	e.reopen() // the claim was the last attempt: recovery dead-letters it
	e.start()
	if o := e.outcome(); o.RunID != "crashed" || o.Status != runstate.Failed {
		t.Fatalf("outcome %+v", o)
	}
	e.waitRun("crashed", func(st runstate.Status) bool { return st.State == runstate.StateFailed && !st.FinishedAt.IsZero() })
}

// barrierHook blocks every OnTermination until want of them are running
// at once, or the test's deadline passes.
type barrierHook struct {
	want    int32
	running atomic.Int32
	all     chan struct{}
	done    chan string
}

func (h *barrierHook) Observes(*runstate.Outcome) bool { return true }

func (h *barrierHook) OnTermination(ctx context.Context, o *runstate.Outcome, _ *TerminalEffects) error {
	if h.running.Add(1) == h.want {
		close(h.all)
	}
	select {
	case <-h.all:
	case <-ctx.Done():
		return ctx.Err()
	}
	h.done <- o.RunID
	return nil
}

// TestNotificationsKeepPaceWithSteps: by default as many terminal
// notifications run at once as steps do, so Concurrency runs that end
// together are handled together; with fewer, ends queue up behind the
// hook and a busy writer's unsealed runs pile up in memory (the YAML-path
// scale benchmark saw its RSS reach 890 MB that way).
func TestNotificationsKeepPaceWithSteps(t *testing.T) {
	const n = 8
	h := &barrierHook{want: n, all: make(chan struct{}), done: make(chan string, n)}
	e := newEnv(t, echo(), Options{TerminalHook: h, Concurrency: n})
	e.start()
	for i := range n {
		e.submit(RunSpec{RunID: fmt.Sprintf("r%d", i), Input: []byte("x")})
	}
	deadline := time.After(time.Minute)
	for range n {
		select {
		case <-h.done:
		case <-deadline:
			t.Fatalf("after a minute %d of %d terminal hooks run at once, want all %d (NotifyConcurrency default too small)", h.running.Load(), n, n)
		}
	}
}
