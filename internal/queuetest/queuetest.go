package queuetest

import (
	"context"
	"io"
	"log/slog"
	stdruntime "runtime"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// T0 is when the clock.Mock of every Env starts.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Deadline bounds an Env's context, and so every wait of its test: one
// generous deadline instead of a timeout per wait.
const Deadline = 60 * time.Second

// Quiet returns a logger that discards everything.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Options returns the queue options of an Env driven by clock: a quiet
// logger, no retention sweeper, leases of 1000 h (so the tests' clock
// jumps never expire one) and a backoff of one second, which Until's
// one-second advances pass.
func Options(clock clock.Clock) queue.Options {
	return queue.Options{Clock: clock, Logger: Quiet(), SweepInterval: -1,
		DefaultConfig: queue.QueueConfig{LeaseDuration: 1000 * time.Hour, BackoffBase: time.Second, BackoffMax: time.Second}}
}

// Env is a queue on a store, driven by a clock.Mock, for one test. Its
// fields are the test's to read, and to change between CloseQueue and
// OpenQueue.
type Env struct {
	T testing.TB
	// Ctx ends Deadline after New, or when the test ends.
	Ctx   context.Context
	Store objstore.Store
	Clock *clock.Mock
	// Options are what OpenQueue opens Q with.
	Options queue.Options
	// Q is the open queue, nil after CloseQueue.
	Q *queue.Queue
}

// New returns an Env on a fresh mem store with a clock.Mock at T0 and
// Options(Clock), each adjust applied in order, and opens its queue. The
// queue is closed when the test ends. An adjust that replaces Clock must
// set Options.Clock too.
func New(t testing.TB, adjust ...func(*Env)) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Deadline)
	t.Cleanup(cancel)
	clock := clock.NewMock(T0)
	e := &Env{T: t, Ctx: ctx, Store: mem.New(), Clock: clock, Options: Options(clock)}
	for _, a := range adjust {
		a(e)
	}
	e.OpenQueue()
	t.Cleanup(e.CloseQueue)
	return e
}

// OpenQueue opens Q on Store with Options, failing the test on an error.
func (e *Env) OpenQueue() {
	e.T.Helper()
	q, err := queue.Open(e.Ctx, e.Store, e.Options)
	if err != nil {
		e.T.Fatalf("queue.Open: %v", err)
	}
	e.Q = q
}

// CloseQueue closes Q, if open. Its error is not the test's concern: a
// test that abandoned the queue (fenced by a newer one) still closes it.
func (e *Env) CloseQueue() {
	if e.Q != nil {
		_ = e.Q.Close()
		e.Q = nil
	}
}

// Until yields until done returns true. Meanwhile, for each of
// retryQueues that has a scheduled job (a retry waiting out its backoff),
// it advances the clock by a second. At the deadline it fails the test
// with what(): what the test waited for and the state it last saw. Q must
// be open when retryQueues are given.
func (e *Env) Until(done func() bool, what func() string, retryQueues ...string) {
	e.T.Helper()
	for !done() {
		for _, name := range retryQueues {
			if st, err := e.Q.Stats(e.Ctx, name); err == nil && st.Scheduled > 0 {
				e.Clock.Advance(time.Second)
			}
		}
		if e.Ctx.Err() != nil {
			e.T.Fatalf("timed out after %v: %s", Deadline, what())
		}
		stdruntime.Gosched()
	}
}
