package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// errStoreDown is what a stopped store answers: a retry may fix it.
var errStoreDown = errors.New("connection refused")

// outageFixture is a queue on a store whose PUTs can be made to fail, as
// when the S3 server stops: the kv retries them until the store is back.
func outageFixture(t *testing.T) (*fixture, *faults.Store) {
	t.Helper()
	fs := faults.New(mem.New(), 1)
	f := &fixture{t: t, store: fs, clock: clock.NewMock(t0)}
	f.opts = Options{
		Clock:         f.clock,
		DefaultConfig: QueueConfig{MaxAttempts: 3, LeaseDuration: time.Hour, BackoffBase: time.Second, BackoffMax: 8 * time.Second},
		ReapInterval:  time.Hour,
		SweepInterval: -1,
		Entropy:       seededEntropy{rand.New(rand.NewPCG(1, 2))},
		Logger:        quietLogger(),
	}
	f.open()
	t.Cleanup(func() {
		fs.Clear()
		_ = f.q.Close()
	})
	return f, fs
}

// storeDown makes every PUT fail and returns once the writer felt it a
// few times (its WAL write is retrying).
func storeDown(t *testing.T, ctx context.Context, fs *faults.Store) {
	t.Helper()
	before := fs.Injected()
	fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: errStoreDown})
	if err := fs.WaitInjected(ctx, before+3); err != nil {
		t.Fatalf("the writer never tried to write during the outage: %v", err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A job is claimable only once the commit that enqueued it is durable: a
// worker never starts work a crash could take back.
func TestClaimWaitsForTheEnqueueToBeDurable(t *testing.T) {
	ctx := testCtx(t)
	f, fs := outageFixture(t)
	fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: errStoreDown})
	enq := make(chan error, 1)
	go func() {
		_, err := f.q.Enqueue(ctx, "q", []byte("p"), EnqueueOptions{ID: "j1"})
		enq <- err
	}()
	if err := fs.WaitInjected(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if c, err := f.q.Claim(ctx, "q"); err != nil || c != nil {
		t.Fatalf("Claim during the outage = %v, %v; want nothing: the enqueue is not durable", c, err)
	}
	fs.Clear()
	if err := <-enq; err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	c, err := f.q.Claim(ctx, "q")
	if err != nil || c == nil || c.Job.ID != "j1" {
		t.Fatalf("Claim after the outage = %v, %v; want job j1", c, err)
	}
}

// ClaimWait wakes when the enqueue becomes durable, not when it commits.
func TestClaimWaitWakesWhenDurable(t *testing.T) {
	ctx := testCtx(t)
	f, fs := outageFixture(t)
	fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: errStoreDown})
	claimed := make(chan *Claim, 1)
	go func() {
		c, _ := f.q.ClaimWait(ctx, "q")
		claimed <- c
	}()
	enq := make(chan error, 1)
	go func() {
		_, err := f.q.Enqueue(ctx, "q", []byte("p"), EnqueueOptions{ID: "j1"})
		enq <- err
	}()
	if err := fs.WaitInjected(ctx, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-claimed:
		t.Fatalf("ClaimWait returned %v during the outage; the enqueue is not durable", c)
	default:
	}
	fs.Clear()
	if err := <-enq; err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if c := <-claimed; c == nil || c.Job.ID != "j1" {
		t.Fatalf("ClaimWait = %v; want job j1", c)
	}
}

// The next job a settlement enqueues (a run's next step) waits for the
// settlement to be durable; so does the completion it reports.
func TestSettlementPublishedOnlyWhenDurable(t *testing.T) {
	ctx := testCtx(t)
	f, fs := outageFixture(t)
	if _, err := f.q.Enqueue(ctx, "q", []byte("p"), EnqueueOptions{ID: "j1", Headers: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	c, err := f.q.Claim(ctx, "q")
	if err != nil || c == nil {
		t.Fatalf("Claim = %v, %v", c, err)
	}
	registered := make(chan struct{})
	hook := func(string) { close(registered) }
	f.q.waitHook.Store(&hook)
	waited := make(chan Job, 1)
	go func() {
		j, _ := f.q.WaitForCompletion(ctx, "j1")
		waited <- j
	}()
	<-registered
	f.q.waitHook.Store(nil)

	storeDown(t, ctx, fs)
	reported := make(chan struct{})
	acked := make(chan error, 1)
	go func() {
		acked <- f.q.Ack(ctx, c, &SettlementEffects{
			Enqueue:   []NewJob{{Queue: "q", Payload: []byte("next"), Options: EnqueueOptions{ID: "j2"}}},
			OnDurable: func() { close(reported) },
		})
	}()
	if err := fs.WaitInjected(ctx, fs.Injected()+3); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-waited:
		t.Fatalf("WaitForCompletion returned %s during the outage; the ack is not durable", j.State)
	case <-reported:
		t.Fatal("OnDurable ran during the outage")
	case err := <-acked:
		t.Fatalf("Ack returned %v during the outage", err)
	default:
	}
	if c2, err := f.q.Claim(ctx, "q"); err != nil || c2 != nil {
		t.Fatalf("Claim during the outage = %v, %v; want nothing: the ack that enqueued j2 is not durable", c2, err)
	}
	// A completion read from memory after the ack applied waits too.
	late := make(chan Job, 1)
	go func() {
		j, _ := f.q.WaitForCompletion(ctx, "j1")
		late <- j
	}()
	fs.Clear()
	if err := <-acked; err != nil {
		t.Fatalf("Ack: %v", err)
	}
	<-reported
	if j := <-waited; j.State != StateDone {
		t.Fatalf("WaitForCompletion = %s; want done", j.State)
	}
	if j := <-late; j.ID != "" && j.State != StateDone {
		t.Fatalf("late WaitForCompletion = %+v", j)
	}
	if c2, err := f.q.Claim(ctx, "q"); err != nil || c2 == nil || c2.Job.ID != "j2" {
		t.Fatalf("Claim after the outage = %v, %v; want j2", c2, err)
	}
}

// A job scheduled by a commit still on its way to the store is not
// claimed even after the scheduler promoted it (a non-durable move).
func TestPromotedJobGatedUntilItsScheduleIsDurable(t *testing.T) {
	ctx := testCtx(t)
	f, fs := outageFixture(t)
	fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Err: errStoreDown})
	enq := make(chan error, 1)
	go func() {
		_, err := f.q.Enqueue(ctx, "q", []byte("p"), EnqueueOptions{ID: "j1", RunAt: t0.Add(time.Second)})
		enq <- err
	}()
	if err := fs.WaitInjected(ctx, 3); err != nil {
		t.Fatal(err)
	}
	promoted := make(chan struct{}, 16)
	hook := func(name string, _ time.Time) {
		if name == "schedule" {
			promoted <- struct{}{}
		}
	}
	f.q.passHook.Store(&hook)
	f.clock.Advance(2 * time.Second)
	<-promoted
	j, err := f.q.GetJob(ctx, "j1")
	if err != nil || j.State != StatePending {
		t.Fatalf("job after the scheduler pass = %+v, %v; want pending", j, err)
	}
	if c, err := f.q.Claim(ctx, "q"); err != nil || c != nil {
		t.Fatalf("Claim = %v, %v; want nothing: the enqueue is not durable", c, err)
	}
	fs.Clear()
	if err := <-enq; err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if c, err := f.q.Claim(ctx, "q"); err != nil || c == nil || c.Job.ID != "j1" {
		t.Fatalf("Claim after the outage = %v, %v; want j1", c, err)
	}
}

// An Ack with ClaimFirst creates its first follow-up job claimed by the
// caller, in the same commit; one due later, or a duplicate, is not.
func TestAckClaimFirst(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, nil)
	claimOne := func(id string) *Claim {
		t.Helper()
		if _, err := f.q.Enqueue(ctx, "q", []byte("p"), EnqueueOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		c, err := f.q.Claim(ctx, "q")
		if err != nil || c == nil || c.Job.ID != id {
			t.Fatalf("Claim = %v, %v", c, err)
		}
		return c
	}
	c := claimOne("a")
	eff := &SettlementEffects{ClaimFirst: true, Enqueue: []NewJob{
		{Queue: "q", Payload: []byte("next"), Options: EnqueueOptions{ID: "b", DedupKey: "k"}},
		{Queue: "q", Payload: []byte("other"), Options: EnqueueOptions{ID: "c"}},
	}}
	if err := f.q.Ack(ctx, c, eff); err != nil {
		t.Fatal(err)
	}
	next := eff.Claimed()
	if next == nil || next.Job.ID != "b" || string(next.Job.Payload) != "next" || next.Job.Attempts != 1 {
		t.Fatalf("Claimed() = %+v; want job b claimed, attempt 1", next)
	}
	if j, err := f.q.GetJob(ctx, "b"); err != nil || j.State != StateClaimed {
		t.Fatalf("job b = %+v, %v; want claimed", j, err)
	}
	if j, err := f.q.GetJob(ctx, "c"); err != nil || j.State != StatePending {
		t.Fatalf("job c = %+v, %v; want pending (only the first is claimed)", j, err)
	}
	// Claimed by the ack, b is not handed out again; it settles normally.
	if c2, err := f.q.Claim(ctx, "q"); err != nil || c2 == nil || c2.Job.ID != "c" {
		t.Fatalf("Claim = %v, %v; want c", c2, err)
	}
	if err := f.q.Ack(ctx, next, nil); err != nil {
		t.Fatalf("Ack of the claim made by ClaimFirst: %v", err)
	}

	// Due later: scheduled, no claim.
	c = claimOne("d")
	eff = &SettlementEffects{ClaimFirst: true, Enqueue: []NewJob{{Queue: "q", Options: EnqueueOptions{ID: "e", RunAt: t0.Add(time.Hour)}}}}
	if err := f.q.Ack(ctx, c, eff); err != nil || eff.Claimed() != nil {
		t.Fatalf("Ack = %v, Claimed() = %v; want no claim for a job due later", err, eff.Claimed())
	}
	// A duplicate: no job, no claim.
	c = claimOne("f")
	eff = &SettlementEffects{ClaimFirst: true, Enqueue: []NewJob{{Queue: "q", Options: EnqueueOptions{ID: "e"}}}}
	if err := f.q.Ack(ctx, c, eff); err != nil || eff.Claimed() != nil {
		t.Fatalf("Ack = %v, Claimed() = %v; want no claim for a duplicate", err, eff.Claimed())
	}
	// DeadLetter ignores ClaimFirst: its follow-up is pending.
	c = claimOne("g")
	eff = &SettlementEffects{ClaimFirst: true, Enqueue: []NewJob{{Queue: "q", Options: EnqueueOptions{ID: "h"}}}}
	if err := f.q.DeadLetter(ctx, c, "bad", eff); err != nil || eff.Claimed() != nil {
		t.Fatalf("DeadLetter = %v, Claimed() = %v", err, eff.Claimed())
	}
	if j, err := f.q.GetJob(ctx, "h"); err != nil || j.State != StatePending {
		t.Fatalf("job h = %+v, %v; want pending", j, err)
	}
}

// A job ClaimFirst claimed is durable as claimed: a crash before it
// settles requeues it at the next Open with its attempt counted.
func TestClaimFirstSurvivesAsInterrupted(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, nil)
	if _, err := f.q.Enqueue(ctx, "q", nil, EnqueueOptions{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	c, err := f.q.Claim(ctx, "q")
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	eff := &SettlementEffects{ClaimFirst: true, Enqueue: []NewJob{{Queue: "q", Options: EnqueueOptions{ID: "b"}}}}
	if err := f.q.Ack(ctx, c, eff); err != nil || eff.Claimed() == nil {
		t.Fatal(err, eff.Claimed())
	}
	f.crash()
	j, err := f.q.GetJob(ctx, "b")
	if err != nil || j.State != StatePending || j.Attempts != 1 {
		t.Fatalf("after a crash, job b = %+v, %v; want pending with 1 attempt counted", j, err)
	}
}

// A durable settlement and an enqueue learn their share of the WAL PUT
// that carried them.
func TestWALShare(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, nil)
	res, err := f.q.EnqueueWithKV(ctx, "q", nil, EnqueueOptions{ID: "a"}, nil)
	if err != nil || res.WALShare <= 0 || res.WALShare > 1 {
		t.Fatalf("EnqueueWithKV = %+v, %v; want a share in (0, 1]", res, err)
	}
	c, err := f.q.Claim(ctx, "q")
	if err != nil || c == nil {
		t.Fatal(c, err)
	}
	eff := &SettlementEffects{KVPuts: []KVWrite{{Key: "k", Value: []byte("v")}}}
	if err := f.q.Ack(ctx, c, eff); err != nil {
		t.Fatal(err)
	}
	// The lone ack and the claim that lingered for it share one PUT.
	if got := eff.WALShare(); got != 0.5 {
		t.Fatalf("WALShare = %v; want 0.5 (the claim rode the ack's PUT)", got)
	}
}
