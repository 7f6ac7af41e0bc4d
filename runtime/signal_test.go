package runtime

import (
	"context"
	"errors"
	"fmt"
	stdruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 5: durable signals.

// waiter is a two-step runner: step 0 waits on key, step 1 reports what
// it saw ("nil" for a timeout). failFirst makes step 1's first attempt
// fail transiently, to check that a redelivery sees the same signal.
type waiter struct {
	key       func(runID string) string
	failFirst bool
	mu        sync.Mutex
	seen      map[string][]string // run -> signal seen by each attempt of step 1
}

func newWaiter(failFirst bool) *waiter {
	return &waiter{key: func(id string) string { return "k:" + id }, failFirst: failFirst, seen: map[string][]string{}}
}

func (w *waiter) RunStep(_ context.Context, s *Step) (StepOutcome, error) {
	if s.Number == 0 {
		return ContinueOnSignal([]byte("p"), w.key(s.RunID), time.Hour), nil
	}
	v := "nil"
	if s.Signal != nil {
		v = "sig:" + string(s.Signal)
	}
	w.mu.Lock()
	w.seen[s.RunID] = append(w.seen[s.RunID], v)
	w.mu.Unlock()
	if w.failFirst && s.Attempt == 1 {
		return StepOutcome{}, errors.New("transient")
	}
	return Succeed([]byte(v)), nil
}

// bufferHolds reports whether the buffer value b holds payload.
func bufferHolds(b []byte, payload string) bool {
	p, err := decodeSignal(b)
	return b != nil && err == nil && string(p) == payload
}

func (w *waiter) attempts(runID string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string{}, w.seen[runID]...)
}

func TestSignalDeliveredToWaiter(t *testing.T) {
	w := newWaiter(true)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "a"})
	st := e.waitRun("a", inState(runstate.StateWaiting))
	if st.SignalKey != "k:a" || !st.Until.Equal(t0.Add(time.Hour)) || st.Step != 1 {
		t.Fatalf("waiting status %+v", st)
	}
	res, err := e.signalQuiet("k:a", []byte("approved"))
	if err != nil || res != signal.Delivered {
		t.Fatalf("Signal: %v %v", res, err)
	}
	e.waitJob(st.JobID, func(j queue.Job) bool { return j.State == queue.StateScheduled && j.Attempts == 1 })
	e.clock.Advance(time.Minute) // the retry backoff
	if o := e.outcome(); string(o.Result) != "sig:approved" {
		t.Fatalf("outcome %+v", o)
	}
	if got := fmt.Sprint(w.attempts("a")); got != "[sig:approved sig:approved]" {
		t.Fatalf("attempts saw %s", got)
	}
	assertNoSignalResidue(t, e)
}

func TestSignalBufferedBeforeWaiterIsConsumedAtRegistration(t *testing.T) {
	w := newWaiter(true)
	e := newEnv(t, w)
	e.start()
	if res, err := e.rt.Signal(e.ctx, "k:b", []byte("early")); err != nil || res != signal.Buffered {
		t.Fatalf("Signal: %v %v", res, err)
	}
	// Latest wins.
	if res, _ := e.rt.Signal(e.ctx, "k:b", []byte("earlier-replaced")); res != signal.Buffered {
		t.Fatal("second signal not buffered")
	}
	if res, _ := e.rt.Signal(e.ctx, "k:b", []byte("latest")); res != signal.Buffered {
		t.Fatal("third signal not buffered")
	}
	out := e.submit(RunSpec{RunID: "b"})
	// No clock advance beyond the retry: the registration consumed the
	// buffered signal and continued at once.
	st := e.waitRun("b", func(st runstate.Status) bool { return st.Step == 1 && st.State == runstate.StateScheduled })
	_ = out
	e.waitJob(st.JobID, func(j queue.Job) bool { return j.Attempts == 1 })
	e.clock.Advance(time.Minute)
	if o := e.outcome(); string(o.Result) != "sig:latest" {
		t.Fatalf("outcome %+v", o)
	}
	if got := fmt.Sprint(w.attempts("b")); got != "[sig:latest sig:latest]" {
		t.Fatalf("attempts saw %s", got)
	}
	assertNoSignalResidue(t, e)
}

func TestSignalTimeoutGivesNil(t *testing.T) {
	w := newWaiter(false)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "c"})
	e.waitRun("c", inState(runstate.StateWaiting))
	e.clock.Advance(time.Hour)
	if o := e.outcome(); string(o.Result) != "nil" {
		t.Fatalf("outcome %+v", o)
	}
	// A signal after the wait ended is buffered for a future waiter.
	if res, _ := e.rt.Signal(e.ctx, "k:c", []byte("late")); res != signal.Buffered {
		t.Fatal("late signal not buffered")
	}
	if ok, err := e.rt.ClearSignal(e.ctx, "k:c"); !ok || err != nil {
		t.Fatalf("ClearSignal: %v %v", ok, err)
	}
	if ok, _ := e.rt.ClearSignal(e.ctx, "k:c"); ok {
		t.Fatal("ClearSignal found a signal twice")
	}
	assertNoSignalResidue(t, e)
}

// A signal buffered while the waiter was registered but missed by the
// signaller (the race the registration's re-check and the timeout path
// close) is consumed when the timeout promotes the waiter; a retry of that
// step observes the same signal.
func TestSignalBufferedDuringWaitConsumedAtTimeout(t *testing.T) {
	w := newWaiter(true)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "d"})
	st := e.waitRun("d", inState(runstate.StateWaiting))
	e.stop() // the registration's own re-check of the buffer is over
	if err := e.q.KVPut(e.ctx, sigBufKey("k:d"), encodeSignal([]byte("raced"))); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.clock.Advance(time.Hour)
	e.waitJob(st.JobID, func(j queue.Job) bool { return j.State == queue.StateScheduled && j.Attempts == 1 })
	e.clock.Advance(time.Minute)
	if o := e.outcome(); string(o.Result) != "sig:raced" {
		t.Fatalf("outcome %+v", o)
	}
	if got := fmt.Sprint(w.attempts("d")); got != "[sig:raced sig:raced]" {
		t.Fatalf("attempts saw %s", got)
	}
	assertNoSignalResidue(t, e)
}

func TestSecondWaiterOnKeyFailsItsRun(t *testing.T) {
	w := newWaiter(false)
	w.key = func(string) string { return "shared" }
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "first"})
	e.waitRun("first", inState(runstate.StateWaiting))
	e.submit(RunSpec{RunID: "second"})
	o := e.outcome()
	if o.RunID != "second" || o.Status != runstate.Failed {
		t.Fatalf("outcome %+v", o)
	}
	e.expectState("first", runstate.StateWaiting)
	if res, _ := e.signalQuiet("shared", []byte("x")); res != signal.Delivered {
		t.Fatal("first waiter lost its registration")
	}
	if o := e.outcome(); o.RunID != "first" || string(o.Result) != "sig:x" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestEmptySignalPayloadIsNotNil(t *testing.T) {
	w := newWaiter(false)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "e"})
	e.waitRun("e", inState(runstate.StateWaiting))
	if res, _ := e.signalQuiet("k:e", nil); res != signal.Delivered {
		t.Fatal("not delivered")
	}
	if o := e.outcome(); string(o.Result) != "sig:" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestSignalSurvivesRestartWhileWaiting(t *testing.T) {
	w := newWaiter(false)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "rw"})
	e.waitRun("rw", inState(runstate.StateWaiting))
	e.reopen()
	e.expectState("rw", runstate.StateWaiting)
	if res, _ := e.rt.Signal(e.ctx, "k:rw", []byte("after-restart")); res != signal.Delivered {
		t.Fatal("not delivered after restart")
	}
	e.start()
	if o := e.outcome(); string(o.Result) != "sig:after-restart" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestSignalValidation(t *testing.T) {
	e := newEnv(t, echo())
	if _, err := e.rt.Signal(e.ctx, "", nil); !errors.Is(err, signal.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := e.rt.Signal(e.ctx, "k", make([]byte, signal.MaxPayload+1)); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
}

// assertNoSignalResidue checks that no buffered, waiting or delivered
// signal record is left behind.
func assertNoSignalResidue(t *testing.T, e *env) {
	t.Helper()
	left, err := e.q.KVScan(e.ctx, ReservedKVPrefix+"signals/", "", 100)
	if err != nil || len(left) != 0 {
		t.Fatalf("signal records left: %v %v", left, err)
	}
}

// signalQuiet signals with the worker stopped, so the registration's own
// post-commit look at the buffer (which may deliver a signal racing it, and
// then Signal reports signal.Buffered) is over: the test observes signal.Delivered.
func (e *env) signalQuiet(key string, payload []byte) (signal.Outcome, error) {
	e.stop()
	defer e.start()
	return e.rt.Signal(e.ctx, key, payload)
}

// The registration's post-commit look at the buffer delivers a signal that
// was buffered after the registration read the buffer but whose Signal call
// missed the waiter index.
func TestRegistrationRecheckDeliversRacingSignal(t *testing.T) {
	w := newWaiter(false)
	e := newEnv(t, w)
	e.start()
	e.submit(RunSpec{RunID: "rc"})
	st := e.waitRun("rc", inState(runstate.StateWaiting))
	e.stop()
	if err := e.q.KVPut(e.ctx, sigBufKey("k:rc"), encodeSignal([]byte("racer"))); err != nil {
		t.Fatal(err)
	}
	e.rt.afterRegister(e.ctx, "k:rc", st.JobID)
	j, err := e.q.GetJob(e.ctx, st.JobID)
	if err != nil || j.State != queue.StatePending || string(j.WakePayload) != "racer" {
		t.Fatalf("waiter not woken: %+v %v", j, err)
	}
	assertNoSignalResidue(t, e)
	e.start()
	if o := e.outcome(); string(o.Result) != "sig:racer" {
		t.Fatalf("outcome %+v", o)
	}
}

// A signal buffered between a registration's read of the buffer and its
// settlement is not lost: the settlement consumes only the signal it read.
func TestSignalBufferedDuringRegistrationIsKept(t *testing.T) {
	w := newWaiter(false)
	w.key = func(string) string { return "k:race" }
	e := newEnv(t, w)
	var once sync.Once
	var raceErr error
	e.rt.beforeAdvanceCommit = func(runID, key string) {
		if runID != "r1" || key != "k:race" {
			return
		}
		once.Do(func() {
			var res signal.Outcome
			res, raceErr = e.rt.Signal(e.ctx, "k:race", []byte("second"))
			if raceErr == nil && res != signal.Buffered {
				raceErr = fmt.Errorf("racing signal: %v, want buffered", res)
			}
		})
	}
	if res, err := e.rt.Signal(e.ctx, "k:race", []byte("first")); err != nil || res != signal.Buffered {
		t.Fatalf("Signal: %v %v", res, err)
	}
	e.start()
	e.submit(RunSpec{RunID: "r1"})
	if o := e.outcome(); o.RunID != "r1" || string(o.Result) != "sig:first" {
		t.Fatalf("outcome %+v", o)
	}
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	b, err := e.q.KVGet(e.ctx, sigBufKey("k:race"))
	if err != nil {
		t.Fatalf("the signal buffered during the registration is gone: %v", err)
	}
	if p, err := decodeSignal(b); err != nil || string(p) != "second" {
		t.Fatalf("buffer holds %q, %v; want second", p, err)
	}
	e.submit(RunSpec{RunID: "r2"})
	if o := e.outcome(); o.RunID != "r2" || string(o.Result) != "sig:second" {
		t.Fatalf("outcome %+v", o)
	}
	assertNoSignalResidue(t, e)
}

// A buffered signal is kept for the signal retention, counted from its
// buffering, then the sweep drops it; ListSignals shows key, size and
// buffering time; one buffered before retention existed (format 1) is
// stamped by the first sweep and kept a full window from then.
func TestBufferedSignalRetentionAndListing(t *testing.T) {
	e := newEnv(t, newWaiter(false), Options{SignalRetention: time.Hour})
	res, err := e.rt.SendSignal(e.ctx, "k:old", []byte("12345"), signal.Options{})
	if err != nil || res.Outcome != signal.Buffered || !res.Expires.Equal(t0.Add(time.Hour)) {
		t.Fatalf("SendSignal = %+v, %v; want buffered until %v", res, err, t0.Add(time.Hour))
	}
	if err := e.q.KVPut(e.ctx, sigBufKey("k:legacy"), encodeSignal([]byte("ab"))); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(30 * time.Minute)
	if _, err := e.rt.Signal(e.ctx, "k:new", nil); err != nil {
		t.Fatal(err)
	}
	list, err := e.rt.ListSignals(e.ctx, signal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []signal.Info{{Key: "k:legacy", Size: 2}, {Key: "k:new", Size: 0, BufferedAt: t0.Add(30 * time.Minute)}, {Key: "k:old", Size: 5, BufferedAt: t0}}
	if fmt.Sprint(list) != fmt.Sprint(want) {
		t.Fatalf("ListSignals = %v\nwant %v", list, want)
	}
	if page, err := e.rt.ListSignals(e.ctx, signal.ListOptions{After: "k:legacy", Limit: 1}); err != nil || len(page) != 1 || page[0].Key != "k:new" {
		t.Fatalf("second page = %v, %v; want k:new", page, err)
	}

	sweep := func(wantDropped int, wantLeft ...string) {
		t.Helper()
		r, err := e.rt.Sweep(e.ctx)
		if err != nil || r.Signals != wantDropped {
			t.Fatalf("Sweep at %v = %+v, %v; want %d signals dropped", e.clock.Now().Sub(t0), r, err, wantDropped)
		}
		list, err := e.rt.ListSignals(e.ctx, signal.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, s := range list {
			keys = append(keys, s.Key)
		}
		if fmt.Sprint(keys) != fmt.Sprint(wantLeft) {
			t.Fatalf("left after the sweep at %v: %v, want %v", e.clock.Now().Sub(t0), keys, wantLeft)
		}
	}
	sweep(0, "k:legacy", "k:new", "k:old") // stamps k:legacy at +30m
	e.clock.Advance(30*time.Minute - time.Millisecond)
	sweep(0, "k:legacy", "k:new", "k:old")
	e.clock.Advance(time.Millisecond) // k:old is an hour old
	sweep(1, "k:legacy", "k:new")
	e.clock.Advance(30 * time.Minute)
	sweep(2)
	assertNoSignalResidue(t, e)
}

// The worker's sweep loop applies the signal retention on its own.
func TestSweepLoopDropsExpiredSignals(t *testing.T) {
	e := newEnv(t, echo(), Options{SignalRetention: time.Hour, ResultRetention: -1, SweepInterval: time.Minute})
	if _, err := e.rt.Signal(e.ctx, "k:loop", []byte("x")); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.clock.Advance(time.Hour)
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := kvGet(e.ctx, e.q, sigBufKey("k:loop"))
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep loop kept a signal past its retention")
		}
		e.clock.Advance(time.Minute) // the next sweep
		stdruntime.Gosched()
	}
}

// RequireWaiting refuses a signal nobody waits for and writes nothing; a
// waiting step receives it.
func TestSignalRequireWaiting(t *testing.T) {
	e := newEnv(t, newWaiter(false))
	_, err := e.rt.SendSignal(e.ctx, "k:rq", []byte("x"), signal.Options{RequireWaiting: true})
	if !errors.Is(err, signal.ErrNoWaiter) {
		t.Fatalf("SendSignal to nobody: %v; want signal.ErrNoWaiter", err)
	}
	assertNoSignalResidue(t, e)
	e.start()
	e.submit(RunSpec{RunID: "rq"})
	e.waitRun("rq", inState(runstate.StateWaiting))
	e.stop()
	res, err := e.rt.SendSignal(e.ctx, "k:rq", []byte("x"), signal.Options{RequireWaiting: true})
	if err != nil || res.Outcome != signal.Delivered || !res.Expires.IsZero() {
		t.Fatalf("SendSignal to a waiter = %+v, %v; want delivered", res, err)
	}
	e.start()
	if o := e.outcome(); string(o.Result) != "sig:x" {
		t.Fatalf("outcome %+v", o)
	}
}

// validatingWaiter is a waiter whose runner is also its SignalValidator:
// it refuses the payload "bad" and cannot decide on "store-error".
type validatingWaiter struct {
	*waiter
	checked []string
}

func (v *validatingWaiter) ValidateSignal(_ context.Context, key string, payload []byte) error {
	v.mu.Lock()
	v.checked = append(v.checked, key)
	v.mu.Unlock()
	switch string(payload) {
	case "bad":
		return fmt.Errorf("%w: %q is not a decision", signal.ErrRejected, payload)
	case "store-error":
		return errors.New("the store is away")
	}
	return nil
}

// A runner that implements signal.Validator checks every signal before it
// is written: a refused or undecidable one leaves nothing.
func TestSignalValidatorRefusesBeforeWriting(t *testing.T) {
	v := &validatingWaiter{waiter: newWaiter(false)}
	e := newEnv(t, v)
	_, err := e.rt.Signal(e.ctx, "k:v", []byte("bad"))
	if !errors.Is(err, signal.ErrRejected) || !strings.Contains(err.Error(), `"bad" is not a decision`) {
		t.Fatalf("bad payload: %v; want signal.ErrRejected with the validator's reason", err)
	}
	if _, err := e.rt.Signal(e.ctx, "k:v", []byte("store-error")); err == nil || errors.Is(err, signal.ErrRejected) {
		t.Fatalf("undecidable payload: %v; want a plain error", err)
	}
	assertNoSignalResidue(t, e)
	if res, err := e.rt.Signal(e.ctx, "k:v", []byte("good")); err != nil || res != signal.Buffered {
		t.Fatalf("good payload: %v, %v", res, err)
	}
	if fmt.Sprint(v.checked) != "[k:v k:v k:v]" {
		t.Fatalf("validator saw %v", v.checked)
	}

	// Options{NoSignalValidator: true} turns the runner's validation off.
	off := newEnv(t, &validatingWaiter{waiter: newWaiter(false)}, Options{NoSignalValidator: true})
	if res, err := off.rt.Signal(off.ctx, "k:v", []byte("bad")); err != nil || res != signal.Buffered {
		t.Fatalf("without a validator: %v, %v; want buffered", res, err)
	}
}

// pickyWaiter waits on "k:<run>" until a deadline an hour after the run
// began and sets aside any signal but "good", waiting on for what is left
// of the hour, as the interpreter's wait_signal does. Its first attempt at
// setting a signal aside fails after a "good" signal was sent: a crash
// between the rejection and its settlement.
type pickyWaiter struct {
	rt      func() *Runtime
	clock   *clock.Mock
	mu      sync.Mutex
	seen    []string
	crashed bool
}

func (w *pickyWaiter) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	key := "k:" + s.RunID
	deadline := t0.Add(time.Hour)
	if s.Number == 0 {
		return ContinueOnSignal(nil, key, deadline.Sub(w.clock.Now())), nil
	}
	w.mu.Lock()
	w.seen = append(w.seen, fmt.Sprintf("%d:%s", s.Number, s.Signal))
	crash := !w.crashed && string(s.Signal) == "bad"
	w.crashed = w.crashed || crash
	w.mu.Unlock()
	switch {
	case s.Signal == nil:
		return Fail("timed out"), nil
	case string(s.Signal) == "good":
		return Succeed(s.Signal), nil
	case crash:
		if res, err := w.rt().Signal(ctx, key, []byte("good")); err != nil || res != signal.Buffered {
			return StepOutcome{}, Permanent(fmt.Errorf("the good signal in the crash window: %v, %v; want buffered", res, err))
		}
		return StepOutcome{}, errors.New("crashed before the rejection settled")
	}
	return ContinueOnSignal(nil, key, deadline.Sub(w.clock.Now())), nil
}

// A step that set a signal aside and crashed before its settlement is
// redelivered with the same signal (it sets it aside again) and then
// receives the signal sent meanwhile: nothing is lost, nothing left over.
func TestSetAsideSignalSurvivesACrashBeforeItsSettlement(t *testing.T) {
	w := &pickyWaiter{}
	e := newEnv(t, w)
	w.rt, w.clock = func() *Runtime { return e.rt }, e.clock
	if res, err := e.rt.Signal(e.ctx, "k:p", []byte("bad")); err != nil || res != signal.Buffered {
		t.Fatalf("Signal: %v %v", res, err)
	}
	e.start()
	e.submit(RunSpec{RunID: "p"})
	st := e.waitRun("p", func(st runstate.Status) bool { return st.Step == 1 && st.State == runstate.StateScheduled })
	e.waitJob(st.JobID, func(j queue.Job) bool { return j.Attempts == 1 })
	e.clock.Advance(time.Minute) // the retry backoff
	if o := e.outcome(); o.Status != runstate.Succeeded || string(o.Result) != "good" {
		t.Fatalf("outcome %+v; want the good signal", o)
	}
	w.mu.Lock()
	seen := fmt.Sprint(w.seen)
	w.mu.Unlock()
	if seen != "[1:bad 1:bad 2:good]" {
		t.Fatalf("steps saw %s; want the bad signal twice at step 1 (the crash, then its redelivery) and the good one at step 2", seen)
	}
	assertNoSignalResidue(t, e)
}
