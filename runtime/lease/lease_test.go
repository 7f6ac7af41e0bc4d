package lease

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
	clk "github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeSystem is a machine for the takeover rules: this process, the boot
// time and the processes that run.
type fakeSystem struct {
	self Process
	boot time.Time

	mu    sync.Mutex
	procs map[int]uint64 // running pid -> start time
}

func (f *fakeSystem) Self() Process       { return f.self }
func (f *fakeSystem) BootTime() time.Time { return f.boot }
func (f *fakeSystem) Probe(pid int) (uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pid == f.self.PID {
		return f.self.Start, true, nil
	}
	start, ok := f.procs[pid]
	return start, ok, nil
}

func (f *fakeSystem) run(pid int, start uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.procs == nil {
		f.procs = map[int]uint64{}
	}
	f.procs[pid] = start
}

// machine returns the System of process pid on host with the given boot.
func machine(host, boot string, pid int, start uint64) *fakeSystem {
	return &fakeSystem{self: Process{Host: host, BootID: boot, PIDNamespace: "pid:[1]", PID: pid, Start: start}, boot: t0.Add(-time.Hour)}
}

func opts(owner string, sys System, clock clk.Clock) Options {
	return Options{Owner: owner, System: sys, Clock: clock, Logger: quiet()}
}

func wantActive(t *testing.T, err error, holder string) *ActiveError {
	t.Helper()
	var active *ActiveError
	if !errors.Is(err, ErrActive) || !errors.As(err, &active) {
		t.Fatalf("err = %v; want an ActiveError", err)
	}
	if active.Holder.Owner != holder {
		t.Fatalf("holder %q, want %q (%v)", active.Holder.Owner, holder, err)
	}
	return active
}

func wantLost(t *testing.T, err error, holder string) {
	t.Helper()
	var lost *LostError
	if !errors.Is(err, ErrLost) || !errors.As(err, &lost) || lost.Holder.Owner != holder {
		t.Fatalf("err = %v; want a LostError naming %q", err, holder)
	}
}

func timers(t *testing.T, clock *clk.Mock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clock.WaitForTimers(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers: %v", n, err)
	}
}

func release(t *testing.T, l *Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// acquireAsync runs Acquire in a goroutine; the result comes on the
// channel.
type acquired struct {
	l   *Lease
	err error
}

func acquireAsync(store objstore.Store, o Options) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := Acquire(context.Background(), store, o)
		ch <- acquired{l, err}
	}()
	return ch
}

// TestAcquireRenewRelease covers the lease object's life: what it
// records, one PUT per renewal on the holder's clock, Live, Release.
func TestAcquireRenewRelease(t *testing.T) {
	ctx := context.Background()
	store := counting.New(mem.New())
	clock := clk.NewMock(t0)
	sys := machine("h1", "boot-1", 100, 77)
	o := opts("a", sys, clock)
	o.Endpoint = "http://127.0.0.1:8080"
	a, err := Acquire(ctx, store, o)
	if err != nil {
		t.Fatal(err)
	}
	info := a.Info()
	if info.Mechanism != MechanismObject || info.Host != "h1" || info.BootID != "boot-1" || info.PIDNamespace != "pid:[1]" ||
		info.PID != 100 || info.PIDStart != 77 || info.TTL != DefaultTTL || !info.Expires.Equal(t0.Add(DefaultTTL)) ||
		info.Endpoint != "http://127.0.0.1:8080" || !info.Acquired.Equal(t0) {
		t.Fatalf("lease info %+v", info)
	}
	if s := info.String(); !strings.Contains(s, "writer a (pid 100 on h1") || !strings.Contains(s, "since 2026-03-04T05:06:07Z") {
		t.Fatalf("Info.String() = %q", s)
	}
	if _, _, took := a.TookOver(); took {
		t.Fatal("a free lease reported as taken over")
	}
	if got, live, err := Live(ctx, store, Options{Clock: clock}); err != nil || !live || got.Owner != "a" {
		t.Fatalf("Live = %+v, %v, %v", got, live, err)
	}

	store.Reset()
	timers(t, clock, 1)
	clock.Advance(5 * time.Second)
	timers(t, clock, 1) // re-armed after the renewal
	if c := store.Counts(); c.Puts != 1 || c.Gets != 0 {
		t.Fatalf("one renewal cost %+v, want one PUT", c)
	}
	if info := a.Info(); info.Renewals != 1 || !info.Renewed.Equal(t0.Add(5*time.Second)) || !info.Expires.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after a renewal: %+v", info)
	}
	if got := a.ValidFor(); got != 15*time.Second-DefaultTTL/100 {
		t.Fatalf("ValidFor right after a renewal = %v", got)
	}

	release(t, a)
	release(t, a) // idempotent
	if _, live, _ := Live(ctx, store, Options{Clock: clock}); live {
		t.Fatal("a released lease reported live")
	}
	if err := a.AwaitValid(ctx, 0); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "released") {
		t.Fatalf("AwaitValid after Release: %v", err)
	}
	b, err := Acquire(ctx, store, opts("b", machine("h2", "boot-2", 1, 1), clock))
	if err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
	if _, _, took := b.TookOver(); took {
		t.Fatal("a released lease reported as taken over")
	}
	release(t, b)
}

// TestLiveHolderIsNeverTakenOver: a holder whose stated expiry has not
// passed is refused at once, and one whose clock lags so far that it
// looks expired is watched and found renewing: never taken over, however
// long the taker watches.
func TestLiveHolderIsNeverTakenOver(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clockA := clk.NewMock(t0)
	a, err := Acquire(ctx, store, opts("a", machine("h1", "boot-1", 100, 77), clockA))
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, a)

	// Same clock, other machine: live.
	clockB := clk.NewMock(t0.Add(time.Second))
	_, err = Acquire(ctx, store, opts("b", machine("h2", "boot-2", 200, 1), clockB))
	if active := wantActive(t, err, "a"); active.Renewed {
		t.Fatal("Renewed set without watching")
	}

	// B's clock runs 30 s ahead of A's: A's expiry looks 15 s old, inside
	// the skew allowance, so B watches, and sees A renew each time.
	clockB.Set(t0.Add(30 * time.Second))
	for round := range 3 {
		var waits []Waiting
		o := opts("b", machine("h2", "boot-2", 200, 1), clockB)
		var mu sync.Mutex
		o.OnWait = func(w Waiting) { mu.Lock(); waits = append(waits, w); mu.Unlock() }
		res := acquireAsync(store, o)
		timers(t, clockB, 1) // B watches
		// A renews (its loop, on its own clock) before B's TTL is up.
		timers(t, clockA, 1)
		clockA.Advance(5 * time.Second)
		timers(t, clockA, 1)
		clockB.Advance(time.Second)
		r := <-res
		if active := wantActive(t, r.err, "a"); !active.Renewed {
			t.Fatalf("round %d: refused without seeing the renewal: %v", round, r.err)
		}
		mu.Lock()
		if len(waits) == 0 || waits[0].Remaining != DefaultTTL || waits[0].Holder.Owner != "a" {
			t.Fatalf("round %d: waits %+v", round, waits)
		}
		mu.Unlock()
		clockB.Advance(5 * time.Second) // B's clock keeps running 30 s ahead
	}
	if a.State() != Valid || a.Err() != nil {
		t.Fatalf("the live holder is %v (%v)", a.State(), a.Err())
	}
}

// TestStaleHolderCountdownThenTakeover: a holder that stopped renewing is
// watched for its full TTL by the taker's clock, with a countdown, then
// replaced; when it resumes it finds its lease suspended at once, then
// lost to the taker.
func TestStaleHolderCountdownThenTakeover(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	held := &holdStore{Store: base}
	clockA := clk.NewMock(t0)
	a, err := Acquire(ctx, held, opts("a", machine("h1", "boot-1", 100, 77), clockA))
	if err != nil {
		t.Fatal(err)
	}
	timers(t, clockA, 1)
	// A is paused from here on: its clock does not move, it renews nothing.

	store := counting.New(base)
	clockB := clk.NewMock(t0.Add(16 * time.Second)) // A's stated expiry passed a second ago
	var waits []Waiting
	var mu sync.Mutex
	o := opts("b", machine("h1", "boot-1", 200, 5), clockB) // same machine: A's pid runs
	o.System.(*fakeSystem).run(100, 77)
	o.OnWait = func(w Waiting) { mu.Lock(); waits = append(waits, w); mu.Unlock() }
	res := acquireAsync(store, o)
	for range 14 {
		timers(t, clockB, 1)
		clockB.Advance(time.Second)
	}
	timers(t, clockB, 1)
	select {
	case r := <-res:
		t.Fatalf("took over after 14 s of a 15 s TTL: %v", r.err)
	default:
	}
	clockB.Advance(time.Second)
	r := <-res
	if r.err != nil {
		t.Fatalf("takeover after the TTL: %v", r.err)
	}
	b := r.l
	defer release(t, b)
	from, reason, took := b.TookOver()
	if !took || from.Owner != "a" || !strings.Contains(reason, "has not renewed its lease for 15s") {
		t.Fatalf("TookOver = %+v, %q, %v", from, reason, took)
	}
	mu.Lock()
	if len(waits) != 15 {
		t.Fatalf("%d progress reports, want 15: %+v", len(waits), waits)
	}
	for i, w := range waits {
		if w.Remaining != DefaultTTL-time.Duration(i)*time.Second || w.Observed+w.Remaining != DefaultTTL || w.Holder.Owner != "a" || w.Where != DefaultKey {
			t.Fatalf("progress %d: %+v", i, w)
		}
	}
	mu.Unlock()
	if c := store.Counts(); c.Gets != 16 || c.Puts != 1 {
		t.Fatalf("the takeover cost %+v, want 16 GETs and one PUT", c)
	}

	// A resumes 40 s later: before its renewal lands, it is suspended and
	// AwaitValid blocks; the renewal finds B and A is lost.
	held.hold()
	clockA.Set(t0.Add(40 * time.Second))
	held.waitHeld(t)
	if s := a.State(); s != Suspended {
		t.Fatalf("the resumed holder is %v, want suspended", s)
	}
	if a.ValidFor() != 0 {
		t.Fatal("a suspended lease reports validity")
	}
	awaited := make(chan error, 1)
	go func() { awaited <- a.AwaitValid(ctx, a.Margin()) }()
	held.let()
	wantLost(t, <-awaited, "b")
	<-a.Lost()
	wantLost(t, a.Err(), "b")
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of a lost lease: %v", err)
	}
	if info, live, _ := Live(ctx, store, Options{Clock: clockB}); !live || info.Owner != "b" {
		t.Fatalf("A's release disturbed B's lease: %+v live=%v", info, live)
	}
}

// holdStore blocks Put while held, to look at a holder between the start
// and the end of a renewal.
type holdStore struct {
	objstore.Store
	mu      sync.Mutex
	held    bool
	waiting chan struct{} // closed when a Put blocks
	gate    chan struct{}
}

func (h *holdStore) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.waiting, h.gate = true, make(chan struct{}), make(chan struct{})
}

func (h *holdStore) waitHeld(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	ch := h.waiting
	h.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no Put reached the held store")
	}
}

func (h *holdStore) let() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = false
	close(h.gate)
}

func (h *holdStore) Put(ctx context.Context, key string, data []byte, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	h.mu.Lock()
	held, waiting, gate := h.held, h.waiting, h.gate
	if held {
		select {
		case <-waiting:
		default:
			close(waiting)
		}
	}
	h.mu.Unlock()
	if held {
		<-gate
	}
	return h.Store.Put(ctx, key, data, o)
}

// TestDeadHolderOnThisMachine covers the rules that need no waiting: a
// holder on this machine whose pid is gone, a zombie's, or reused, is
// replaced at once; one whose pid runs, or in another pid namespace, or
// on another machine, is not.
func TestDeadHolderOnThisMachine(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		taker  func(*fakeSystem)
		reason string // "" = refused as live
	}{
		{"pid gone", func(*fakeSystem) {}, "its process (pid 100) is gone"},
		{"pid reused", func(f *fakeSystem) { f.run(100, 78) }, "its pid 100 now belongs to another process"},
		{"pid runs", func(f *fakeSystem) { f.run(100, 77) }, ""},
		{"other pid namespace", func(f *fakeSystem) { f.self.PIDNamespace = "pid:[2]" }, ""},
		{"other host", func(f *fakeSystem) { f.self.Host = "h2" }, ""},
		{"boot id unknown", func(f *fakeSystem) { f.self.BootID = "" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := mem.New()
			clock := clk.NewMock(t0)
			a, err := Acquire(ctx, store, opts("a", machine("h1", "boot-1", 100, 77), clock))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = a.Release(ctx) }()
			sys := machine("h1", "boot-1", 200, 5)
			tc.taker(sys)
			o := opts("b", sys, clock)
			o.NoWait = true
			b, err := Acquire(ctx, store, o)
			if tc.reason == "" {
				wantActive(t, err, "a")
				if _, live, _ := Live(ctx, store, Options{System: sys, Clock: clock}); !live {
					t.Fatal("Live: not live")
				}
				return
			}
			if err != nil {
				t.Fatalf("takeover of a dead holder: %v", err)
			}
			defer release(t, b)
			if from, reason, took := b.TookOver(); !took || from.Owner != "a" || reason != tc.reason {
				t.Fatalf("TookOver = %s, %q, %v; want %q", from, reason, took, tc.reason)
			}
			if got, live, _ := Live(ctx, store, Options{System: sys, Clock: clock}); !live || got.Owner != "b" {
				t.Fatal("Live: the new holder is not live")
			}
			if err := a.Renew(ctx); !errors.Is(err, ErrLost) {
				t.Fatalf("the replaced holder renewed: %v", err)
			}
		})
	}
}

// TestRebootedHolder: a holder from an earlier boot of this machine is
// replaced at once; a different boot id alone (another machine with the
// same host name, booted before the holder's last renewal) is not enough.
func TestRebootedHolder(t *testing.T) {
	ctx := context.Background()
	for _, rebooted := range []bool{true, false} {
		store := mem.New()
		clock := clk.NewMock(t0)
		a, err := Acquire(ctx, store, opts("a", machine("h1", "boot-1", 100, 77), clock))
		if err != nil {
			t.Fatal(err)
		}
		sys := machine("h1", "boot-2", 100, 9) // same pid after the reboot
		sys.run(100, 9)
		if rebooted {
			sys.boot = t0.Add(time.Second)
		}
		clock.Set(t0.Add(2 * time.Second))
		o := opts("b", sys, clock)
		o.NoWait = true
		b, err := Acquire(ctx, store, o)
		if !rebooted {
			wantActive(t, err, "a")
			release(t, a)
			continue
		}
		if err != nil {
			t.Fatalf("takeover after a reboot: %v", err)
		}
		if _, reason, _ := b.TookOver(); reason != "its machine rebooted since its last renewal" {
			t.Fatalf("reason %q", reason)
		}
		release(t, b)
		_ = a.Release(ctx)
	}
}

// TestClockSkewAllowance: a stated expiry older than the allowance is
// taken over at once; one inside it is watched for the full TTL even when
// the taker's clock says the holder expired long ago.
func TestClockSkewAllowance(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clockA := clk.NewMock(t0)
	a, err := Acquire(ctx, store, opts("a", machine("h1", "boot-1", 100, 77), clockA))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Release(ctx) }()
	other := machine("h2", "boot-2", 200, 1)

	// 59 s after the stated expiry: watch (NoWait refuses).
	clockB := clk.NewMock(t0.Add(DefaultTTL + 59*time.Second))
	o := opts("b", other, clockB)
	o.NoWait = true
	_, err = Acquire(ctx, store, o)
	wantActive(t, err, "a")
	if _, live, _ := Live(ctx, store, o); live {
		t.Fatal("Live: a holder past its stated expiry is live")
	}
	// A shorter allowance, or a longer lag: at once.
	clockB.Set(t0.Add(DefaultTTL + 61*time.Second))
	b, err := Acquire(ctx, store, o)
	if err != nil {
		t.Fatalf("takeover past the allowance: %v", err)
	}
	if _, reason, _ := b.TookOver(); !strings.Contains(reason, "more than the 1m0s clock-skew allowance") {
		t.Fatalf("reason %q", reason)
	}
	release(t, b)

	// A negative allowance always watches.
	c, err := Acquire(ctx, store, opts("c", other, clk.NewMock(clockB.Now())))
	if err != nil {
		t.Fatal(err)
	}
	clockB.Set(t0.Add(time.Hour))
	o = opts("d", other, clockB)
	o.ClockSkew, o.NoWait = -1, true
	_, err = Acquire(ctx, store, o)
	wantActive(t, err, "c")
	_ = c.Release(ctx)
}

// TestRenewalFailuresSuspendThenRecover: while the store refuses writes
// the lease stays valid up to TTL after its last good renewal started,
// then it is suspended (AwaitValid blocks, OnState says so); a renewal
// that finds the object unchanged makes it valid again.
func TestRenewalFailuresSuspendThenRecover(t *testing.T) {
	ctx := context.Background()
	store := faults.New(mem.New(), 1)
	clock := clk.NewMock(t0)
	states := make(chan State, 10)
	o := opts("a", machine("h1", "boot-1", 100, 77), clock)
	o.OnState = func(s State, _ error) { states <- s }
	a, err := Acquire(ctx, store, o)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, a)
	margin := a.Margin()
	if margin != 5*time.Second {
		t.Fatalf("Margin = %v", margin)
	}
	store.Set(faults.Rule{Ops: faults.OpPut | faults.OpGet, Rate: 1})
	// Renewal at 5 s fails; retries every second.
	timers(t, clock, 1)
	clock.Advance(5 * time.Second)
	for a.ValidFor() > margin {
		timers(t, clock, 1)
		clock.Advance(time.Second)
	}
	// Less than the margin left: AwaitValid(margin) blocks, a shorter ask
	// does not.
	if err := a.AwaitValid(ctx, time.Second); err != nil {
		t.Fatalf("AwaitValid(1s) with %v left: %v", a.ValidFor(), err)
	}
	awaited := make(chan error, 1)
	go func() { awaited <- a.AwaitValid(ctx, margin) }()
	for a.State() == Valid {
		timers(t, clock, 1)
		clock.Advance(time.Second)
	}
	timers(t, clock, 1) // the attempt that found it suspended reported it
	if s := <-states; s != Suspended {
		t.Fatalf("OnState %v, want suspended", s)
	}
	select {
	case err := <-awaited:
		t.Fatalf("AwaitValid returned %v while suspended", err)
	default:
	}
	store.Clear()
	clock.Advance(time.Second)
	if err := <-awaited; err != nil {
		t.Fatalf("AwaitValid after the store came back: %v", err)
	}
	if s := <-states; s != Valid {
		t.Fatalf("OnState %v, want valid", s)
	}
	if a.State() != Valid || a.ValidFor() != DefaultTTL-DefaultTTL/100 {
		t.Fatalf("after recovery: %v, %v", a.State(), a.ValidFor())
	}
}

// TestRenewalFailuresThenLost: a holder cut off from the store while
// another process took the lease over is lost at its first renewal that
// reaches the store.
func TestRenewalFailuresThenLost(t *testing.T) {
	ctx := context.Background()
	base := mem.New()
	store := faults.New(base, 1)
	clock := clk.NewMock(t0)
	a, err := Acquire(ctx, store, opts("a", machine("h1", "boot-1", 100, 77), clock))
	if err != nil {
		t.Fatal(err)
	}
	store.Set(faults.Rule{Ops: faults.OpPut | faults.OpGet, Rate: 1})
	timers(t, clock, 1)
	clock.Advance(5 * time.Second)
	for a.State() == Valid {
		timers(t, clock, 1)
		clock.Advance(time.Second)
	}
	timers(t, clock, 1) // that attempt failed too, before B exists
	// Another machine, which can reach the store, watched A for its TTL.
	clockB := clk.NewMock(t0.Add(DefaultTTL + time.Second))
	res := acquireAsync(base, opts("b", machine("h2", "boot-2", 1, 1), clockB))
	for range 15 {
		timers(t, clockB, 1)
		clockB.Advance(time.Second)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer release(t, r.l)
	awaited := make(chan error, 1)
	go func() { awaited <- a.AwaitValid(ctx, 0) }()
	store.Clear()
	timers(t, clock, 1)
	clock.Advance(time.Second)
	wantLost(t, <-awaited, "b")
	<-a.Lost()
	if a.State() != Lost {
		t.Fatalf("state %v", a.State())
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAwaitValid checks the bounds: an impossible ask is an error, a
// cancelled wait returns ctx's error.
func TestAwaitValid(t *testing.T) {
	ctx := context.Background()
	store := faults.New(mem.New(), 1)
	clock := clk.NewMock(t0)
	a, err := Acquire(ctx, store, opts("a", machine("h1", "boot-1", 100, 77), clock))
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, a)
	if err := a.AwaitValid(ctx, DefaultTTL); err == nil || errors.Is(err, ErrLost) {
		t.Fatalf("AwaitValid(TTL) = %v; want an error saying it can never be", err)
	}
	if err := a.AwaitValid(ctx, a.Margin()); err != nil {
		t.Fatal(err)
	}
	store.Set(faults.Rule{Ops: faults.OpPut | faults.OpGet, Rate: 1})
	clock.Set(t0.Add(DefaultTTL)) // the renewal fails: suspended
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.AwaitValid(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitValid with a cancelled ctx while suspended: %v", err)
	}
	store.Clear()
}

// TestLostResponses checks that acquire and renew recognise their own
// write when the store performed it but lost the response.
func TestLostResponses(t *testing.T) {
	ctx := context.Background()
	store := faults.New(mem.New(), 1)
	clock := clk.NewMock(t0)
	store.Set(faults.Rule{Ops: faults.OpPut, Nth: 1, LoseResponse: true})
	l, err := Acquire(ctx, store, opts("a", machine("h1", "b", 1, 1), clock))
	if err != nil {
		t.Fatalf("acquire with a lost response: %v", err)
	}
	store.Set(faults.Rule{Ops: faults.OpPut, Nth: 1, LoseResponse: true})
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew with a lost response: %v", err)
	}
	store.Clear()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after a lost response (stale ETag?): %v", err)
	}
	// A renewal that landed but whose response and read-back were lost
	// leaves a stale ETag: the next renewal adopts the object's own.
	store.Set(faults.Rule{Ops: faults.OpPut, Nth: 1, LoseResponse: true}, faults.Rule{Ops: faults.OpGet, Nth: 1})
	if err := l.Renew(ctx); err == nil {
		t.Fatal("renew with a lost response and a failed read-back succeeded")
	}
	store.Clear()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after an unconfirmed renewal: %v", err)
	}
	// A failing store is an error, not a loss.
	store.Set(faults.Rule{Ops: faults.OpPut | faults.OpGet, Rate: 1})
	if err := l.Renew(ctx); err == nil || errors.Is(err, ErrLost) {
		t.Fatalf("renew on a failing store: %v; want a plain error", err)
	}
	store.Clear()
	release(t, l)
}

func TestUnreadableObjectIsReplaced(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	if _, err := store.Put(ctx, DefaultKey, []byte("garbage"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(ctx, store, opts("a", machine("h1", "b", 1, 1), clk.NewMock(t0)))
	if err != nil {
		t.Fatalf("acquire over an unreadable lease: %v", err)
	}
	release(t, l)
	for _, bad := range []Options{{TTL: time.Second, RenewEvery: time.Second}, {TTL: 2 * MaxTTL}, {Key: "../x"}} {
		if _, err := Acquire(ctx, store, bad); err == nil {
			t.Fatalf("options %+v accepted", bad)
		}
	}
}

func FuzzDecodeInfo(f *testing.F) {
	f.Add([]byte(`{"owner":"a","host":"h","pid":1,"ttl":15000000000,"renewed":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"owner":""}`))
	f.Add([]byte(`[]`))
	golden.AddCorpus(f, "testdata/golden/*.v*.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := decodeInfo(b)
		if err != nil {
			return
		}
		if i.Owner == "" {
			t.Fatal("accepted a lease without owner")
		}
		if ttl := i.holderTTL(DefaultTTL); ttl <= 0 || ttl > MaxTTL {
			t.Fatalf("holder TTL %v out of bounds for %q", ttl, b)
		}
		_ = i.String()
	})
}

// A wrapped file store (counting requests, injecting faults) takes its
// lease as the file store does: the flock of its folder.
func TestWrappedFileStoreUsesFlock(t *testing.T) {
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	l, err := Acquire(context.Background(), faults.New(counting.New(fs), 1), Options{Owner: "w", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	if m := l.Info().Mechanism; m != MechanismFlock {
		t.Fatalf("mechanism %q through wrappers; want flock", m)
	}
}
