package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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
	st := e.waitRun("a", inState(StateWaiting))
	if st.SignalKey != "k:a" || !st.Until.Equal(t0.Add(time.Hour)) || st.Step != 1 {
		t.Fatalf("waiting status %+v", st)
	}
	res, err := e.signalQuiet("k:a", []byte("approved"))
	if err != nil || res != Delivered {
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
	if res, err := e.rt.Signal(e.ctx, "k:b", []byte("early")); err != nil || res != Buffered {
		t.Fatalf("Signal: %v %v", res, err)
	}
	// Latest wins.
	if res, _ := e.rt.Signal(e.ctx, "k:b", []byte("earlier-replaced")); res != Buffered {
		t.Fatal("second signal not buffered")
	}
	if res, _ := e.rt.Signal(e.ctx, "k:b", []byte("latest")); res != Buffered {
		t.Fatal("third signal not buffered")
	}
	out := e.submit(RunSpec{RunID: "b"})
	// No clock advance beyond the retry: the registration consumed the
	// buffered signal and continued at once.
	st := e.waitRun("b", func(st RunStatus) bool { return st.Step == 1 && st.State == StateScheduled })
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
	e.waitRun("c", inState(StateWaiting))
	e.clock.Advance(time.Hour)
	if o := e.outcome(); string(o.Result) != "nil" {
		t.Fatalf("outcome %+v", o)
	}
	// A signal after the wait ended is buffered for a future waiter.
	if res, _ := e.rt.Signal(e.ctx, "k:c", []byte("late")); res != Buffered {
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
	st := e.waitRun("d", inState(StateWaiting))
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
	e.waitRun("first", inState(StateWaiting))
	e.submit(RunSpec{RunID: "second"})
	o := e.outcome()
	if o.RunID != "second" || o.Status != Failed {
		t.Fatalf("outcome %+v", o)
	}
	e.expectState("first", StateWaiting)
	if res, _ := e.signalQuiet("shared", []byte("x")); res != Delivered {
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
	e.waitRun("e", inState(StateWaiting))
	if res, _ := e.signalQuiet("k:e", nil); res != Delivered {
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
	e.waitRun("rw", inState(StateWaiting))
	e.reopen()
	e.expectState("rw", StateWaiting)
	if res, _ := e.rt.Signal(e.ctx, "k:rw", []byte("after-restart")); res != Delivered {
		t.Fatal("not delivered after restart")
	}
	e.start()
	if o := e.outcome(); string(o.Result) != "sig:after-restart" {
		t.Fatalf("outcome %+v", o)
	}
}

func TestSignalValidation(t *testing.T) {
	e := newEnv(t, echo())
	if _, err := e.rt.Signal(e.ctx, "", nil); !errors.Is(err, ErrInvalidSignalKey) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := e.rt.Signal(e.ctx, "k", make([]byte, MaxSignalPayload+1)); !errors.Is(err, ErrValueTooLarge) {
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
// then Signal reports Buffered) is over: the test observes Delivered.
func (e *env) signalQuiet(key string, payload []byte) (SignalOutcome, error) {
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
	st := e.waitRun("rc", inState(StateWaiting))
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
			var res SignalOutcome
			res, raceErr = e.rt.Signal(e.ctx, "k:race", []byte("second"))
			if raceErr == nil && res != Buffered {
				raceErr = fmt.Errorf("racing signal: %v, want buffered", res)
			}
		})
	}
	if res, err := e.rt.Signal(e.ctx, "k:race", []byte("first")); err != nil || res != Buffered {
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
