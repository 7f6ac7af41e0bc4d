package queuetest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// A scheduled job of a retry queue makes Until advance the clock until
// the job is due.
func TestUntilAdvancesPastScheduledJobs(t *testing.T) {
	e := New(t)
	if _, err := e.Q.Enqueue(e.Ctx, "q", nil, queue.EnqueueOptions{ID: "j", RunAt: T0.Add(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	var st queue.Stats
	e.Until(func() bool {
		st, _ = e.Q.Stats(e.Ctx, "q")
		return st.Pending == 1
	}, func() string { return fmt.Sprintf("job never due: %+v", st) }, "q")
	if now := e.Clock.Now(); now.Before(T0.Add(3 * time.Second)) {
		t.Fatalf("clock at %v, want at least 3 s past T0", now)
	}
}

// fatalRecorder records Fatalf and ends the goroutine, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestUntilFailsAtTheDeadlineSayingWhat(t *testing.T) {
	e := New(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	rec := &fatalRecorder{TB: t}
	e.Ctx, e.T = ended, rec
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Until(func() bool { return false }, func() string { return "the awaited thing" })
	}()
	<-done
	if !strings.Contains(rec.msg, "timed out") || !strings.Contains(rec.msg, "the awaited thing") {
		t.Fatalf("Until failed with %q; want the timeout and what it waited for", rec.msg)
	}
}

func TestAdjustAndReopen(t *testing.T) {
	e := New(t, func(e *Env) { e.Options.DefaultConfig.MaxAttempts = 7 })
	if _, err := e.Q.Enqueue(e.Ctx, "q", []byte("x"), queue.EnqueueOptions{ID: "j"}); err != nil {
		t.Fatal(err)
	}
	e.CloseQueue()
	if e.Q != nil {
		t.Fatal("Q after CloseQueue")
	}
	e.OpenQueue()
	j, err := e.Q.GetJob(e.Ctx, "j")
	if err != nil || j.MaxAttempts != 7 {
		t.Fatalf("job after reopen on the same store: %+v %v; want it, with the adjusted 7 attempts", j, err)
	}
}
