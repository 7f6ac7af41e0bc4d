package runtime

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 6: memo.

type draft struct {
	Text  string
	Words int
}

func TestMemoSurvivesRetriesAndIsScoped(t *testing.T) {
	var paid atomic.Int32
	r := steps{
		0: func(ctx context.Context, s *Step) (StepOutcome, error) {
			d, err := memo.Memoized(ctx, s.Memo, "draft", func(context.Context) (draft, error) {
				paid.Add(1)
				return draft{Text: "hello world", Words: 2}, nil
			})
			if err != nil {
				return StepOutcome{}, err
			}
			if err := s.RunMemo.Put(ctx, "journal", []byte(d.Text)); err != nil {
				return StepOutcome{}, err
			}
			if s.Attempt < 3 {
				return StepOutcome{}, errors.New("fail after paying")
			}
			return ContinueNow(nil), nil
		},
		1: func(ctx context.Context, s *Step) (StepOutcome, error) {
			if _, found, _ := s.Memo.Get(ctx, "draft"); found {
				return StepOutcome{}, Permanent(errors.New("step memo leaked across steps"))
			}
			j, found, err := s.RunMemo.Get(ctx, "journal")
			if err != nil || !found {
				return StepOutcome{}, Permanent(errors.New("run memo not shared"))
			}
			return Succeed(j), nil
		},
	}
	store := mem.New()
	e := newEnvCfg(t, store, defaultQueueConfig(), r, Options{MemoPrefix: "memo-x"})
	e.start()
	out := e.submit(RunSpec{RunID: "m"})
	for attempt := 1; attempt <= 2; attempt++ {
		e.waitJob(out.JobID, func(j queue.Job) bool { return j.State == queue.StateScheduled && j.Attempts == attempt })
		e.clock.Advance(time.Minute)
	}
	if o := e.outcome(); o.Status != runstate.Succeeded || string(o.Result) != "hello world" {
		t.Fatalf("outcome %+v", o)
	}
	if paid.Load() != 1 {
		t.Fatalf("side effect ran %d times", paid.Load())
	}
	objs, _ := store.List(e.ctx, "memo-x/", "", 100)
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	if strings.Join(keys, ",") != "memo-x/m/r/journal,memo-x/m/s/0/draft" {
		t.Fatalf("memo objects %v", keys)
	}
}

func TestMemoContentKeysAndTypedForms(t *testing.T) {
	ctx := context.Background()
	ms := memo.NewStore(mem.New(), memo.DefaultPrefix, runstate.ValidateRunID)
	m := ms.Step("run", 3)
	in1 := map[string]any{"op": "draft", "b": 2, "a": []byte("x")}
	in2 := map[string]any{"a": []byte("x"), "op": "draft", "b": 2}
	k1, err := memo.ContentKey(in1)
	if err != nil {
		t.Fatal(err)
	}
	if k2, _ := m.ContentKey(in2); k1 != k2 || len(k1) != 64 {
		t.Fatalf("content key not deterministic: %s %s", k1, k2)
	}
	if k3, _ := memo.ContentKey(map[string]any{"op": "other", "b": 2, "a": []byte("x")}); k3 == k1 {
		t.Fatal("different inputs, same key")
	}
	if _, found, _ := m.ContentGet(ctx, in1); found {
		t.Fatal("found before put")
	}
	if err := m.ContentPut(ctx, in1, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, found, _ := m.ContentGet(ctx, in2); !found || string(v) != "v" {
		t.Fatalf("ContentGet %q %v", v, found)
	}
	if v, found, _ := m.Get(ctx, k1); !found || string(v) != "v" {
		t.Fatal("ContentKey does not address the entry for Get")
	}

	calls := 0
	compute := func(context.Context) (draft, error) { calls++; return draft{Text: "t", Words: 1}, nil }
	for range 2 {
		d, err := memo.MemoizedByContent(ctx, m, in1, compute)
		// The entry under in1 holds "v", which is not a draft: it is
		// treated as absent and overwritten on the first call.
		if err != nil || d.Text != "t" {
			t.Fatalf("MemoizedByContent %+v %v", d, err)
		}
	}
	if calls != 1 {
		t.Fatalf("computed %d times", calls)
	}
	// An error from the computation stores nothing.
	_, err = memo.Memoized(ctx, m, "e", func(context.Context) (int, error) { return 0, errors.New("nope") })
	if err == nil {
		t.Fatal("error swallowed")
	}
	if _, found, _ := m.Get(ctx, "e"); found {
		t.Fatal("failed computation stored a value")
	}
	// Keys outside the plain alphabet are encoded, never rejected or mixed up.
	for _, k := range []string{"a/b", "..", "ü", "~x"} {
		if err := m.Put(ctx, k, []byte(k)); err != nil {
			t.Fatalf("Put(%q): %v", k, err)
		}
	}
	for _, k := range []string{"a/b", "..", "ü", "~x"} {
		if v, found, _ := m.Get(ctx, k); !found || string(v) != k {
			t.Fatalf("Get(%q) = %q %v", k, v, found)
		}
	}
	if err := m.Put(ctx, "", nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	n, err := ms.ClearRun(ctx, "run")
	if err != nil || n != 5 {
		t.Fatalf("ClearRun: %d %v", n, err)
	}
}

// Item 7: step-output replay.

func TestStepOutputReplayAfterLostSettlement(t *testing.T) {
	g := newGate(t)
	var calls atomic.Int32
	r := steps{
		0: func(_ context.Context, s *Step) (StepOutcome, error) {
			calls.Add(1)
			g.entered <- s
			<-g.release
			_ = s.Effects.Put("app/replayed", []byte("yes"))
			return ContinueAfter([]byte("next"), 10*time.Minute), nil
		},
		1: func(_ context.Context, s *Step) (StepOutcome, error) { return Succeed(s.Payload), nil },
	}
	qc := defaultQueueConfig()
	qc.KeepDoneJobs = time.Hour
	e := newEnvCfg(t, mem.New(), qc, r, Options{StepOutputReplay: true, Concurrency: 1})
	e.start()
	out := e.submit(RunSpec{RunID: "rp", Input: []byte("in")})
	<-g.entered
	// The lease expires while the runner works: the reaper requeues the
	// job, so this delivery's settlement will be refused.
	e.clock.Advance(2 * time.Minute)
	e.waitJob(out.JobID, func(j queue.Job) bool { return j.State == queue.StatePending })
	w := e.w
	e.w = nil
	w.cancel() // stop claiming before the runner returns
	g.open()
	if err := w.Shutdown(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.KVGet(e.ctx, "app/replayed"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatal("a refused settlement applied effects")
	}
	e.clock.Advance(3 * time.Minute) // stored at t0+2m; redelivered at t0+5m
	e.start()
	st := e.waitRun("rp", func(st runstate.Status) bool { return st.Step == 1 })
	if calls.Load() != 1 {
		t.Fatalf("runner invoked %d times; the redelivery should replay", calls.Load())
	}
	if want := t0.Add(12 * time.Minute); st.State != runstate.StateScheduled || !st.Until.Equal(want) {
		t.Fatalf("replayed After: %+v, want until %v", st, want)
	}
	if v, _ := e.q.KVGet(e.ctx, "app/replayed"); string(v) != "yes" {
		t.Fatalf("replayed effects not applied: %q", v)
	}
	e.clock.Advance(7 * time.Minute)
	if o := e.outcome(); string(o.Result) != "next" {
		t.Fatalf("outcome %+v", o)
	}
	objs, _ := e.store.List(e.ctx, memo.DefaultPrefix+"/rp/x/0/", "", 10)
	if len(objs) != 1 {
		t.Fatalf("replay objects %v", objs)
	}
}

func TestReplayRecordIsPartOfSettlement(t *testing.T) {
	fs := faults.New(mem.New(), 1)
	var calls atomic.Int32
	r := StepRunnerFunc(func(context.Context, *Step) (StepOutcome, error) {
		calls.Add(1)
		return Succeed([]byte("ok")), nil
	})
	e := newEnvCfg(t, fs, defaultQueueConfig(), r, Options{StepOutputReplay: true})
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: memo.DefaultPrefix + "/", Nth: 1})
	e.start()
	out := e.submit(RunSpec{RunID: "rs"})
	// The replay write failed: the step did not settle and is retried.
	e.waitJob(out.JobID, func(j queue.Job) bool { return j.State == queue.StateScheduled })
	e.clock.Advance(time.Minute)
	if o := e.outcome(); o.Status != runstate.Succeeded || calls.Load() != 2 {
		t.Fatalf("outcome %+v, %d calls", o, calls.Load())
	}
}

func TestReplayRecordShrinksAfterDelay(t *testing.T) {
	rec := newReplayRecord(ContinueAfter(nil, 10*time.Minute), nil, t0)
	if d := rec.outcome(4 * time.Minute).trigger.Delay; d != 6*time.Minute {
		t.Fatalf("delay %v", d)
	}
	if d := rec.outcome(time.Hour).trigger.Delay; d != 0 {
		t.Fatalf("delay %v", d)
	}
}

// Item 8: memo retention.

func TestMemoRetentionSweep(t *testing.T) {
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		if err := s.Memo.Put(ctx, "k", []byte("v")); err != nil {
			return StepOutcome{}, err
		}
		return Succeed(nil), nil
	})
	store := mem.New()
	e := newEnvCfg(t, store, defaultQueueConfig(), r, Options{MemoRetention: time.Hour, StepOutputReplay: true, SweepInterval: 24 * time.Hour})
	e.start()
	e.submit(RunSpec{RunID: "early"})
	e.outcome()
	e.clock.Advance(30 * time.Minute)
	e.submit(RunSpec{RunID: "late"})
	e.outcome()
	markers, err := e.rt.terminalMarkers(e.ctx, nil, 10)
	if err != nil || len(markers) != 2 || markers[0].RunID != "early" || !markers[1].FinishedAt.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("markers %+v %v", markers, err)
	}
	countMemo := func(run string) int {
		objs, err := store.List(e.ctx, memo.DefaultPrefix+"/"+run+"/", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	if countMemo("early") != 2 || countMemo("late") != 2 { // memo entry + replay record
		t.Fatalf("memo objects early %d late %d", countMemo("early"), countMemo("late"))
	}
	e.clock.Advance(29 * time.Minute) // early is 59m old
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.MemoRuns != 0 {
		t.Fatalf("premature sweep %+v %v", res, err)
	}
	e.clock.Advance(2 * time.Minute) // early 61m, late 31m
	res, err := e.rt.Sweep(e.ctx)
	if err != nil || res.MemoRuns != 1 || res.MemoObjects != 2 {
		t.Fatalf("sweep %+v %v", res, err)
	}
	if countMemo("early") != 0 || countMemo("late") != 2 {
		t.Fatal("sweep cleared the wrong run")
	}
	// An external policy can drive the same cleanup by hand.
	m, err := e.rt.terminalMarkers(e.ctx, nil, 10)
	if err != nil || len(m) != 1 || m[0].RunID != "late" {
		t.Fatalf("markers after sweep %+v %v", m, err)
	}
	if n, err := e.rt.MemoStore().ClearRun(e.ctx, "late"); err != nil || n != 2 {
		t.Fatalf("ClearRun %d %v", n, err)
	}
	if err := e.rt.deleteTerminalMarker(e.ctx, m[0]); err != nil {
		t.Fatal(err)
	}
	if m, _ := e.rt.terminalMarkers(e.ctx, nil, 10); len(m) != 0 {
		t.Fatalf("marker not deleted: %+v", m)
	}
	if err := e.rt.deleteTerminalMarker(e.ctx, terminalMarker{RunID: "x"}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("hand-made marker: %v", err)
	}
	// A restarted worker sweeps at startup.
	e.submit(RunSpec{RunID: "later"})
	e.outcome()
	e.stop()
	e.clock.Advance(time.Hour)
	e.start()
	for countMemo("later") != 0 {
		if e.ctx.Err() != nil {
			t.Fatal("startup sweep never cleared the expired run")
		}
		yield()
	}
	for {
		m, _ := e.rt.terminalMarkers(e.ctx, nil, 10)
		if len(m) == 0 {
			break
		}
		if e.ctx.Err() != nil {
			t.Fatal("marker not deleted")
		}
		yield()
	}
}

// Item 12: lease extension.
func TestLeaseEnsureAtLeastKeepsLongStep(t *testing.T) {
	g := newGate(t)
	var calls atomic.Int32
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		calls.Add(1)
		if err := s.Lease.EnsureAtLeast(ctx, time.Hour); err != nil {
			return StepOutcome{}, err
		}
		g.entered <- s
		<-g.release
		return Succeed(nil), nil
	})
	e := newEnv(t, r)
	e.start()
	out := e.submit(RunSpec{RunID: "long"})
	<-g.entered
	e.clock.Advance(30 * time.Minute) // well past the 1m queue lease
	if _, err := e.q.Reap(e.ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ := e.q.GetJob(e.ctx, out.JobID); j.State != queue.StateClaimed || j.Attempts != 1 {
		t.Fatalf("long step was reaped: %+v", j)
	}
	g.open()
	if o := e.outcome(); o.Status != runstate.Succeeded || calls.Load() != 1 {
		t.Fatalf("outcome %+v, calls %d", o, calls.Load())
	}
}

var _ objstore.Store = (*faults.Store)(nil)
