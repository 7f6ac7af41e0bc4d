package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// waitFor blocks until a background pass named name has run with the
// clock at or after the clock's current time (so after the caller's Advance).
func waitFor(t *testing.T, f *fixture, passes chan pass, name string) {
	t.Helper()
	now := f.clock.Now()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case p := <-passes:
			if p.name == name && !p.at.Before(now) {
				return
			}
		case <-timeout.C:
			t.Fatalf("background %s pass at %s did not run", name, now)
		}
	}
}

func TestReaperRequeuesExpiredLease(t *testing.T) {
	f := newFixture(t, nil) // lease 10s, reap every 1s, 3 attempts
	ctx := ctxT(t)
	passes := f.passes()
	id := f.enqueue("q", "x", EnqueueOptions{})
	c1 := f.claim("q")
	// Renewing pushes the expiry out; the reaper leaves a live lease alone.
	f.clock.Advance(9 * time.Second)
	waitFor(t, f, passes, "reap")
	if err := f.q.RenewLease(ctx, c1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.q.EnsureLeaseAtLeast(ctx, c1, time.Second); err != nil {
		t.Fatal(err)
	}
	if exp, ok := f.q.LeaseExpiry(c1); !ok || !exp.Equal(t0.Add(19*time.Second)) {
		t.Fatalf("lease expiry %v %v, want t0+19s (EnsureLeaseAtLeast must not shorten)", exp, ok)
	}
	if err := f.q.EnsureLeaseAtLeast(ctx, c1, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if exp, _ := f.q.LeaseExpiry(c1); !exp.Equal(t0.Add(29 * time.Second)) {
		t.Fatalf("lease expiry %v, want t0+29s", exp)
	}
	f.clock.Advance(19 * time.Second) // t0+28s: still leased
	waitFor(t, f, passes, "reap")
	f.wantStats("q", Stats{Claimed: 1})
	f.clock.Advance(time.Second) // t0+29s: expired
	waitFor(t, f, passes, "reap")
	f.wantStats("q", Stats{Pending: 1})
	j := f.job(id)
	if j.LastError != "lease expired" || j.State != StatePending {
		t.Fatalf("reaped job %+v", j)
	}
	// The reaped claim can neither settle nor renew.
	if err := f.q.Ack(ctx, c1, &SettlementEffects{KVPuts: []KVWrite{{"k", []byte("v")}}}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("Ack after reap: %v", err)
	}
	if _, err := f.q.Nack(ctx, c1, "x", nil); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("Nack after reap: %v", err)
	}
	if err := f.q.RenewLease(ctx, c1, time.Minute); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("RenewLease after reap: %v", err)
	}
	if _, ok := f.kvGet("k"); ok {
		t.Fatal("a stale ack applied its effects")
	}
	// Re-claimed: the old claim still fails, the new one works.
	c2 := f.claim("q")
	if err := f.q.DeadLetter(ctx, c1, "x", nil); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("DeadLetter by the stale claim after re-claim: %v", err)
	}
	if c2.Job.Attempts != 2 {
		t.Fatalf("attempts %d", c2.Job.Attempts)
	}
	// Last attempt expires: dead.
	f.clock.Advance(10 * time.Second)
	waitFor(t, f, passes, "reap")
	c3 := f.claim("q")
	f.clock.Advance(10 * time.Second)
	waitFor(t, f, passes, "reap")
	f.wantStats("q", Stats{Dead: 1})
	if err := f.q.Ack(ctx, c3, nil); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("Ack after dead-by-reaper: %v", err)
	}
	hist, _ := f.q.Attempts(ctx, id)
	if len(hist) != 3 || hist[0].Outcome != "lease_expired" || hist[2].Outcome != "lease_expired" || !hist[0].EndedAt.Equal(t0.Add(29*time.Second)) {
		t.Fatalf("history %+v", hist)
	}
}

func TestStaleSettlementAfterReclaim(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.ReapInterval = 24 * time.Hour }) // Reap by hand
	ctx := ctxT(t)
	f.enqueue("q", "x", EnqueueOptions{})
	c1 := f.claim("q")
	if _, err := f.q.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(11 * time.Second)
	if n, err := f.q.Reap(ctx); err != nil || n != 1 {
		t.Fatalf("Reap: %d, %v", n, err)
	}
	c2 := f.claim("q")
	eff := &SettlementEffects{Enqueue: []NewJob{{Queue: "next", Payload: []byte("n")}}}
	for name, settle := range map[string]func() error{
		"ack":         func() error { return f.q.Ack(ctx, c1, eff) },
		"nack":        func() error { _, err := f.q.Nack(ctx, c1, "r", eff); return err },
		"dead-letter": func() error { return f.q.DeadLetter(ctx, c1, "r", eff) },
	} {
		if err := settle(); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("%s by the stale claim: %v", name, err)
		}
	}
	f.wantStats("next", Stats{})
	f.wantStats("q", Stats{Claimed: 1})
	if err := f.q.Ack(ctx, c2, eff); err != nil {
		t.Fatal(err)
	}
	f.wantStats("next", Stats{Pending: 1})
}

func TestSchedulerPromotesInOrder(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.DefaultConfig.LeaseDuration = time.Hour })
	ctx := ctxT(t)
	passes := f.passes()
	for i := 5; i >= 1; i-- { // enqueued in reverse of their run order
		f.enqueue("q", fmt.Sprint(i), EnqueueOptions{RunAt: t0.Add(time.Duration(i) * time.Minute)})
	}
	f.enqueue("q", "past", EnqueueOptions{RunAt: t0.Add(-time.Minute)})
	f.wantStats("q", Stats{Pending: 1, Scheduled: 5})
	if c := f.claim("q"); string(c.Job.Payload) != "past" {
		t.Fatalf("claimed %q", c.Job.Payload)
	}
	sched, err := f.q.ListJobs(ctx, "q", StateScheduled, "", 2)
	if err != nil || len(sched) != 2 || string(sched[0].Payload) != "1" || string(sched[1].Payload) != "2" {
		t.Fatalf("scheduled page 1: %v %v", sched, err)
	}
	sched, err = f.q.ListJobs(ctx, "q", StateScheduled, sched[1].ID, 10)
	if err != nil || len(sched) != 3 || string(sched[0].Payload) != "3" {
		t.Fatalf("scheduled page 2: %v %v", sched, err)
	}
	for i := 1; i <= 5; i++ {
		f.noClaim("q")
		if err := f.clock.WaitForTimers(ctx, 2); err != nil { // reaper + scheduler
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
		c, err := f.q.ClaimWait(ctx, "q")
		if err != nil || string(c.Job.Payload) != fmt.Sprint(i) {
			t.Fatalf("minute %d: claimed %v, %v", i, c, err)
		}
		waitFor(t, f, passes, "schedule")
	}
	f.wantStats("q", Stats{Claimed: 6})
}

func TestWakeScheduled(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	id := f.enqueue("q", "x", EnqueueOptions{RunAt: t0.Add(time.Hour)})
	f.clock.Advance(time.Minute)
	out, err := f.q.WakeScheduled(ctx, id, []byte("signal"))
	if err != nil || out != Woken {
		t.Fatal(out, err)
	}
	if out, _ := f.q.WakeScheduled(ctx, id, []byte("again")); out != NotScheduled {
		t.Fatalf("second wake: %s", out)
	}
	if out, _ := f.q.WakeScheduled(ctx, "nope", nil); out != NotFound {
		t.Fatalf("wake of a missing job: %s", out)
	}
	c := f.claim("q")
	if string(c.Job.WakePayload) != "signal" || !c.Job.WokenAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("woken job %+v", c.Job)
	}
	// The wake payload survives a nack and a redelivery.
	if _, err := f.q.Nack(ctx, c, "x", nil); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour)
	if _, err := f.q.PromoteDue(ctx); err != nil {
		t.Fatal(err)
	}
	if c := f.claim("q"); string(c.Job.WakePayload) != "signal" {
		t.Fatalf("redelivered wake payload %q", c.Job.WakePayload)
	}
}

// TestWakeRaces runs wake, the scheduler and cancel against one scheduled
// job at the same moment: exactly one promotion happens, and no job,
// index entry or counter is left behind or doubled.
func TestWakeRaces(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	const rounds = 60
	wokenWins, schedWins, cancelFirst := 0, 0, 0
	for i := range rounds {
		withCancel := i%2 == 1
		id := f.enqueue("q", fmt.Sprint(i), EnqueueOptions{RunAt: f.clock.Now().Add(time.Second)})
		var wg sync.WaitGroup
		var wake WakeOutcome
		var cres CancelResult
		var werr, cerr error
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			wake, werr = f.q.WakeScheduled(ctx, id, []byte("w"))
		}()
		go func() {
			defer wg.Done()
			<-start
			f.clock.Advance(time.Second) // the scheduler's timer fires
		}()
		if withCancel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				cres, cerr = f.q.Cancel(ctx, id, nil)
			}()
		}
		close(start)
		wg.Wait()
		if werr != nil || cerr != nil {
			t.Fatal(werr, cerr)
		}
		if withCancel {
			// Cancel finds the job pending or scheduled in every order.
			if cres != CancelRemoved {
				t.Fatalf("round %d: cancel %s", i, cres)
			}
			if wake == NotFound {
				cancelFirst++
			}
			f.noClaim("q")
			if _, err := f.q.PromoteDue(ctx); err != nil {
				t.Fatal(err)
			}
			f.noClaim("q")
			f.wantStats("q", Stats{})
			continue
		}
		// Without cancel, the job is promoted exactly once: by the wake
		// (which records its payload) or by the scheduler.
		c, err := f.q.ClaimWait(ctx, "q")
		if err != nil || c.Job.ID != id {
			t.Fatalf("round %d: claim %v %v", i, c, err)
		}
		switch wake {
		case Woken:
			wokenWins++
			if string(c.Job.WakePayload) != "w" || c.Job.WokenAt.IsZero() {
				t.Fatalf("round %d: woken job without wake payload: %+v", i, c.Job)
			}
		case NotScheduled:
			schedWins++
			if c.Job.WakePayload != nil || !c.Job.WokenAt.IsZero() {
				t.Fatalf("round %d: promoted by the scheduler but carries a wake: %+v", i, c.Job)
			}
		default:
			t.Fatalf("round %d: wake %s", i, wake)
		}
		f.noClaim("q")
		if _, err := f.q.PromoteDue(ctx); err != nil {
			t.Fatal(err)
		}
		f.noClaim("q")
		if err := f.q.Ack(ctx, c, nil); err != nil {
			t.Fatal(err)
		}
		f.wantStats("q", Stats{})
	}
	t.Logf("wake won %d, scheduler won %d, cancel first %d", wokenWins, schedWins, cancelFirst)
}

func TestCancel(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.DefaultConfig.KeepDoneJobs = time.Hour })
	ctx := ctxT(t)
	eff := func(tag string) *SettlementEffects {
		return &SettlementEffects{KVPuts: []KVWrite{{"cancel/" + tag, []byte(tag)}}}
	}
	// Pending and scheduled: removed, effects applied.
	p := f.enqueue("q", "p", EnqueueOptions{})
	s := f.enqueue("q", "s", EnqueueOptions{RunAt: t0.Add(time.Hour)})
	for _, id := range []string{p, s} {
		res, err := f.q.Cancel(ctx, id, eff(id))
		if err != nil || res != CancelRemoved {
			t.Fatal(res, err)
		}
		if _, ok := f.kvGet("cancel/" + id); !ok {
			t.Fatalf("effects of removing cancel of %s not applied", id)
		}
		if _, err := f.q.GetJob(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("cancelled job still there: %v", err)
		}
	}
	f.wantStats("q", Stats{})
	if res, _ := f.q.Cancel(ctx, "missing", eff("m")); res != CancelNotFound {
		t.Fatalf("cancel missing: %s", res)
	}
	if _, ok := f.kvGet("cancel/m"); ok {
		t.Fatal("not-found cancel applied effects")
	}
	// Claimed then acked: cancel is only requested; the ack wins and the
	// cancel's effects are discarded.
	a := f.enqueue("q", "a", EnqueueOptions{})
	ca := f.claim("q")
	res, err := f.q.Cancel(ctx, a, eff("a"))
	if err != nil || res != CancelRequested {
		t.Fatal(res, err)
	}
	select {
	case <-ca.Cancelled:
	default:
		t.Fatal("Cancelled not closed by Cancel")
	}
	if j := f.job(a); !j.CancelRequested || j.State != StateClaimed {
		t.Fatalf("job after cancel request %+v", j)
	}
	if _, ok := f.kvGet("cancel/a"); ok {
		t.Fatal("cancel request applied effects at once")
	}
	if err := f.q.Ack(ctx, ca, &SettlementEffects{KVPuts: []KVWrite{{"ack/a", nil}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.kvGet("cancel/a"); ok {
		t.Fatal("ack of a cancel-requested job applied the cancel's effects")
	}
	if _, ok := f.kvGet("ack/a"); !ok {
		t.Fatal("ack effects missing")
	}
	if res, _ := f.q.Cancel(ctx, a, nil); res != CancelFinished {
		t.Fatalf("cancel of a done job: %s", res)
	}
	f.wantStats("q", Stats{Done: 1})
}

// TestCancelDuringDeliverySurvivesNack: a cancel requested while the job is
// claimed turns the worker's nack into a removal (no retry), applying the
// Cancel's effects, also across a crash that redelivers the job.
func TestCancelDuringDeliverySurvivesNack(t *testing.T) {
	for _, mode := range []string{"settle", "crash", "reap"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.ReapInterval = 24 * time.Hour })
			ctx := ctxT(t)
			id := f.enqueue("q", "x", EnqueueOptions{})
			c := f.claim("q")
			res, err := f.q.Cancel(ctx, id, &SettlementEffects{
				KVPuts:  []KVWrite{{"terminal", []byte("cancelled")}},
				Enqueue: []NewJob{{Queue: "hooks", Payload: []byte("cancelled " + id)}},
			})
			if err != nil || res != CancelRequested {
				t.Fatal(res, err)
			}
			if mode != "settle" {
				if mode == "crash" {
					f.crash()
				} else {
					f.clock.Advance(time.Minute)
					if n, err := f.q.Reap(ctx); err != nil || n != 1 {
						t.Fatalf("Reap: %d %v", n, err)
					}
				}
				if c = f.claim("q"); c.Job.ID != id || !c.Job.CancelRequested {
					t.Fatalf("redelivered %+v", c.Job)
				}
				select {
				case <-c.Cancelled:
				default:
					t.Fatal("a redelivered cancel-requested job's Cancelled is open")
				}
			}
			// The worker fails because it was cancelled: the job goes, no retry.
			nr, err := f.q.Nack(ctx, c, "context cancelled", &SettlementEffects{KVPuts: []KVWrite{{"nack", nil}}})
			if err != nil || !nr.Cancelled || nr.Dead {
				t.Fatalf("nack: %+v, %v", nr, err)
			}
			if v, ok := f.kvGet("terminal"); !ok || v != "cancelled" {
				t.Fatal("the Cancel's effects were not applied by the removing nack")
			}
			if _, ok := f.kvGet("nack"); ok {
				t.Fatal("the nack's own effects were applied")
			}
			f.wantStats("q", Stats{})
			f.wantStats("hooks", Stats{Pending: 1})
			f.clock.Advance(time.Hour)
			if _, err := f.q.PromoteDue(ctx); err != nil {
				t.Fatal(err)
			}
			f.noClaim("q")
			if _, err := f.q.GetJob(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("GetJob: %v", err)
			}
		})
	}
}

// TestSettleUnlessCancelled: AckUnlessCancelled and
// DeadLetterUnlessCancelled settle like Ack and DeadLetter while no cancel
// is requested; once Cancel marked the job they write nothing, report
// ErrCancelRequested and leave the claim to settle as cancelled.
func TestSettleUnlessCancelled(t *testing.T) {
	settlers := map[string]func(ctx context.Context, q *Queue, c *Claim, eff *SettlementEffects) error{
		"ack": func(ctx context.Context, q *Queue, c *Claim, eff *SettlementEffects) error {
			return q.AckUnlessCancelled(ctx, c, eff)
		},
		"dead-letter": func(ctx context.Context, q *Queue, c *Claim, eff *SettlementEffects) error {
			return q.DeadLetterUnlessCancelled(ctx, c, "permanent", eff)
		},
	}
	for name, settle := range settlers {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx := ctxT(t)
			next := &SettlementEffects{
				KVPuts:  []KVWrite{{"outcome", []byte(name)}},
				Enqueue: []NewJob{{Queue: "q", Payload: []byte("next"), Options: EnqueueOptions{ID: "next"}}},
			}
			// No cancel: an ordinary settlement.
			f.enqueue("q", "plain", EnqueueOptions{})
			if err := settle(ctx, f.q, f.claim("q"), next); err != nil {
				t.Fatal(err)
			}
			if v, ok := f.kvGet("outcome"); !ok || v != name {
				t.Fatalf("effects of an uncancelled %s: %q %v", name, v, ok)
			}
			want := Stats{Pending: 1}
			if name == "dead-letter" {
				want.Dead = 1
			}
			f.wantStats("q", want)
			if c := f.claim("q"); c.Job.ID != "next" {
				t.Fatalf("claimed %s, want the enqueued effect", c.Job.ID)
			} else if err := f.q.Ack(ctx, c, &SettlementEffects{KVDeletes: []string{"outcome"}}); err != nil {
				t.Fatal(err)
			}

			// Cancel requested while the worker settles: nothing lands.
			id := f.enqueue("q", "x", EnqueueOptions{})
			c := f.claim("q")
			if res, err := f.q.Cancel(ctx, id, &SettlementEffects{KVPuts: []KVWrite{{"terminal", []byte("cancelled")}}}); err != nil || res != CancelRequested {
				t.Fatal(res, err)
			}
			err := settle(ctx, f.q, c, next)
			if !errors.Is(err, ErrCancelRequested) {
				t.Fatalf("%s of a cancel-requested job: %v, want ErrCancelRequested", name, err)
			}
			if _, ok := f.kvGet("outcome"); ok {
				t.Fatalf("the refused %s applied its effects", name)
			}
			if j := f.job(id); j.State != StateClaimed || !j.CancelRequested {
				t.Fatalf("job after the refused %s: %+v", name, j)
			}
			want.Pending = 0
			want.Claimed = 1
			f.wantStats("q", want)
			// The claim is still the job's: the worker settles it as cancelled.
			nr, err := f.q.Nack(ctx, c, "cancelled", nil)
			if err != nil || !nr.Cancelled {
				t.Fatalf("nack after the refusal: %+v %v", nr, err)
			}
			if v, ok := f.kvGet("terminal"); !ok || v != "cancelled" {
				t.Fatal("the Cancel's effects were not applied")
			}
			want.Claimed = 0
			f.wantStats("q", want)
			if _, err := f.q.GetJob(ctx, "next"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("the refused settlement enqueued its follow-up: %v", err)
			}
		})
	}
}

// TestEffectsPaths checks that settlement effects apply exactly on ack,
// dead-letter, an attempt-exhausting nack and a removing cancel.
func TestEffectsPaths(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.DefaultConfig.MaxAttempts = 2
		o.ReapInterval = 24 * time.Hour // Reap by hand
	})
	ctx := ctxT(t)
	n := 0
	eff := func() (*SettlementEffects, string) {
		n++
		tag := fmt.Sprint(n)
		return &SettlementEffects{
			Enqueue:   []NewJob{{Queue: "fx", Payload: []byte(tag), Options: EnqueueOptions{ID: "fx-" + tag}}},
			KVPuts:    []KVWrite{{"fx/" + tag, []byte(tag)}},
			KVDeletes: []string{"victim/" + tag},
		}, tag
	}
	check := func(path, tag string, want bool) {
		t.Helper()
		_, put := f.kvGet("fx/" + tag)
		_, victim := f.kvGet("victim/" + tag)
		_, err := f.q.GetJob(ctx, "fx-"+tag)
		enq := err == nil
		if put != want || enq != want || victim == want {
			t.Fatalf("%s: put=%v enqueue=%v victim deleted=%v, want all %v", path, put, enq, !victim, want)
		}
	}
	prep := func(tag string) {
		if err := f.q.KVPut(ctx, "victim/"+tag, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	run := func(path string, want bool, do func(e *SettlementEffects) error) {
		t.Helper()
		e, tag := eff()
		prep(tag)
		if err := do(e); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		check(path, tag, want)
	}
	run("ack", true, func(e *SettlementEffects) error {
		f.enqueue("q", "a", EnqueueOptions{})
		return f.q.Ack(ctx, f.claim("q"), e)
	})
	run("dead-letter", true, func(e *SettlementEffects) error {
		f.enqueue("q", "d", EnqueueOptions{})
		return f.q.DeadLetter(ctx, f.claim("q"), "bad", e)
	})
	var retry *Claim
	run("retrying nack", false, func(e *SettlementEffects) error {
		f.enqueue("q", "n", EnqueueOptions{})
		_, err := f.q.Nack(ctx, f.claim("q"), "again", e)
		f.clock.Advance(time.Minute)
		if _, err := f.q.PromoteDue(ctx); err != nil {
			return err
		}
		retry = f.claim("q")
		return err
	})
	run("exhausting nack", true, func(e *SettlementEffects) error {
		r, err := f.q.Nack(ctx, retry, "again", e)
		if err == nil && !r.Dead {
			return errors.New("second nack of a 2-attempt job did not dead-letter")
		}
		return err
	})
	run("removing cancel", true, func(e *SettlementEffects) error {
		id := f.enqueue("q", "c", EnqueueOptions{})
		_, err := f.q.Cancel(ctx, id, e)
		return err
	})
	var claimed *Claim
	run("requesting cancel", false, func(e *SettlementEffects) error {
		id := f.enqueue("q", "r", EnqueueOptions{})
		claimed = f.claim("q")
		_, err := f.q.Cancel(ctx, id, e)
		return err
	})
	run("stale ack", false, func(e *SettlementEffects) error {
		f.clock.Advance(time.Hour)
		if _, err := f.q.Reap(ctx); err != nil {
			return err
		}
		if err := f.q.Ack(ctx, claimed, e); !errors.Is(err, ErrClaimLost) {
			return fmt.Errorf("stale ack: %v", err)
		}
		return nil
	})
	// An effect enqueue that is a duplicate is skipped, not an error.
	f.enqueue("q", "dup", EnqueueOptions{})
	c := f.claim("q")
	if err := f.q.Ack(ctx, c, &SettlementEffects{Enqueue: []NewJob{{Queue: "fx", Options: EnqueueOptions{ID: "fx-1"}}}}); err != nil {
		t.Fatal(err)
	}
	if j := f.job("fx-1"); string(j.Payload) != "1" {
		t.Fatalf("duplicate effect enqueue overwrote fx-1: %q", j.Payload)
	}
}

func TestRetentionAndDeadJobs(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.QueueConfigs = map[string]QueueConfig{
			"keep": {KeepDoneJobs: time.Hour, DeadRetention: 2 * time.Hour},
		}
	})
	ctx := ctxT(t)
	var done, dead []string
	for i := range 3 {
		done = append(done, f.enqueue("keep", fmt.Sprint("d", i), EnqueueOptions{}))
		if err := f.q.Ack(ctx, f.claim("keep"), nil); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, f.enqueue("keep", fmt.Sprint("x", i), EnqueueOptions{}))
		if err := f.q.DeadLetter(ctx, f.claim("keep"), "bad", nil); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(10 * time.Minute)
	}
	f.enqueue("nokeep", "x", EnqueueOptions{})
	if err := f.q.DeadLetter(ctx, f.claim("nokeep"), "bad", nil); err != nil {
		t.Fatal(err)
	}
	f.wantStats("keep", Stats{Done: 3, Dead: 3})
	if j := f.job(done[0]); j.State != StateDone || !j.CompletedAt.Equal(t0) || string(j.Payload) != "d0" {
		t.Fatalf("done job %+v", j)
	}
	if j, err := f.q.WaitForCompletion(ctx, done[1]); err != nil || j.State != StateDone {
		t.Fatalf("WaitForCompletion of a done job: %+v %v", j, err)
	}
	dj, err := f.q.DeadJobs(ctx, "keep", "", 2)
	if err != nil || len(dj) != 2 || dj[0].ID != dead[0] || dj[1].ID != dead[1] || dj[0].LastError != "bad" {
		t.Fatalf("dead jobs page 1: %+v %v", dj, err)
	}
	dj, _ = f.q.DeadJobs(ctx, "keep", dj[1].ID, 2)
	if len(dj) != 1 || dj[0].ID != dead[2] {
		t.Fatalf("dead jobs page 2: %+v", dj)
	}
	dn, _ := f.q.ListJobs(ctx, "keep", StateDone, "", 0)
	if len(dn) != 3 {
		t.Fatalf("done list %d", len(dn))
	}
	// Done jobs completed at t0, t0+10m, t0+20m with 1h retention: at
	// t0+65m only the first is due. Dead jobs (2h retention) are not.
	f.clock.Set(t0.Add(65 * time.Minute))
	r, err := f.q.Sweep(ctx)
	if err != nil || r != (SweepResult{Done: 1}) {
		t.Fatalf("sweep at 65m: %+v %v", r, err)
	}
	f.clock.Set(t0.Add(3 * time.Hour))
	r, err = f.q.Sweep(ctx)
	if err != nil || r != (SweepResult{Done: 2, Dead: 3}) {
		t.Fatalf("sweep at 3h: %+v %v", r, err)
	}
	f.wantStats("keep", Stats{})
	f.wantStats("nokeep", Stats{Dead: 1}) // DeadRetention 0 keeps dead jobs
	// RequeueDead resets attempts and makes the job claimable.
	nk, _ := f.q.DeadJobs(ctx, "nokeep", "", 0)
	if err := f.q.RequeueDead(ctx, nk[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := f.q.RequeueDead(ctx, nk[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second RequeueDead: %v", err)
	}
	if c := f.claim("nokeep"); c.Job.Attempts != 1 {
		t.Fatalf("requeued job attempts %d", c.Job.Attempts)
	}
}

func TestBackgroundSweeper(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.SweepInterval = time.Minute
		o.DefaultConfig.KeepDoneJobs = time.Minute
	})
	ctx := ctxT(t)
	passes := f.passes()
	id := f.enqueue("q", "x", EnqueueOptions{})
	if err := f.q.Ack(ctx, f.claim("q"), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.clock.WaitForTimers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	waitFor(t, f, passes, "sweep")
	if _, err := f.q.GetJob(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("swept job: %v", err)
	}
}

func TestWaitForCompletion(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	ids := []string{f.enqueue("q", "ack", EnqueueOptions{}), f.enqueue("q", "dead", EnqueueOptions{}), f.enqueue("q", "cancel", EnqueueOptions{RunAt: t0.Add(time.Hour)})}
	type result struct {
		j   Job
		err error
	}
	registered := make(chan string, len(ids))
	hook := func(id string) { registered <- id }
	f.q.waitHook.Store(&hook)
	res := make([]chan result, len(ids))
	for i, id := range ids {
		res[i] = make(chan result, 1)
		go func() {
			j, err := f.q.WaitForCompletion(ctx, id)
			res[i] <- result{j, err}
		}()
	}
	// Settle only after every waiter has registered and read the job.
	for range ids {
		<-registered
	}
	f.q.waitHook.Store(nil)
	if err := f.q.Ack(ctx, f.claim("q"), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.q.DeadLetter(ctx, f.claim("q"), "bad", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Cancel(ctx, ids[2], nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []State{StateDone, StateDead, StateCancelled} {
		r := <-res[i]
		if r.err != nil || r.j.State != want || r.j.ID != ids[i] {
			t.Fatalf("waiter %d: %+v %v, want %s", i, r.j, r.err, want)
		}
	}
	if _, err := f.q.WaitForCompletion(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("wait on missing: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	f.enqueue("q", "slow", EnqueueOptions{ID: "slow"})
	if _, err := f.q.WaitForCompletion(cctx, "slow"); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with cancelled ctx: %v", err)
	}
}

func TestListJobsPaging(t *testing.T) {
	f := newFixture(t, nil)
	ctx := ctxT(t)
	var ids []string
	for i := range 25 {
		ids = append(ids, f.enqueue("q", fmt.Sprint(i), EnqueueOptions{}))
	}
	var got []string
	after := ""
	for {
		page, err := f.q.ListJobs(ctx, "q", StatePending, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			got = append(got, j.ID)
		}
		after = page[len(page)-1].ID
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("paged pending listing\n got %v\nwant %v", got, ids)
	}
	cs, _ := f.q.ClaimBatch(ctx, "q", 5)
	claimed, _ := f.q.ListJobs(ctx, "q", StateClaimed, "", 0)
	if len(claimed) != 5 || len(cs) != 5 {
		t.Fatalf("claimed listing %d", len(claimed))
	}
	// A cursor job that moved on still positions the listing.
	page, _ := f.q.ListJobs(ctx, "q", StatePending, ids[2], 3)
	if len(page) != 3 || page[0].ID != ids[5] {
		t.Fatalf("listing after a claimed cursor: %v", page)
	}
	if _, err := f.q.ListJobs(ctx, "other", StatePending, ids[0], 3); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cursor from another queue: %v", err)
	}
}
