package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

func echo() StepRunner {
	return StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) { return Succeed(s.Payload), nil })
}

// Item 2: idempotent submission on (run id, input).
func TestSubmitIdempotentOnRunIDAndInput(t *testing.T) {
	e := newEnv(t, echo())
	first := e.submit(RunSpec{RunID: "r1", Input: []byte("in"), KVWrites: map[string][]byte{"app/a": []byte("1")}})
	if !first.NewlySubmitted {
		t.Fatal("first submit not new")
	}
	again := e.submit(RunSpec{RunID: "r1", Input: []byte("in"), KVWrites: map[string][]byte{"app/a": []byte("2")}})
	if again.NewlySubmitted || again.JobID != first.JobID || again.RunID != "r1" {
		t.Fatalf("duplicate submit %+v, first %+v", again, first)
	}
	if v, _ := e.q.KVGet(e.ctx, "app/a"); string(v) != "1" {
		t.Fatalf("duplicate submission applied its KV writes: %q", v)
	}
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "r1", Input: []byte("other")}); !errors.Is(err, ErrInputMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	// Across a restart, after step 0 was claimed (its dedup key released):
	// only the durable run record can catch the duplicate.
	e.reopen()
	c, err := e.q.Claim(e.ctx, DefaultQueueName)
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "r1", Input: []byte("other")}); !errors.Is(err, ErrInputMismatch) {
		t.Fatalf("mismatch after restart: %v", err)
	}
	if out := e.submit(RunSpec{RunID: "r1", Input: []byte("in")}); out.NewlySubmitted || out.JobID != first.JobID {
		t.Fatalf("duplicate after restart %+v", out)
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Pending+s.Scheduled != 0 || s.Claimed != 1 {
		t.Fatalf("a duplicate enqueued a job: %+v", s)
	}
}

func TestSubmitAfterTerminationStartsNewRun(t *testing.T) {
	e := newEnv(t, echo())
	e.start()
	e.submit(RunSpec{RunID: "again", Input: []byte("one")})
	if o := e.outcome(); string(o.Result) != "one" {
		t.Fatalf("first run %+v", o)
	}
	out := e.submit(RunSpec{RunID: "again", Input: []byte("two")})
	if !out.NewlySubmitted {
		t.Fatal("terminated run id not released")
	}
	if o := e.outcome(); string(o.Result) != "two" {
		t.Fatalf("second run %+v", o)
	}
}

func TestSubmitGeneratesRunIDAndValidates(t *testing.T) {
	e := newEnv(t, echo())
	out := e.submit(RunSpec{Input: []byte("x")})
	if err := runstate.ValidateRunID(out.RunID); err != nil || len(out.RunID) != 26 {
		t.Fatalf("generated id %q: %v", out.RunID, err)
	}
	for _, bad := range []string{"a/b", ".x", strings.Repeat("a", 129), "sp ace", "é"} {
		if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: bad}); !errors.Is(err, runstate.ErrInvalidRunID) {
			t.Errorf("run id %q: %v", bad, err)
		}
	}
}

// Item 10: the reserved header and KV prefixes.
func TestReservedNamesRejected(t *testing.T) {
	e := newEnv(t, echo())
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "h", Headers: map[string]string{"workflow.step": "9"}}); !errors.Is(err, ErrReserved) {
		t.Fatalf("reserved header: %v", err)
	}
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "k", KVWrites: map[string][]byte{"workflow/runs/x": nil}}); !errors.Is(err, ErrReserved) {
		t.Fatalf("reserved KV key: %v", err)
	}
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "big", KVWrites: map[string][]byte{"a": make([]byte, queue.MaxKVValueSize+1)}}); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("oversize KV write: %v", err)
	}
	if _, err := e.rt.Status(e.ctx, "h"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("rejected submission left a run: %v", err)
	}
	eff := newEffects()
	if err := eff.Put("workflow/x", nil); !errors.Is(err, ErrReserved) {
		t.Fatalf("effects put: %v", err)
	}
	if err := eff.Delete("workflow/x"); !errors.Is(err, ErrReserved) {
		t.Fatalf("effects delete: %v", err)
	}
	te := newTerminalEffects()
	if err := te.Put("workflow/y", nil); !errors.Is(err, ErrReserved) {
		t.Fatalf("terminal effects put: %v", err)
	}
	if err := te.Enqueue("q", nil, queue.EnqueueOptions{Headers: map[string]string{"workflow.run_id": "x"}}); !errors.Is(err, ErrReserved) {
		t.Fatalf("terminal effects enqueue header: %v", err)
	}
	if err := te.Enqueue("q", []byte("p"), queue.EnqueueOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := te.Delete("app/gone"); err != nil {
		t.Fatal(err)
	}
	if st := te.Staged(); len(st.Enqueue) != 1 || st.Enqueue[0].Queue != "q" || len(st.KVDeletes) != 1 || len(st.KVPuts) != 0 {
		t.Fatalf("staged terminal effects %+v", st)
	}
	_ = eff.Put("app/z", []byte("1"))
	_ = eff.Put("app/a", []byte("2"))
	if puts, dels := eff.Staged(); len(puts) != 2 || puts[0].Key != "app/a" || len(dels) != 0 {
		t.Fatalf("staged effects %+v %v", puts, dels)
	}
}

// Item 11: application KV effects.
func TestKVEffects(t *testing.T) {
	var committedDuringStep []byte
	r := steps{
		0: func(ctx context.Context, s *Step) (StepOutcome, error) {
			if v, ok, err := s.KV.Get(ctx, "app/status"); err != nil || !ok || string(v) != "submitted" {
				return StepOutcome{}, Permanent(errors.New("RunSpec.KVWrites not committed with step 0"))
			}
			_ = s.Effects.Put("app/status", []byte("step0"))
			_ = s.Effects.Delete("app/tmp")
			committedDuringStep, _, _ = s.KV.Get(ctx, "app/status")
			return ContinueNow(nil), nil
		},
		1: func(ctx context.Context, s *Step) (StepOutcome, error) {
			if s.Attempt == 1 {
				_ = s.Effects.Put("app/status", []byte("from-failed-attempt"))
				return StepOutcome{}, errors.New("transient")
			}
			_ = s.Effects.Put("app/status", []byte("done"))
			return Succeed(nil), nil
		},
	}
	e := newEnv(t, r)
	e.start()
	if _, err := e.q.KVGet(e.ctx, "app/status"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatal("precondition")
	}
	if err := e.q.KVPut(e.ctx, "app/tmp", []byte("x")); err != nil {
		t.Fatal(err)
	}
	e.submit(RunSpec{RunID: "kv", KVWrites: map[string][]byte{"app/status": []byte("submitted")}})
	st := e.waitRun("kv", func(st runstate.Status) bool { return st.State == runstate.StateScheduled && st.Step == 1 })
	if v, _ := e.q.KVGet(e.ctx, "app/status"); string(v) != "step0" {
		t.Fatalf("after step 0 (with step 1 failed once): %q", v)
	}
	if _, err := e.q.KVGet(e.ctx, "app/tmp"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("staged delete not applied: %v", err)
	}
	if string(committedDuringStep) != "submitted" {
		t.Fatalf("Step.KV saw staged effects: %q", committedDuringStep)
	}
	_ = st
	e.clock.Advance(e.qcfg.BackoffMax)
	e.outcome()
	if v, _ := e.q.KVGet(e.ctx, "app/status"); string(v) != "done" {
		t.Fatalf("final: %q", v)
	}

	eff := newEffects()
	if err := eff.Put("a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := eff.Delete("a"); !errors.Is(err, errEffectConflict) {
		t.Fatalf("put then delete: %v", err)
	}
	if err := eff.Delete("b"); err != nil {
		t.Fatal(err)
	}
	if err := eff.Put("b", nil); !errors.Is(err, errEffectConflict) {
		t.Fatalf("delete then put: %v", err)
	}
	if err := eff.Put("c", make([]byte, queue.MaxKVValueSize+1)); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	if err := eff.Put("", nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestConcurrentSubmitsOfOneRunID(t *testing.T) {
	e := newEnv(t, echo())
	type res struct {
		input string
		out   SubmitOutcome
		err   error
	}
	results := make(chan res, 8)
	for i := range 8 {
		input := []string{"A", "B"}[i%2]
		go func() {
			out, err := e.rt.Submit(e.ctx, RunSpec{RunID: "race", Input: []byte(input)})
			results <- res{input, out, err}
		}()
	}
	var winner string
	var all []res
	for range 8 {
		r := <-results
		all = append(all, r)
		if r.err == nil && r.out.NewlySubmitted {
			if winner != "" {
				t.Fatalf("two submissions won: %s and %s", winner, r.input)
			}
			winner = r.input
		}
	}
	if winner == "" {
		t.Fatal("no submission won")
	}
	for _, r := range all {
		switch {
		case r.input == winner && r.err != nil:
			t.Errorf("same input %s failed: %v", r.input, r.err)
		case r.input != winner && !errors.Is(r.err, ErrInputMismatch):
			t.Errorf("other input %s: %+v %v", r.input, r.out, r.err)
		}
	}
	if s, _ := e.q.Stats(e.ctx, DefaultQueueName); s.Pending != 1 {
		t.Fatalf("stats %+v", s)
	}
}
