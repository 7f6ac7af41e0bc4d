package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var ibxStart = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func ibxLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ibxWriter is one writer "process": a queue and a runtime on a store.
type ibxWriter struct {
	t      *testing.T
	q      *queue.Queue
	rt     *runtime.Runtime
	runner runtime.StepRunner
}

// ibxOpen opens a writer on store; clock nil means the system clock.
// opts (at most one) go to runtime.New, with a quiet logger and no
// shutdown grace period unless they set them.
func ibxOpen(t *testing.T, store objstore.Store, clk clock.Clock, runner runtime.StepRunner, opts ...runtime.Options) *ibxWriter {
	t.Helper()
	if clk == nil {
		clk = clock.System()
	}
	q, err := queue.Open(context.Background(), store, queue.Options{Clock: clk, Logger: ibxLogger(), SweepInterval: -1,
		DefaultConfig: queue.QueueConfig{LeaseDuration: time.Hour, BackoffBase: time.Second, BackoffMax: time.Minute}})
	if err != nil {
		t.Fatalf("queue.Open: %v", err)
	}
	if runner == nil {
		runner = runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) { return runtime.Succeed(nil), nil })
	}
	if len(opts) > 1 {
		t.Fatalf("ibxOpen: %d runtime.Options, want at most one", len(opts))
	}
	var o runtime.Options
	if len(opts) == 1 {
		o = opts[0]
	}
	if o.Logger == nil {
		o.Logger = ibxLogger()
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = -1
	}
	rt, err := runtime.New(q, store, runner, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &ibxWriter{t: t, q: q, rt: rt, runner: runner}
}

func (w *ibxWriter) kv(key string) []byte {
	w.t.Helper()
	v, err := kvGet(context.Background(), w.q, key)
	if err != nil {
		w.t.Fatalf("kvGet(%s): %v", key, err)
	}
	return v
}

func (w *ibxWriter) job(id string) queue.Job {
	w.t.Helper()
	j, err := w.q.GetJob(context.Background(), id)
	if err != nil {
		w.t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

// ibxSend writes a command object as a Client does, without waiting.
func ibxSend(t *testing.T, store objstore.Store, cmd inboxCommand) string {
	t.Helper()
	c, err := NewClient(store, ClientOptions{Logger: ibxLogger()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.send(context.Background(), &cmd)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return id
}

// ibxAnswer reads the answer object of command id.
func ibxAnswer(t *testing.T, store objstore.Store, id string) (*inboxAnswer, bool) {
	t.Helper()
	b, _, err := store.Get(context.Background(), "inbox-answers/"+id)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	a, err := decodeAnswer(b)
	if err != nil {
		t.Fatal(err)
	}
	return a, true
}

func ibxKeys(t *testing.T, store objstore.Store, prefix string) []string {
	t.Helper()
	page, err := store.List(context.Background(), prefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range page {
		keys = append(keys, o.Key)
	}
	return keys
}

// dyingStore models a process killed after a number of store requests:
// once armed with n it performs n more requests, then fails every request
// (kv.ErrFenced, which the kv does not retry), as a dead process makes
// none. The kv's background garbage collection (LISTs and DELETEs under
// the queue prefix) is not counted, as its timing is not deterministic,
// but dies too. disarm stops the count, so a request a background task
// makes after the observed work ended cannot be blamed on that work.
type dyingStore struct {
	objstore.Store
	mu     sync.Mutex
	left   int // requests left; -1 while not armed
	dead   bool
	count  int    // counted requests since arming
	killer string // the request that found the process dead first
}

func newDyingStore(inner objstore.Store) *dyingStore { return &dyingStore{Store: inner, left: -1} }

func (d *dyingStore) arm(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.left, d.count = n, 0
}

// disarm stops counting and reports whether the process died, and on
// which request.
func (d *dyingStore) disarm() (died bool, killer string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dead {
		d.left = -1
	}
	return d.dead, d.killer
}

func (d *dyingStore) gate(op, key string, counted bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dead && counted && d.left == 0 {
		d.dead, d.killer = true, op+" "+key
	}
	if d.dead {
		return fmt.Errorf("dying store: %s %s after the process died: %w", op, key, kv.ErrFenced)
	}
	if counted && d.left > 0 {
		d.left--
		d.count++
	}
	return nil
}

func background(key string) bool { return strings.HasPrefix(key, "queue/") }

func (d *dyingStore) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	if err := d.gate("get", key, true); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return d.Store.Get(ctx, key)
}

func (d *dyingStore) Put(ctx context.Context, key string, data []byte, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := d.gate("put", key, true); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return d.Store.Put(ctx, key, data, o)
}

func (d *dyingStore) Delete(ctx context.Context, key string) error {
	if err := d.gate("delete", key, !background(key)); err != nil {
		return err
	}
	return d.Store.Delete(ctx, key)
}

func (d *dyingStore) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := d.gate("head", key, true); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return d.Store.Head(ctx, key)
}

func (d *dyingStore) List(ctx context.Context, prefix, after string, limit int) ([]objstore.ObjectInfo, error) {
	if err := d.gate("list", prefix, !background(prefix)); err != nil {
		return nil, err
	}
	return d.Store.List(ctx, prefix, after, limit)
}

// crashScenario is one command kind in the exactly-once crash test.
type crashScenario struct {
	name string
	// setup prepares the first writer and returns the command to send.
	setup func(t *testing.T, w *ibxWriter) inboxCommand
	// between runs on the next writer after the crash, before it drains
	// the inbox again: it does what may happen meanwhile (a waiter
	// consumes a buffered signal, a run terminates, a new incarnation
	// starts) and returns what check needs to know.
	between func(t *testing.T, w *ibxWriter) any
	// check asserts that the command was applied exactly once.
	check func(t *testing.T, w *ibxWriter, ans *inboxAnswer, state any)
}

const crashKey = "approval"

var crashScenarios = []crashScenario{
	{
		name: "signal buffered",
		setup: func(t *testing.T, w *ibxWriter) inboxCommand {
			return inboxCommand{Kind: CommandSignal, Key: crashKey, Payload: []byte("yes")}
		},
		// A waiter registering now would consume the buffered signal.
		between: func(t *testing.T, w *ibxWriter) any {
			ok, err := w.rt.ClearSignal(context.Background(), crashKey)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		},
		check: func(t *testing.T, w *ibxWriter, ans *inboxAnswer, state any) {
			consumed := state.(bool)
			buffered := w.kv(sigBufKey(crashKey)) != nil
			if consumed == buffered {
				t.Fatalf("signal consumed before the redrain: %v, buffered after it: %v; want exactly one", consumed, buffered)
			}
			if buffered && ans.Signal != signal.Buffered.String() {
				t.Fatalf("answer %q for a buffered signal", ans.Signal)
			}
		},
	},
	{
		name: "signal to a waiter",
		setup: func(t *testing.T, w *ibxWriter) inboxCommand {
			ibxWaiter(t, w, "j1")
			return inboxCommand{Kind: CommandSignal, Key: crashKey, Payload: []byte("yes")}
		},
		// If the waiter was woken, its run moves on and registers a new
		// waiter on the same key, which must not get the signal again.
		between: func(t *testing.T, w *ibxWriter) any {
			if w.job("j1").State == queue.StateScheduled {
				return false
			}
			ibxWaiter(t, w, "j2")
			return true
		},
		check: func(t *testing.T, w *ibxWriter, ans *inboxAnswer, state any) {
			j1 := w.job("j1")
			if j1.WokenAt.IsZero() || string(j1.WakePayload) != "yes" {
				t.Fatalf("waiter j1 not woken with the signal: %+v", j1)
			}
			if state.(bool) {
				if j2 := w.job("j2"); j2.State != queue.StateScheduled || !j2.WokenAt.IsZero() {
					t.Fatalf("the signal was delivered twice: the second waiter is %s, woken %v", j2.State, j2.WokenAt)
				}
			}
			if b := w.kv(sigBufKey(crashKey)); b != nil {
				t.Fatalf("signal still buffered after its delivery: %q", b)
			}
			if ans.Signal != signal.Delivered.String() {
				t.Fatalf("answer %q, want delivered", ans.Signal)
			}
		},
	},
	{
		name: "clear signal",
		setup: func(t *testing.T, w *ibxWriter) inboxCommand {
			if _, err := w.rt.Signal(context.Background(), crashKey, []byte("old")); err != nil {
				t.Fatal(err)
			}
			return inboxCommand{Kind: CommandClearSignal, Key: crashKey}
		},
		// A newer signal buffered after the clear must survive a redrain.
		between: func(t *testing.T, w *ibxWriter) any {
			if w.kv(sigBufKey(crashKey)) != nil {
				return false
			}
			if _, err := w.rt.Signal(context.Background(), crashKey, []byte("new")); err != nil {
				t.Fatal(err)
			}
			return true
		},
		check: func(t *testing.T, w *ibxWriter, ans *inboxAnswer, state any) {
			got := w.kv(sigBufKey(crashKey))
			if state.(bool) {
				if !bufferHolds(got, "new") {
					t.Fatalf("the clear was applied twice: buffer %q, want the newer signal", got)
				}
			} else if got != nil {
				t.Fatalf("buffer %q after the clear", got)
			}
			if !ans.OK {
				t.Fatal("answer says nothing was cleared")
			}
		},
	},
	{
		name: "submit",
		setup: func(t *testing.T, w *ibxWriter) inboxCommand {
			return inboxCommand{Kind: CommandSubmit, RunID: "r1", Input: []byte("in")}
		},
		// If the run started, it terminates before the redrain, freeing
		// its id: a second application would start it again.
		between: func(t *testing.T, w *ibxWriter) any {
			ok, err := w.rt.Cancel(context.Background(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			return ok
		},
		check: func(t *testing.T, w *ibxWriter, ans *inboxAnswer, state any) {
			ended := state.(bool)
			active := w.kv(runKey("r1")) != nil
			if ended == active {
				t.Fatalf("run started before the crash: %v, active after the redrain: %v; want exactly one incarnation", ended, active)
			}
			if !ans.NewlySubmitted || ans.RunID != "r1" {
				t.Fatalf("answer %+v, want r1 newly submitted", ans)
			}
		},
	},
	{
		name: "cancel",
		setup: func(t *testing.T, w *ibxWriter) inboxCommand {
			if _, err := w.rt.Submit(context.Background(), runtime.RunSpec{RunID: "r1", Input: []byte("first")}); err != nil {
				t.Fatal(err)
			}
			return inboxCommand{Kind: CommandCancel, RunID: "r1"}
		},
		// If the run was cancelled, a new incarnation starts under the
		// same id; the redrain must not cancel it.
		between: func(t *testing.T, w *ibxWriter) any {
			if w.kv(runKey("r1")) != nil {
				return false
			}
			if _, err := w.rt.Submit(context.Background(), runtime.RunSpec{RunID: "r1", Input: []byte("second")}); err != nil {
				t.Fatal(err)
			}
			return true
		},
		check: func(t *testing.T, w *ibxWriter, ans *inboxAnswer, state any) {
			st, err := w.rt.Status(context.Background(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			if state.(bool) {
				if st.State.Terminal() {
					t.Fatalf("the cancel was applied twice: the new incarnation is %s", st.State)
				}
			} else if st.State != runstate.StateCancelled {
				t.Fatalf("run is %s after the cancel, want cancelled", st.State)
			}
			if !ans.OK {
				t.Fatal("answer says the run was not cancelled")
			}
		},
	},
}

// ibxWaiter registers scheduled job id as the waiter on crashKey, as a
// step returning ContinueOnSignal does.
func ibxWaiter(t *testing.T, w *ibxWriter, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := w.q.Enqueue(ctx, "waiters", nil, queue.EnqueueOptions{ID: id, RunAt: w.q.Clock().Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := w.q.KVPut(ctx, sigWaitKey(crashKey), []byte(id)); err != nil {
		t.Fatal(err)
	}
}

// TestInboxExactlyOnceAcrossCrashes kills the draining writer after each
// of its store requests in turn (kv WAL PUTs and inbox requests alike),
// lets the next writer's world move on (the change that would expose a
// second application), drains again, and checks each command kind was
// applied exactly once and answered.
func TestInboxExactlyOnceAcrossCrashes(t *testing.T) {
	for _, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) {
			crashes := 0
			for n := 0; ; n++ {
				if ibxCrashOnce(t, sc, n) {
					break
				}
				crashes++
				if n > 100 {
					t.Fatal("the drain never completed")
				}
			}
			if crashes < 5 {
				t.Fatalf("only %d crash points: the drain makes too few requests for this test to mean anything", crashes)
			}
		})
	}
}

// ibxCrashOnce runs one scenario with the writer dying after n requests;
// it reports whether the first drain completed without dying.
func ibxCrashOnce(t *testing.T, sc crashScenario, n int) bool {
	t.Helper()
	ctx := context.Background()
	base := mem.New()
	clock := clock.NewMock(ibxStart)
	dying := newDyingStore(base)
	first := ibxOpen(t, dying, clock, nil)
	cmd := sc.setup(t, first)
	id := ibxSend(t, base, cmd)

	dying.arm(n)
	_, err := DrainInbox(ctx, first.rt, InboxOptions{})
	if err == nil {
		// The marker's removal is a non-durable commit the kv flushes in
		// the background; flush it now so where the crash lands does not
		// depend on timing.
		err = first.q.DB().Sync(ctx)
	}
	died, killer := dying.disarm()
	completed := !died
	if completed && err != nil {
		t.Fatalf("n=%d: drain without a crash failed: %v", n, err)
	}
	if !completed && err == nil {
		t.Fatalf("n=%d: the store died at %s but the drain reported no error", n, killer)
	}

	second := ibxOpen(t, base, clock, nil) // fences the dead writer
	_ = first.q.Close()
	defer second.q.Close()
	state := sc.between(t, second)
	for i := 0; ; i++ {
		if _, err := DrainInbox(ctx, second.rt, InboxOptions{}); err != nil {
			t.Fatalf("n=%d: redrain: %v", n, err)
		}
		if _, ok := ibxAnswer(t, base, id); ok || i == 3 {
			break
		}
	}
	ans, ok := ibxAnswer(t, base, id)
	if !ok {
		t.Fatalf("n=%d: no answer after the redrain", n)
	}
	if ans.Code != "" {
		t.Fatalf("n=%d: answer is an error: %s %s", n, ans.Code, ans.Error)
	}
	if keys := ibxKeys(t, base, "inbox/"); len(keys) != 0 {
		t.Fatalf("n=%d: commands left in the inbox: %v", n, keys)
	}
	// A crash between the command's deletion and its marker's leaves
	// the marker to the sweep, which ServeInbox runs at its start.
	ib, err := newInbox(second.rt, InboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if m := second.kv(inboxMarkerKey(id)); m != nil {
		t.Fatalf("n=%d: marker left after the command was answered and the sweep ran", n)
	}
	func() {
		defer func() {
			if t.Failed() {
				t.Logf("crash after %d requests", n)
			}
		}()
		sc.check(t, second, ans, state)
	}()
	return completed
}

// TestInboxRejections checks the answers to commands that cannot apply.
func TestInboxRejections(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	clock := clock.NewMock(ibxStart)
	w := ibxOpen(t, store, clock, nil)
	defer w.q.Close()
	if _, err := w.rt.Submit(ctx, runtime.RunSpec{RunID: "r1", Input: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	mismatch := ibxSend(t, store, inboxCommand{Kind: CommandSubmit, RunID: "r1", Input: []byte("b")})
	badKey := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: ""})
	reserved := ibxSend(t, store, inboxCommand{Kind: CommandSubmit, RunID: "r2", KVWrites: map[string][]byte{"workflow/x": nil}})
	// Expired before any writer saw it.
	expired := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k", Expires: ibxStart.Add(-time.Second)})
	// Objects no Client wrote: left in place, unanswered
	// (TestInboxLeavesForeignObjects).
	put := func(key, data string) {
		if _, err := store.Put(ctx, key, []byte(data), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("inbox/garbage", "{not json")
	put("inbox/wrong-id", `{"v":1,"id":"other","kind":"signal","key":"k"}`)
	put("inbox/nested/key", "x")

	// A command of a kind or format this writer does not know.
	unknown := ibxSend(t, store, inboxCommand{Kind: "reboot"})
	newer := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k"})
	put("inbox/"+newer, `{"tqw":"inbox-command","v":2,"id":"`+newer+`","kind":"signal","key":"k"}`)

	n, err := DrainInbox(ctx, w.rt, InboxOptions{})
	if err != nil || n != 6 {
		t.Fatalf("DrainInbox = %d, %v; want 6 commands handled", n, err)
	}
	for _, c := range []struct {
		id   string
		want error
	}{
		{mismatch, runtime.ErrInputMismatch}, {badKey, signal.ErrInvalidKey}, {reserved, runtime.ErrReserved},
		{expired, ErrCommandExpired}, {unknown, ErrInvalidCommand}, {newer, ErrInvalidCommand},
	} {
		a, ok := ibxAnswer(t, store, c.id)
		if !ok {
			t.Fatalf("no answer to %s", c.id)
		}
		err := &CommandError{CommandID: c.id, Code: a.Code, Message: a.Error}
		if !errors.Is(err, c.want) {
			t.Errorf("answer to %s: %v; want %v", c.id, err, c.want)
		}
	}
	if w.kv(sigBufKey("k")) != nil {
		t.Error("an expired or invalid signal command was applied")
	}
	for _, id := range []string{"garbage", "wrong-id"} {
		if _, ok := ibxAnswer(t, store, id); ok {
			t.Errorf("the writer answered %s, which no Client wrote", id)
		}
	}
	if keys := ibxKeys(t, store, "inbox/"); strings.Join(keys, " ") != "inbox/garbage inbox/nested/key inbox/wrong-id" {
		t.Fatalf("inbox holds %v; want only the objects no Client wrote", keys)
	}
}

// TestInboxRetriesStoreErrorsThenAnswers checks that a command failing
// with a store error stays in the inbox for the next pass, and is answered
// with the error after MaxAttempts passes.
func TestInboxRetriesStoreErrorsThenAnswers(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	// A stored marker that does not decode makes every attempt fail.
	id := ibxSend(t, store, inboxCommand{Kind: CommandCancel, RunID: "r1"})
	if err := w.q.KVPut(ctx, inboxMarkerKey(id), []byte{0xc1}); err != nil {
		t.Fatal(err)
	}
	ib, err := newInbox(w.rt, InboxOptions{MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		if _, err := ib.drain(ctx); !errors.Is(err, runtime.ErrCorruptRecord) {
			t.Fatalf("pass %d: err = %v; want the marker's ErrCorruptRecord", pass, err)
		}
		if _, ok := ibxAnswer(t, store, id); ok {
			t.Fatalf("pass %d: answered before MaxAttempts", pass)
		}
	}
	if _, err := ib.drain(ctx); err != nil {
		t.Fatalf("last pass: %v", err)
	}
	a, ok := ibxAnswer(t, store, id)
	if !ok || a.Code != "internal" || !strings.Contains(a.Error, "corrupt") {
		t.Fatalf("answer after MaxAttempts = %+v, %v; want an internal error naming the corruption", a, ok)
	}
}

// TestInboxIdleBackoff counts the LISTs an idle writer makes per simulated
// minute, and checks a command brings the polling back to MinInterval.
func TestInboxIdleBackoff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := mem.New()
	w := ibxOpen(t, base, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	// The runtime's own store requests (inbox and memo) go through the
	// counter; the queue's kv uses base directly.
	counted := counting.New(base)
	rt, err := runtime.New(w.q, counted, w.runner, runtime.Options{Logger: ibxLogger()})
	if err != nil {
		t.Fatal(err)
	}
	clock := clock.NewMock(ibxStart)
	done := make(chan error, 1)
	go func() {
		done <- ServeInbox(ctx, rt, InboxOptions{Clock: clock, SweepEvery: 24 * time.Hour})
	}()
	// advance moves the clock in 50 ms ticks for d, letting the drainer
	// finish each pass it starts (it re-arms its timer when done).
	advance := func(d time.Duration) {
		for elapsed := time.Duration(0); elapsed < d; elapsed += 50 * time.Millisecond {
			if err := clock.WaitForTimers(ctx, 1); err != nil {
				t.Fatal(err)
			}
			clock.Advance(50 * time.Millisecond)
		}
		if err := clock.WaitForTimers(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	lists := func() int64 { return counted.Counts().Lists }

	advance(time.Minute)
	firstMinute := lists()
	// Passes at 0 (with the sweep's LIST), then after 0.4, 0.8, 1.6, 3.2
	// s (the interval doubles from 200 ms), then every 5 s.
	if firstMinute < 14 || firstMinute > 19 {
		t.Fatalf("LISTs in the first idle minute = %d, want about 17", firstMinute)
	}
	advance(time.Minute)
	if perMinute := lists() - firstMinute; perMinute != 12 {
		t.Fatalf("LISTs per idle minute = %d, want 12 (one per 5 s: 17,280 a day)", perMinute)
	}

	// A command resets the interval: it is answered within one idle
	// interval, and the passes that follow come every 200 ms, doubling.
	id := ibxSend(t, base, inboxCommand{Kind: CommandSignal, Key: "k", Payload: []byte("p")})
	before := lists()
	advance(5 * time.Second)
	if _, ok := ibxAnswer(t, base, id); !ok {
		t.Fatal("command not answered within the idle interval")
	}
	advance(time.Second)
	if n := lists() - before; n < 3 {
		t.Fatalf("LISTs in the 6 s after a command = %d; want the fast interval back (at least 3)", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeInbox returned %v after ctx ended; want nil", err)
	}
}

// TestInboxSweep checks abandoned answers expire after AnswerTTL and
// leftover markers go once their command is gone.
func TestInboxSweep(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	w := ibxOpen(t, store, clock.NewMock(ibxStart), nil)
	defer w.q.Close()
	clock := clock.NewMock(time.Now())
	ib, err := newInbox(w.rt, InboxOptions{Clock: clock, AnswerTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	id := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k"})
	if _, err := ib.drain(ctx); err != nil {
		t.Fatal(err)
	}
	pending := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k2"})
	for _, mid := range []string{"01LEFTOVER", pending} {
		if err := w.q.KVPut(ctx, inboxMarkerKey(mid), []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(30 * time.Minute)
	if err := ib.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := ibxAnswer(t, store, id); !ok {
		t.Fatal("answer swept before its TTL")
	}
	if w.kv(inboxMarkerKey("01LEFTOVER")) != nil {
		t.Fatal("marker of a command that is gone was kept")
	}
	if w.kv(inboxMarkerKey(pending)) == nil {
		t.Fatal("marker of a command still in the inbox was swept")
	}
	clock.Advance(31 * time.Minute)
	if err := ib.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := ibxAnswer(t, store, id); ok {
		t.Fatal("answer kept after its TTL")
	}
}

func TestDecodeCommandAndAnswerRoundTrip(t *testing.T) {
	cmd := &inboxCommand{V: inboxFormat, ID: "01ABC", Kind: CommandSubmit, RunID: "r", Input: []byte{0, 1},
		Headers: map[string]string{"h": "v"}, KVWrites: map[string][]byte{"k": []byte("v")}, SentAt: ibxStart}
	b, err := encodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.RunID != "r" || !bytes.Equal(got.Input, []byte{0, 1}) || got.Headers["h"] != "v" || string(got.KVWrites["k"]) != "v" || !got.SentAt.Equal(ibxStart) {
		t.Fatalf("round trip: %+v", got)
	}
	for _, bad := range []string{`{}`, `{"v":2,"id":"x","kind":"signal"}`, `{"v":1,"id":"a/b","kind":"signal"}`,
		`{"v":1,"id":"x","kind":"submit"}`, `{"v":1,"id":"x","kind":"reboot"}`, `[`} {
		if _, err := decodeCommand([]byte(bad)); !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("decodeCommand(%s) = %v; want ErrInvalidCommand", bad, err)
		}
	}
	ab, _ := json.Marshal(&inboxAnswer{V: inboxFormat, ID: "x", Signal: "delivered"})
	if a, err := decodeAnswer(ab); err != nil || a.Signal != "delivered" {
		t.Fatalf("decodeAnswer = %+v, %v", a, err)
	}
	if _, err := decodeAnswer([]byte(`{"v":1}`)); !errors.Is(err, runtime.ErrCorruptRecord) {
		t.Fatalf("answer without id: %v", err)
	}
}

func FuzzDecodeInbox(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"01ABC","kind":"signal","key":"k","payload":"eA=="}`))
	f.Add([]byte(`{"v":1,"id":"01ABC","kind":"submit","run_id":"r","kv_writes":{"a":"Yg=="}}`))
	f.Add([]byte(`{"v":1,"id":"x","kind":"cancel","run_id":"r","applied_at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"tqw":"inbox-command","v":1,"id":"01ABC","kind":"submit","run_id":"r","input":"aW4="}`))
	f.Add([]byte(`{"tqw":"inbox-answer","v":1,"id":"01ABC","kind":"signal","code":"uncertain","error":"e"}`))
	m, _ := encodeMarker(&inboxMarker{Kind: CommandSignal, Buf: []byte{1, 2}, Outcome: "delivered", AtMs: 5})
	f.Add(m)
	f.Add([]byte(`{"owner":"o","host":"h","pid":1,"expires":"2026-01-01T00:00:00Z","mechanism":"object"}`))
	golden.AddCorpus(f, "testdata/golden/command-*.v*.json")
	golden.AddCorpus(f, "testdata/golden/answer-*.v*.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := decodeCommand(b); err == nil {
			if validCommandID(c.ID) != nil || c.V != inboxFormat {
				t.Fatalf("accepted an invalid command: %+v", c)
			}
			again, err := encodeCommand(c)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeCommand(again); err != nil {
				t.Fatalf("re-encoded command does not decode: %v", err)
			}
		}
		if a, err := decodeAnswer(b); err == nil && a.ID == "" {
			t.Fatal("accepted an answer without id")
		}
		_, _ = decodeInboxMarker(b)
	})
}

// BenchmarkInboxSignal measures one signal command through the inbox:
// the client's PUT, one writer pass (LIST, HEAD, GET, commits, answer PUT,
// command DELETE) and the client's read and delete of the answer. It
// reports the object-store requests per command on each side; the kv's
// WAL PUTs are counted on the writer's side.
func BenchmarkInboxSignal(b *testing.B) {
	ctx := context.Background()
	base := mem.New()
	writerStore, clientStore := counting.New(base), counting.New(base)
	q, err := queue.Open(ctx, writerStore, queue.Options{Logger: ibxLogger(), SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	rt, err := runtime.New(q, writerStore, runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) { return runtime.Succeed(nil), nil }),
		runtime.Options{Logger: ibxLogger()})
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewClient(clientStore, ClientOptions{Logger: ibxLogger()})
	if err != nil {
		b.Fatal(err)
	}
	writerStore.Reset()
	clientStore.Reset()
	n := 0
	for b.Loop() {
		id, err := c.send(ctx, &inboxCommand{Kind: CommandSignal, Key: "k", Payload: []byte("p")})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DrainInbox(ctx, rt, InboxOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, _, err := clientStore.Get(ctx, "inbox-answers/"+id); err != nil {
			b.Fatal(err)
		}
		if err := clientStore.Delete(ctx, "inbox-answers/"+id); err != nil {
			b.Fatal(err)
		}
		n++
	}
	wc, cc := writerStore.Counts(), clientStore.Counts()
	b.ReportMetric(float64(wc.Total())/float64(n), "writer-req/op")
	b.ReportMetric(float64(wc.Puts)/float64(n), "writer-puts/op")
	b.ReportMetric(float64(cc.Total())/float64(n), "client-req/op")
}
