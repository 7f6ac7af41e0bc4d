package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// redriver fails a run at step 1 with the state "at-1", and on a redrive
// resumes with "resumed:" and the state it ended in; step 2 (the
// redriven step) succeeds with its input, or with later waits long.
type redriver struct {
	park bool
}

func (r redriver) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	switch s.Number {
	case 0:
		if err := s.RunMemo.Put(ctx, "paid", []byte("answer")); err != nil {
			return StepOutcome{}, err
		}
		s.AddTotal("steps", 1)
		return ContinueNow([]byte("a")), nil
	case 1:
		out := Fail("step 1 broke")
		out.Payload = []byte("at-1")
		return out, nil
	}
	s.AddTotal("steps", 1)
	if r.park {
		return ContinueAfter(s.Payload, 1000*time.Hour), nil
	}
	return Succeed(s.Payload), nil
}

func (redriver) PrepareRedrive(_ context.Context, r *RedriveSpec, arg []byte) error {
	if string(arg) == "refuse" {
		return ErrNotRedrivable
	}
	r.Payload = append([]byte("resumed:"), r.Payload...)
	r.Headers["redriven"] = "yes"
	return r.Effects.Put("app/redriven/"+r.RunID, []byte(r.Status.String()))
}

func TestRedriveContinuesAFailedRun(t *testing.T) {
	e := newEnv(t, redriver{})
	e.start()
	e.submit(RunSpec{RunID: "r1", Input: []byte("in"), Labels: map[string]string{"team": "blue"}})
	if o := e.outcome(); o.Status != runstate.Failed {
		t.Fatalf("first end: %s", o.Status)
	}
	before := e.status("r1")
	if _, err := e.rt.Redrive(e.ctx, "r1", []byte("refuse"), nil); !errors.Is(err, ErrNotRedrivable) {
		t.Fatalf("a refusing runner: %v", err)
	}
	out, err := e.rt.Redrive(e.ctx, "r1", nil, nil)
	if err != nil || !out.NewlySubmitted || out.RunID != "r1" {
		t.Fatalf("Redrive: %+v %v", out, err)
	}
	o := e.outcome()
	if o.Status != runstate.Succeeded || string(o.Result) != "resumed:at-1" || o.Headers["redriven"] != "yes" {
		t.Fatalf("after the redrive: %+v", o)
	}
	if !o.SubmittedAt.Equal(before.SubmittedAt) {
		t.Fatalf("submitted %v, want the first submission's %v", o.SubmittedAt, before.SubmittedAt)
	}
	select {
	case extra := <-e.outcomes:
		t.Fatalf("a further notification: %+v", extra)
	default:
	}
	st := e.status("r1")
	if st.Totals == nil || st.Totals.Counters["steps"] != 2 {
		t.Fatalf("totals %+v; want both incarnations' steps", st.Totals)
	}
	if v, err := kvGet(e.ctx, e.q, "app/redriven/r1"); err != nil || string(v) != "failed" {
		t.Fatalf("the runner's effect: %q %v", v, err)
	}
	if v, _ := kvGet(e.ctx, e.q, resumeKey("r1")); v != nil {
		t.Fatal("a succeeded run keeps a resume record")
	}
	runs, err := e.rt.Inspector().ListRuns(e.ctx, runstate.ListOptions{Labels: map[string]string{"team": "blue"}, Limit: 10})
	if err != nil || len(runs) != 1 || runs[0].State != runstate.StateSucceeded {
		t.Fatalf("by label: %+v %v", runs, err)
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, nil); !errors.Is(err, ErrNotRedrivable) || !strings.Contains(err.Error(), "succeeded") {
		t.Fatalf("redrive of a succeeded run: %v", err)
	}
	if _, err := e.rt.Redrive(e.ctx, "nope", nil, nil); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("redrive of an unknown run: %v", err)
	}
}

func TestRedriveRecordIsWrittenOnce(t *testing.T) {
	e := newEnv(t, redriver{park: true})
	e.start()
	e.submit(RunSpec{RunID: "r1"})
	e.outcome()
	rec := &queue.KVWrite{Key: ReservedKVPrefix + "test/r1", Value: []byte("done")}
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, rec); !errors.Is(err, ErrRecordExists) {
		t.Fatalf("a second redrive with the record: %v; want ErrRecordExists", err)
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, nil); !errors.Is(err, ErrNotRedrivable) || !strings.Contains(err.Error(), "is active") {
		t.Fatalf("a redrive of the active run: %v", err)
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, &queue.KVWrite{Key: "app/x"}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("a record outside a control namespace: %v", err)
	}
}

// A sealed run redriven is superseded by its live copy: the segment's
// expiry leaves alone what the live run still uses (its memo entries).
func TestRedriveSupersedesASealedRun(t *testing.T) {
	opts := Options{Sealing: &SealOptions{BatchRuns: 4, CacheSegments: 2, Delay: -1}, ResultRetention: time.Hour,
		MemoRetention: 2 * time.Hour, SweepInterval: 24 * time.Hour}
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), redriver{park: true}, opts)
	startSwept(t, e)
	e.submit(RunSpec{RunID: "r1", Labels: map[string]string{"team": "blue"}})
	e.outcome()
	waitKV(t, e, kvSealQ, 1)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != 1 {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	if v, _ := kvGet(e.ctx, e.q, resumeKey("r1")); v != nil {
		t.Fatal("the resume record stayed in the KV after sealing")
	}
	if _, err := e.rt.Redrive(e.ctx, "r1", nil, nil); err != nil {
		t.Fatal(err)
	}
	st := e.waitRun("r1", inState(runstate.StateScheduled))
	if st.Labels["team"] != "blue" {
		t.Fatalf("labels %v", st.Labels)
	}
	if recs, ok, err := e.rt.Inspector().SealedRecords(e.ctx, "r1", ""); err != nil || ok || recs != nil {
		t.Fatalf("SealedRecords of a redriven run: %v %v %v; want the KV's (none here)", recs, ok, err)
	}
	e.clock.Advance(3 * time.Hour)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.SealedExpired != 1 {
		t.Fatalf("Sweep past the retentions: %+v %v", res, err)
	}
	if _, found, err := e.rt.MemoStore().Run("r1").Get(e.ctx, "paid"); err != nil || !found {
		t.Fatalf("the redriven run's memo entry after its old segment expired: found %v, %v", found, err)
	}
	e.expectState("r1", runstate.StateScheduled)
	runs, err := e.rt.Inspector().ListRuns(e.ctx, runstate.ListOptions{Labels: map[string]string{"team": "blue"}, Limit: 10})
	if err != nil || len(runs) != 1 || runs[0].State != runstate.StateScheduled {
		t.Fatalf("by label: %+v %v", runs, err)
	}
}
