package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
)

// checkInvariants verifies, for each queue, that the state counters equal
// the number of jobs listed in each state's index and that every listed job
// is in that state.
func checkInvariants(t *testing.T, f *fixture, queues ...string) {
	t.Helper()
	ctx := ctxT(t)
	for _, qn := range queues {
		st := f.stats(qn)
		for _, c := range []struct {
			state State
			want  int64
		}{{StatePending, st.Pending}, {StateScheduled, st.Scheduled}, {StateClaimed, st.Claimed}, {StateDone, st.Done}, {StateDead, st.Dead}} {
			n := int64(0)
			after := ""
			for {
				page, err := f.q.ListJobs(ctx, qn, c.state, after, 1000)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, j := range page {
					if j.State != c.state {
						t.Fatalf("queue %q: job %s listed as %s is %s", qn, j.ID, c.state, j.State)
					}
				}
				n += int64(len(page))
				after = page[len(page)-1].ID
			}
			if n != c.want {
				t.Fatalf("queue %q: counter %s = %d, index holds %d", qn, c.state, c.want, n)
			}
		}
	}
}

func (f *fixture) sync() {
	f.t.Helper()
	if err := f.q.DB().Sync(ctxT(f.t)); err != nil {
		f.t.Fatal(err)
	}
}

// TestCrashReopenEveryStep crashes the writer (a new writer fences it
// without a clean close) after each step of a job's life and checks what
// the next writer finds.
func TestCrashReopenEveryStep(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.DefaultConfig.KeepDoneJobs = time.Hour
		o.QueueConfigs = map[string]QueueConfig{"one": {MaxAttempts: 1}}
		o.ReapInterval = 24 * time.Hour
	})
	ctx := ctxT(t)
	queues := []string{"q", "one", "fx"}
	step := func(name string, check func()) {
		t.Helper()
		f.crash()
		checkInvariants(t, f, queues...)
		check()
		t.Logf("step %q: ok", name)
	}

	// Enqueue: durable.
	a := f.enqueue("q", "a", EnqueueOptions{DedupKey: "dk"})
	step("enqueued", func() {
		if j := f.job(a); j.State != StatePending || string(j.Payload) != "a" {
			t.Fatalf("%+v", j)
		}
		if r, _ := f.q.Enqueue(ctx, "q", nil, EnqueueOptions{DedupKey: "dk"}); !r.Duplicate {
			t.Fatal("dedup key lost over a crash")
		}
	})

	// Claimed, and the claim made durable: requeued as interrupted.
	c := f.claim("q")
	f.sync()
	step("claimed", func() {
		j := f.job(a)
		hist, _ := f.q.Attempts(ctx, a)
		if j.State != StatePending || j.Attempts != 1 || len(hist) != 1 || hist[0].Outcome != "interrupted" {
			t.Fatalf("%+v %+v", j, hist)
		}
		if err := f.q.Ack(ctx, c, nil); err == nil {
			t.Fatal("a claim from before the crash settled")
		}
	})

	// Nacked (retry), made durable: scheduled.
	c = f.claim("q")
	if _, err := f.q.Nack(ctx, c, "oops", nil); err != nil {
		t.Fatal(err)
	}
	f.sync()
	step("nacked", func() {
		if j := f.job(a); j.State != StateScheduled || j.LastError != "oops" {
			t.Fatalf("%+v", j)
		}
	})

	// Promoted by time after the crash.
	f.clock.Advance(time.Hour)
	if _, err := f.q.PromoteDue(ctx); err != nil {
		t.Fatal(err)
	}
	c = f.claim("q")
	if c.Job.ID != a || c.Job.Attempts != 3 {
		t.Fatalf("%+v", c.Job)
	}
	// Acked with effects: durable, effects present, job retained as done.
	if err := f.q.Ack(ctx, c, &SettlementEffects{
		Enqueue: []NewJob{{Queue: "fx", Payload: []byte("next"), Options: EnqueueOptions{ID: "next"}}},
		KVPuts:  []KVWrite{{"out/a", []byte("result")}},
	}); err != nil {
		t.Fatal(err)
	}
	step("acked", func() {
		if j := f.job(a); j.State != StateDone {
			t.Fatalf("%+v", j)
		}
		if v, _ := f.kvGet("out/a"); v != "result" {
			t.Fatal("ack effect KV lost")
		}
		if j := f.job("next"); j.State != StatePending {
			t.Fatal("ack effect enqueue lost")
		}
	})

	// Dead-lettered.
	c = f.claim("fx")
	if err := f.q.DeadLetter(ctx, c, "bad", nil); err != nil {
		t.Fatal(err)
	}
	step("dead", func() {
		if j := f.job("next"); j.State != StateDead || j.LastError != "bad" {
			t.Fatalf("%+v", j)
		}
	})
	if err := f.q.RequeueDead(ctx, "next"); err != nil {
		t.Fatal(err)
	}
	step("requeued from dead", func() {
		if j := f.job("next"); j.State != StatePending || j.Attempts != 0 {
			t.Fatalf("%+v", j)
		}
	})

	// Scheduled, woken.
	s := f.enqueue("q", "s", EnqueueOptions{RunAt: f.clock.Now().Add(time.Hour)})
	step("scheduled", func() {
		if j := f.job(s); j.State != StateScheduled {
			t.Fatalf("%+v", j)
		}
	})
	if out, err := f.q.WakeScheduled(ctx, s, []byte("sig")); err != nil || out != Woken {
		t.Fatal(out, err)
	}
	step("woken", func() {
		if j := f.job(s); j.State != StatePending || string(j.WakePayload) != "sig" {
			t.Fatalf("%+v", j)
		}
	})

	// Claimed on its only attempt, then a crash: dead, not requeued.
	o := f.enqueue("one", "o", EnqueueOptions{})
	f.claim("one")
	f.sync()
	step("claimed on the last attempt", func() {
		if j := f.job(o); j.State != StateDead || j.Attempts != 1 {
			t.Fatalf("%+v", j)
		}
	})

	// Claim not made durable: after the crash the job is pending either
	// way, with the claim forgotten or counted as interrupted.
	c = f.claim("q")
	step("claimed, not synced", func() {
		j := f.job(c.Job.ID)
		if j.State != StatePending {
			t.Fatalf("%+v", j)
		}
	})

	// Done retention outlives the crash and is swept after it.
	f.clock.Advance(2 * time.Hour)
	if r, err := f.q.Sweep(ctx); err != nil || r.Done != 1 {
		t.Fatalf("sweep %+v %v", r, err)
	}
	step("swept", func() {
		if _, err := f.q.GetJob(ctx, a); !errors.Is(err, ErrNotFound) {
			t.Fatalf("swept job after crash: %v", err)
		}
	})
}

func TestFIFOAcrossReopen(t *testing.T) {
	f := newFixture(t, nil)
	var want []string
	for i := range 3 {
		want = append(want, f.enqueue("q", fmt.Sprint(i), EnqueueOptions{}))
	}
	f.crash()
	for i := 3; i < 5; i++ {
		want = append(want, f.enqueue("q", fmt.Sprint(i), EnqueueOptions{}))
	}
	f.reopen()
	want = append(want, f.enqueue("q", "5", EnqueueOptions{}))
	for i, id := range want {
		if c := f.claim("q"); c.Job.ID != id {
			t.Fatalf("claim %d: %q, want job %d", i, c.Job.Payload, i)
		}
	}
}

func TestFencedWriter(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	old := f.q
	f.open() // a second writer fences the first
	defer old.Close()
	_, err := old.Enqueue(ctx, "q", []byte("x"), EnqueueOptions{})
	if !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("enqueue on a fenced queue: %v, want kv.ErrFenced", err)
	}
	f.wantStats("q", Stats{})
}

func TestReader(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.DefaultConfig.KeepDoneJobs = time.Hour })
	ctx := ctxT(t)
	id := f.enqueue("q", "x", EnqueueOptions{})
	if err := f.q.KVPut(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(ctx, f.store, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if s, err := r.Stats(ctx, "q"); err != nil || s.Pending != 1 {
		t.Fatalf("reader stats %+v %v", s, err)
	}
	if j, err := r.GetJob(ctx, id); err != nil || string(j.Payload) != "x" {
		t.Fatalf("reader job %+v %v", j, err)
	}
	if v, err := r.KVGet(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatal(v, err)
	}
	c := f.claim("q")
	if err := f.q.Ack(ctx, c, &SettlementEffects{KVPuts: []KVWrite{{"k2", []byte("w")}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Stats(ctx, "q"); s != (Stats{Done: 1}) {
		t.Fatalf("reader stats after refresh %+v", s)
	}
	if es, err := r.KVScan(ctx, "k", "", 10); err != nil || len(es) != 2 {
		t.Fatalf("reader scan %v %v", es, err)
	}
	if hs, err := r.Attempts(ctx, id); err != nil || len(hs) != 1 || hs[0].Outcome != "acked" {
		t.Fatalf("reader attempts %+v %v", hs, err)
	}
	if js, err := r.ListJobs(ctx, "q", StateDone, "", 0); err != nil || len(js) != 1 {
		t.Fatalf("reader list %v %v", js, err)
	}
	if js, err := r.DeadJobs(ctx, "q", "", 0); err != nil || len(js) != 0 {
		t.Fatalf("reader dead %v %v", js, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetJob(ctx, id); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed reader: %v", err)
	}
}

func TestConcurrentProducersAndClaimers(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.DefaultConfig.LeaseDuration = time.Hour })
	ctx := ctxT(t)
	const producers, perProducer, workers = 4, 50, 4
	errs := make(chan error, producers+workers)
	for p := range producers {
		go func() {
			for i := range perProducer {
				if _, err := f.q.Enqueue(ctx, "q", []byte(fmt.Sprint(p, "-", i)), EnqueueOptions{DedupKey: fmt.Sprint(p, "-", i)}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	seen := make(chan string, producers*perProducer)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for range workers {
		go func() {
			for {
				c, err := f.q.ClaimWait(wctx, "q")
				if err != nil {
					errs <- nil
					return
				}
				if err := f.q.Ack(ctx, c, &SettlementEffects{KVPuts: []KVWrite{{"done/" + string(c.Job.Payload), nil}}}); err != nil {
					errs <- err
					return
				}
				seen <- string(c.Job.Payload)
			}
		}()
	}
	got := map[string]bool{}
	for len(got) < producers*perProducer {
		p := <-seen
		if got[p] {
			t.Fatalf("job %s delivered twice without a failure", p)
		}
		got[p] = true
	}
	stop()
	for range producers + workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f.wantStats("q", Stats{})
	all, _ := f.q.KVScan(ctx, "done/", "", 1000)
	if len(all) != producers*perProducer {
		t.Fatalf("%d ack effects, want %d", len(all), producers*perProducer)
	}
}
