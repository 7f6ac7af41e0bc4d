package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var clientTestStores atomic.Int64

// writeRecorder records the keys a process writes to the store.
type writeRecorder struct {
	objstore.Store
	mu     sync.Mutex
	writes []string
}

func (w *writeRecorder) note(op, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, op+" "+key)
}

func (w *writeRecorder) Put(ctx context.Context, key string, data []byte, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	w.note("put", key)
	return w.Store.Put(ctx, key, data, o)
}

func (w *writeRecorder) Delete(ctx context.Context, key string) error {
	w.note("delete", key)
	return w.Store.Delete(ctx, key)
}

// signalRunner waits at step 0 when the input is "wait" (on key
// "k-<run>"), and succeeds at step 1 with the signal it received.
var signalRunner = runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	if s.Number == 0 && string(s.Payload) == "wait" {
		return runtime.ContinueOnSignal(s.Payload, "k-"+s.RunID, time.Hour), nil
	}
	if s.Signal == nil {
		return runtime.Succeed([]byte("no signal")), nil
	}
	return runtime.Succeed(s.Signal), nil
})

// TestClientCommandsThroughInbox drives a writer process (a Runtime with
// its worker and ServeInbox) from a client "process" on the same named
// mem store: every command goes through the inbox, reads go through a
// Reader, and the writer is never fenced.
func TestClientCommandsThroughInbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		// Both "processes" resolve the same mem://NAME store.
		store := mem.Named(fmt.Sprintf("client-test-%d", clientTestStores.Add(1)))
		w := ibxOpen(t, store, nil, signalRunner)
		epoch := w.q.DB().Epoch()
		worker := w.rt.Spawn(ctx)
		served := make(chan error, 1)
		go func() { served <- ServeInbox(ctx, w.rt, InboxOptions{Writer: "test-writer"}) }()
		t.Cleanup(func() { // also after a failure, so the bubble empties
			stop()
			_ = worker.Shutdown(context.Background())
			_ = w.q.Close()
		})

		rec := &writeRecorder{Store: store}
		c, err := NewClient(rec, ClientOptions{Logger: ibxLogger(), Name: "client-test"})
		if err != nil {
			t.Fatal(err)
		}

		// Submit: the client picks the run id; a repeat is a duplicate;
		// another input under the same id is a mismatch.
		out, err := c.Submit(ctx, runtime.RunSpec{Input: []byte("wait"), Headers: map[string]string{"who": "client"}})
		if err != nil || !out.NewlySubmitted || len(out.RunID) != 26 || out.JobID == "" {
			t.Fatalf("Submit = %+v, %v; want a new run with a ULID id", out, err)
		}
		run := out.RunID
		again, err := c.Submit(ctx, runtime.RunSpec{RunID: run, Input: []byte("wait")})
		if err != nil || again.NewlySubmitted || again.RunID != run {
			t.Fatalf("second Submit = %+v, %v; want a duplicate", again, err)
		}
		_, err = c.Submit(ctx, runtime.RunSpec{RunID: run, Input: []byte("other")})
		var remote *CommandError
		if !errors.Is(err, runtime.ErrInputMismatch) || !errors.As(err, &remote) || remote.Code != "input_mismatch" {
			t.Fatalf("Submit with another input: %v; want a CommandError matching ErrInputMismatch", err)
		}
		// Rejected locally, without a round trip.
		if _, err := c.Submit(ctx, runtime.RunSpec{RunID: "bad id"}); !errors.Is(err, runstate.ErrInvalidRunID) {
			t.Fatalf("Submit with a bad run id: %v", err)
		}

		// Status from the Reader: the run waits for its signal.
		synctest.Wait()
		st, err := c.Status(ctx, run)
		if err != nil || st.State != runstate.StateWaiting || st.SignalKey != "k-"+run || st.Headers["who"] != "client" {
			t.Fatalf("Status = %+v, %v; want waiting on k-%s", st, err, run)
		}

		// Signal delivered to the waiting run.
		res, err := c.Signal(ctx, "k-"+run, []byte("approved"))
		if err != nil || res != signal.Delivered {
			t.Fatalf("Signal to a waiter = %v, %v; want delivered", res, err)
		}
		synctest.Wait()
		st, err = c.Status(ctx, run)
		if err != nil || st.State != runstate.StateSucceeded || string(st.Result) != "approved" {
			t.Fatalf("Status after the signal = %+v, %v; want succeeded with the signal", st, err)
		}

		// Signal with no waiter: buffered, then cleared once.
		if res, err := c.Signal(ctx, "nobody", []byte("x")); err != nil || res != signal.Buffered {
			t.Fatalf("Signal without a waiter = %v, %v; want buffered", res, err)
		}
		if b := w.kv(sigBufKey("nobody")); !bufferHolds(b, "x") {
			t.Fatalf("buffer after the client's signal = %q", b)
		}
		for i, want := range []bool{true, false} {
			if ok, err := c.ClearSignal(ctx, "nobody"); err != nil || ok != want {
				t.Fatalf("ClearSignal #%d = %v, %v; want %v", i+1, ok, err, want)
			}
		}
		// A buffered signal is consumed by the next waiter.
		if _, err := c.Signal(ctx, "k-early", []byte("ahead")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Submit(ctx, runtime.RunSpec{RunID: "early", Input: []byte("wait")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if st, err := c.Status(ctx, "early"); err != nil || st.State != runstate.StateSucceeded || string(st.Result) != "ahead" {
			t.Fatalf("run after a buffered signal = %+v, %v", st, err)
		}

		// Cancel through the client.
		if _, err := c.Submit(ctx, runtime.RunSpec{RunID: "doomed", Input: []byte("wait")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if ok, err := c.Cancel(ctx, "doomed"); err != nil || !ok {
			t.Fatalf("Cancel = %v, %v; want true", ok, err)
		}
		if ok, err := c.Cancel(ctx, "no-such-run"); err != nil || ok {
			t.Fatalf("Cancel of an unknown run = %v, %v; want false", ok, err)
		}
		synctest.Wait()
		if st, err := c.Status(ctx, "doomed"); err != nil || st.State != runstate.StateCancelled {
			t.Fatalf("Status after Cancel = %+v, %v", st, err)
		}
		if _, err := c.Status(ctx, "no-such-run"); !errors.Is(err, runtime.ErrRunNotFound) {
			t.Fatalf("Status of an unknown run: %v", err)
		}
		runs, err := c.ListRuns(ctx, runstate.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.RunID+"="+r.State.String())
		}
		want := []string{"doomed=cancelled", "early=succeeded", run + "=succeeded"}
		sort.Strings(want) // run-id order
		if strings.Join(ids, " ") != strings.Join(want, " ") {
			t.Fatalf("ListRuns = %v, want %v", ids, want)
		}

		// The client wrote commands and deleted answers, nothing else,
		// and the writer kept its epoch: it was never fenced.
		for _, wr := range rec.writes {
			if !strings.HasPrefix(wr, "put inbox/") && !strings.HasPrefix(wr, "delete inbox-answers/") {
				t.Errorf("the client wrote %s", wr)
			}
		}
		if got := w.q.DB().Epoch(); got != epoch {
			t.Fatalf("writer epoch %d -> %d: the client fenced the writer", epoch, got)
		}
		if keys := ibxKeys(t, store, "inbox"); len(keys) != 0 {
			t.Fatalf("inbox objects left: %v", keys)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(ctx, run); !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("Status after Close: %v", err)
		}
		stop()
		if err := <-served; err != nil {
			t.Fatalf("ServeInbox: %v", err)
		}
		if err := worker.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := w.q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClientNoAnswer checks the error of a command no writer answers, and
// that the command is applied once a writer drains the inbox.
func TestClientNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := mem.New()
		c, err := NewClient(store, ClientOptions{Logger: ibxLogger(), AnswerTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = c.Signal(ctx, "k", []byte("late"))
		if !errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Signal without a writer: %v; want ErrNoAnswer", err)
		}
		if waited := time.Since(start); waited != 10*time.Second {
			t.Fatalf("waited %v, want the 10 s answer timeout", waited)
		}
		for _, want := range []string{"no live writer", "tqw-dsl worker", "stays at inbox/"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}

		// A live lease without a drainer is named as such.
		held, err := lease.Acquire(ctx, store, lease.Options{Owner: "w1", Host: "box", PID: 42})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = c.Cancel(dctx, "r1")
		cancel()
		if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "writer w1 (pid 42 on box") || !strings.Contains(err.Error(), "did not answer") {
			t.Fatalf("Cancel with a live but silent writer: %v", err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// The commands wait in the inbox; a writer applies them later.
		if keys := ibxKeys(t, store, "inbox/"); len(keys) != 2 {
			t.Fatalf("inbox holds %v, want the two unanswered commands", keys)
		}
		w := ibxOpen(t, store, nil, nil)
		t.Cleanup(func() { _ = w.q.Close() })
		if n, err := DrainInbox(ctx, w.rt, InboxOptions{}); err != nil || n != 2 {
			t.Fatalf("DrainInbox = %d, %v", n, err)
		}
		if b := w.kv(sigBufKey("k")); !bufferHolds(b, "late") {
			t.Fatalf("late signal not buffered: %q", b)
		}
		if err := w.q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClientCommandExpiry checks CommandTTL: a command found after its
// expiry is rejected, not applied.
func TestClientCommandExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := mem.New()
		c, err := NewClient(store, ClientOptions{Logger: ibxLogger(), AnswerTimeout: time.Minute, CommandTTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.Signal(ctx, "k", []byte("stale"))
			errc <- err
		}()
		// Move the bubble's fake clock past the TTL: the writer starts late.
		time.Sleep(40 * time.Second)
		w := ibxOpen(t, store, nil, nil)
		t.Cleanup(func() { _ = w.q.Close() })
		if _, err := DrainInbox(ctx, w.rt, InboxOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, ErrCommandExpired) {
			t.Fatalf("Signal answered after its TTL: %v; want ErrCommandExpired", err)
		}
		if b := w.kv(sigBufKey("k")); b != nil {
			t.Fatal("an expired signal was buffered")
		}
		if err := w.q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewClientValidation(t *testing.T) {
	if _, err := NewClient(nil, ClientOptions{}); err == nil {
		t.Error("NewClient(nil) succeeded")
	}
	if _, err := NewClient(mem.New(), ClientOptions{PollMin: time.Second, PollMax: time.Millisecond}); err == nil {
		t.Error("PollMax < PollMin accepted")
	}
	if _, err := NewClient(mem.New(), ClientOptions{InboxPrefix: "/bad"}); err == nil {
		t.Error("an invalid inbox prefix accepted")
	}
	c, err := NewClient(mem.New(), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Signal(ctx, "", nil); !errors.Is(err, signal.ErrInvalidKey) {
		t.Errorf("empty signal key: %v", err)
	}
	if _, err := c.Signal(ctx, "k", make([]byte, signal.MaxPayload+1)); !errors.Is(err, runtime.ErrValueTooLarge) {
		t.Errorf("oversized signal: %v", err)
	}
	if _, err := c.Submit(ctx, runtime.RunSpec{KVWrites: map[string][]byte{"workflow/x": nil}}); !errors.Is(err, runtime.ErrReserved) {
		t.Errorf("reserved KV write: %v", err)
	}
	if _, err := c.Submit(ctx, runtime.RunSpec{Headers: map[string]string{"workflow.x": ""}}); !errors.Is(err, runtime.ErrReserved) {
		t.Errorf("reserved header: %v", err)
	}
	if _, err := c.Cancel(ctx, ""); !errors.Is(err, runstate.ErrInvalidRunID) {
		t.Errorf("empty run id: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "r"); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Cancel after Close: %v", err)
	}
}

// TestNewClientRefusesOverlappingPrefixes checks that a client whose
// inbox would write commands into the queue's kv store or onto the
// writer lease is refused before it writes anything.
func TestNewClientRefusesOverlappingPrefixes(t *testing.T) {
	for _, opts := range []ClientOptions{
		{InboxPrefix: "queue"},
		{InboxPrefix: "queue/inbox"},
		{InboxPrefix: "db", Queue: queue.Options{Prefix: "db"}},
		{InboxPrefix: "q", Queue: queue.Options{Prefix: "q-answers"}},
		{InboxPrefix: "writer-lease"},
		{InboxPrefix: "lease", Lease: lease.Options{Key: "lease-answers/x"}},
	} {
		if _, err := NewClient(mem.New(), opts); !errors.Is(err, objstore.ErrNamespaceOverlap) {
			t.Errorf("NewClient(inbox %q, queue %q, lease %q) = %v; want objstore.ErrNamespaceOverlap",
				opts.InboxPrefix, opts.Queue.Prefix, opts.Lease.Key, err)
		}
	}
	if _, err := NewClient(mem.New(), ClientOptions{InboxPrefix: "db-inbox", Queue: queue.Options{Prefix: "db"}}); err != nil {
		t.Errorf("NewClient with disjoint prefixes: %v", err)
	}
}

// ExampleClient sends a signal to a store another process works: the
// writer drains its inbox, the client waits for the answer.
func ExampleClient() {
	ctx := context.Background()
	store := mem.Named("example-client")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The writer process: it owns the store and serves its inbox.
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	rt, err := runtime.New(q, store, runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) {
		return runtime.Succeed(nil), nil
	}), runtime.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	serving, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ServeInbox(serving, rt, InboxOptions{}) }()

	// Another process: a client on the same store, never its writer.
	c, err := NewClient(store, ClientOptions{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	out, err := c.Signal(ctx, "invoice-118", []byte("approved"))
	if err != nil {
		panic(err)
	}
	fmt.Println(out) // no run waits on the key yet: held for the next waiter

	stop()
	if err := <-served; err != nil {
		panic(err)
	}
	// Output: buffered
}

// faultyWriter is a writer whose store requests go through a fault
// injector: a kv whose requests time out after 100 ms (then retry) and an
// inbox server that gives up on the first failed attempt, after 50 ms.
type faultyWriter struct {
	q      *queue.Queue
	rt     *runtime.Runtime
	faults *faults.Store
	logs   *logRecorder
}

var faultyInbox = InboxOptions{MaxAttempts: 1, ApplyTimeout: 50 * time.Millisecond, Writer: "faulty"}

func openFaultyWriter(t *testing.T, base objstore.Store, runner runtime.StepRunner) *faultyWriter {
	t.Helper()
	fs := faults.New(base, 7)
	q, err := queue.Open(context.Background(), fs, queue.Options{Logger: ibxLogger(), SweepInterval: -1,
		DefaultConfig: queue.QueueConfig{LeaseDuration: time.Hour},
		KV:            kv.Options{RequestTimeout: 100 * time.Millisecond, CloseTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if runner == nil {
		runner = runtime.StepRunnerFunc(func(context.Context, *runtime.Step) (runtime.StepOutcome, error) { return runtime.Succeed(nil), nil })
	}
	logs := &logRecorder{}
	rt, err := runtime.New(q, fs, runner, runtime.Options{Logger: slog.New(logs), ShutdownTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &faultyWriter{q: q, rt: rt, faults: fs, logs: logs}
}

// TestClientResolvesUncertain stages commands whose last attempt fails
// after they may have taken effect (a WAL PUT that hangs past the apply
// timeout, before or after the command's first commit, or an answer whose
// PUT response is lost) while a client waits: the writer answers
// uncertain, not a rejection; the client asks again under the same
// command id; once the store heals the client gets the true outcome and
// the command took effect exactly once.
func TestClientResolvesUncertain(t *testing.T) {
	walHang := faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Hang: true, Rate: 1}
	cases := []struct {
		name string
		rule faults.Rule
		// uncertain: the writer must have answered uncertain at least once.
		uncertain bool
		// strayAnswer: an answer the client never reads may be left for
		// the sweep (the writer answered again after a lost response).
		strayAnswer bool
		setup       func(t *testing.T, w *faultyWriter)
		do          func(ctx context.Context, c *Client) (any, error)
		want        any
		check       func(t *testing.T, w *faultyWriter)
	}{
		{
			name: "submit, commit of unknown durability", rule: walHang, uncertain: true,
			do: func(ctx context.Context, c *Client) (any, error) {
				out, err := c.Submit(ctx, runtime.RunSpec{RunID: "r1", Input: []byte("in")})
				return out.NewlySubmitted, err
			},
			want: true,
			check: func(t *testing.T, w *faultyWriter) {
				if st, err := w.rt.Status(context.Background(), "r1"); err != nil || st.State.Terminal() && st.State != runstate.StateSucceeded {
					t.Fatalf("run r1 after the resolved submission: %+v, %v", st, err)
				}
			},
		},
		{
			name: "signal to a waiter, commit of unknown durability", rule: walHang, uncertain: true,
			setup: func(t *testing.T, w *faultyWriter) {
				ibxWaiter(t, &ibxWriter{t: t, q: w.q, rt: w.rt}, "j1")
			},
			do: func(ctx context.Context, c *Client) (any, error) {
				return c.Signal(ctx, crashKey, []byte("yes"))
			},
			want: signal.Delivered,
			check: func(t *testing.T, w *faultyWriter) {
				ctx := context.Background()
				j, err := w.q.GetJob(ctx, "j1")
				if err != nil || j.WokenAt.IsZero() || string(j.WakePayload) != "yes" {
					t.Fatalf("waiter after the resolved signal: %+v, %v", j, err)
				}
				if b, _ := kvGet(ctx, w.q, sigBufKey(crashKey)); b != nil {
					t.Fatalf("the signal was delivered and buffered: %q", b)
				}
			},
		},
		{
			name: "cancel, error after its request was recorded", uncertain: true,
			// The first WAL PUT (marker and cancel request) lands; the
			// second (the cancellation) hangs once, past the apply timeout.
			rule: faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Hang: true, Nth: 2},
			setup: func(t *testing.T, w *faultyWriter) {
				if _, err := w.rt.Submit(context.Background(), runtime.RunSpec{RunID: "r1", Input: []byte("wait")}); err != nil {
					t.Fatal(err)
				}
			},
			do: func(ctx context.Context, c *Client) (any, error) {
				return c.Cancel(ctx, "r1")
			},
			want: true,
			check: func(t *testing.T, w *faultyWriter) {
				if st, err := w.rt.Status(context.Background(), "r1"); err != nil || st.State != runstate.StateCancelled {
					t.Fatalf("run r1 after the resolved cancel: %+v, %v", st, err)
				}
			},
		},
		{
			name: "signal buffered, answer's response lost", strayAnswer: true,
			rule: faults.Rule{Ops: faults.OpPut, KeyPrefix: "inbox-answers/", Nth: 1, LoseResponse: true},
			do: func(ctx context.Context, c *Client) (any, error) {
				return c.Signal(ctx, crashKey, []byte("once"))
			},
			want: signal.Buffered,
			check: func(t *testing.T, w *faultyWriter) {
				if b, _ := kvGet(context.Background(), w.q, sigBufKey(crashKey)); !bufferHolds(b, "once") {
					t.Fatalf("buffer %q after the signal", b)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, stop := context.WithCancel(context.Background())
				base := mem.New()
				w := openFaultyWriter(t, base, nil)
				if tc.setup != nil {
					tc.setup(t, w)
				}
				served := make(chan error, 1)
				go func() { served <- ServeInbox(ctx, w.rt, faultyInbox) }()
				t.Cleanup(func() {
					stop()
					w.faults.Clear()
					_ = w.q.Close()
				})
				c, err := NewClient(base, ClientOptions{Logger: ibxLogger(), AnswerTimeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				type result struct {
					v   any
					err error
				}
				done := make(chan result, 1)
				w.faults.Set(tc.rule)
				go func() {
					v, err := tc.do(ctx, c)
					done <- result{v, err}
				}()
				// Let the writer give up and the client ask again, for a
				// few rounds while the fault lasts, then heal the store.
				time.Sleep(3 * time.Second)
				w.faults.Clear()
				res := <-done
				if res.err != nil || res.v != tc.want {
					t.Fatalf("outcome %v, %v; want %v", res.v, res.err, tc.want)
				}
				if n := w.logs.count("answered uncertain"); tc.uncertain && n == 0 {
					t.Fatal("the writer never answered uncertain: the test staged nothing")
				}
				if n := w.logs.count("internal"); n != 0 {
					t.Fatalf("%d log lines mention an internal answer", n)
				}
				synctest.Wait()
				tc.check(t, w)
				if keys := ibxKeys(t, base, "inbox/"); len(keys) != 0 {
					t.Fatalf("commands left: %v", keys)
				}
				if keys := ibxKeys(t, base, "inbox-answers/"); len(keys) > 1 || len(keys) == 1 && !tc.strayAnswer {
					t.Fatalf("answers left: %v", keys)
				}
				if m, _ := w.q.KVScan(context.Background(), kvInbox, "", 0); len(m) != 0 {
					t.Fatalf("markers left: %v", m)
				}
				stop()
				if err := <-served; err != nil {
					t.Fatalf("ServeInbox: %v", err)
				}
				if err := w.q.Close(); err != nil {
					t.Fatal(err)
				}
				// What the client was told survived: a new writer sees it.
				next := ibxOpen(t, base, nil, nil)
				defer next.q.Close()
				tc.check(t, &faultyWriter{q: next.q, rt: next.rt})
			})
		})
	}
}

// TestClientUncertainUnresolved keeps the store failing past the client's
// deadline: the error says the outcome is unknown and the command waits;
// once the store heals a writer applies it exactly once.
func TestClientUncertainUnresolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		base := mem.New()
		w := openFaultyWriter(t, base, nil)
		w.faults.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "queue/wal/", Hang: true, Rate: 1})
		served := make(chan error, 1)
		go func() { served <- ServeInbox(ctx, w.rt, faultyInbox) }()
		t.Cleanup(func() {
			stop()
			w.faults.Clear()
			_ = w.q.Close()
		})
		c, err := NewClient(base, ClientOptions{Logger: ibxLogger(), AnswerTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Signal(ctx, "k", []byte("once"))
		if !errors.Is(err, ErrOutcomeUncertain) || !errors.Is(err, ErrNoAnswer) {
			t.Fatalf("Signal while the store fails: %v; want ErrOutcomeUncertain and ErrNoAnswer", err)
		}
		var remote *CommandError
		if errors.As(err, &remote) {
			t.Fatalf("an uncertain outcome was reported as a rejection: %v", err)
		}
		for _, want := range []string{"may have been applied", "at most once", "stays at inbox/", "no live writer"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		w.faults.Clear()
		// The command waits, answered or not; the writer settles it.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if b, _ := kvGet(ctx, w.q, sigBufKey("k")); !bufferHolds(b, "once") {
			t.Fatalf("buffer %q once the store healed; want the signal, once", b)
		}
		if keys := ibxKeys(t, base, "inbox/"); len(keys) != 0 {
			t.Fatalf("inbox objects left once the store healed: %v", keys)
		}
		stop()
		if err := <-served; err != nil {
			t.Fatalf("ServeInbox: %v", err)
		}
		if err := w.q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// Through the inbox a signal is checked by the writer as Runtime.Signal
// checks it: the refusals come back as CommandErrors matching the
// sentinels, nothing written; a buffered one reports its expiry.
func TestClientSignalChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		store := mem.Named(fmt.Sprintf("client-test-%d", clientTestStores.Add(1)))
		v := &validatingWaiter{}
		w := ibxOpen(t, store, nil, v, runtime.Options{SignalRetention: 48 * time.Hour})
		served := make(chan error, 1)
		go func() { served <- ServeInbox(ctx, w.rt, InboxOptions{Writer: "test-writer"}) }()
		t.Cleanup(func() {
			stop()
			<-served
			_ = w.q.Close()
		})
		c, err := NewClient(store, ClientOptions{Logger: ibxLogger(), Name: "client-test"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()

		var remote *CommandError
		_, err = c.Signal(ctx, "k:c", []byte("bad"))
		if !errors.Is(err, signal.ErrRejected) || !errors.As(err, &remote) || remote.Code != "signal_rejected" || !strings.Contains(err.Error(), "is not a decision") {
			t.Fatalf("bad payload through the inbox: %v; want signal_rejected with the reason", err)
		}
		_, err = c.SendSignal(ctx, "k:c", []byte("x"), signal.Options{RequireWaiting: true})
		if !errors.Is(err, signal.ErrNoWaiter) || !errors.As(err, &remote) || remote.Code != "no_waiter" {
			t.Fatalf("signal to nobody with RequireWaiting: %v; want no_waiter", err)
		}
		if b := w.kv(sigBufKey("k:c")); b != nil {
			t.Fatalf("a refused signal was buffered: %q", b)
		}
		start := time.Now()
		res, err := c.SendSignal(ctx, "k:c", []byte("good"), signal.Options{})
		if err != nil || res.Outcome != signal.Buffered {
			t.Fatalf("good payload = %+v, %v; want buffered", res, err)
		}
		if d := res.Expires.Sub(start); d < 48*time.Hour-time.Second || d > 48*time.Hour+time.Minute {
			t.Fatalf("Expires %v is %v after the send; want the writer's 48h retention", res.Expires, d)
		}
		list, err := c.ListSignals(ctx, signal.ListOptions{})
		if err != nil || len(list) != 1 || list[0].Key != "k:c" || list[0].Size != 4 || !list[0].BufferedAt.Add(48*time.Hour).Equal(res.Expires) {
			t.Fatalf("ListSignals through the client = %+v, %v", list, err)
		}
	})
}
