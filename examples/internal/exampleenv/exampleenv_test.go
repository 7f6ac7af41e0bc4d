package exampleenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime"
)

func TestRunToItsOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := Open(ctx, Config{StoreURL: fmt.Sprintf("mem://exampleenv-run-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	upper := runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		return runtime.Succeed(bytes.ToUpper(s.Payload)), nil
	})
	rt, err := env.NewRuntime(upper, "r1", runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := Status(ctx, rt, "r1"); err != nil || st.RunID != "" || st.State.Terminal() {
		t.Fatalf("Status of an unknown run = %+v, %v; want the zero status", st, err)
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "r1", Input: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	o, err := env.Await(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.RunID != "r1" || string(o.Result) != "HI" || Succeeded(o) != nil {
		t.Fatalf("outcome %+v, Succeeded %v", o, Succeeded(o))
	}
	if st, err := Status(ctx, rt, "r1"); err != nil || !st.State.Terminal() {
		t.Fatalf("Status of the finished run = %+v, %v", st, err)
	}
}

func TestHookHandsOnlyItsRunOnce(t *testing.T) {
	ctx := context.Background()
	e := &Env{outcomes: make(chan *runstate.Outcome, 1)}
	h := e.hook("b")
	for _, id := range []string{"a", "b", "b"} { // never blocks on the second b
		if err := h.OnTermination(ctx, &runstate.Outcome{RunID: id, Step: len(id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if o := <-e.Outcomes(); o.RunID != "b" {
		t.Fatalf("got the outcome of %s; want b", o.RunID)
	}
	select {
	case o := <-e.Outcomes():
		t.Fatalf("a second outcome %+v", o)
	default:
	}
	all := e.hook("")
	if err := all.OnTermination(ctx, &runstate.Outcome{RunID: "a"}, nil); err != nil {
		t.Fatal(err)
	}
	if o := <-e.Outcomes(); o.RunID != "a" {
		t.Fatalf("hook(\"\") handed %s; want a", o.RunID)
	}
}

func TestAwaitReturnsTheCause(t *testing.T) {
	e := &Env{outcomes: make(chan *runstate.Outcome, 1)}
	stop := errors.New("stopped by the test")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	if o, err := e.Await(ctx); o != nil || !errors.Is(err, stop) {
		t.Fatalf("Await = %v, %v; want the cause", o, err)
	}
}

func TestSucceeded(t *testing.T) {
	if err := Succeeded(&runstate.Outcome{RunID: "r", Status: runstate.Succeeded}); err != nil {
		t.Fatal(err)
	}
	err := Succeeded(&runstate.Outcome{RunID: "r", Status: runstate.Failed, Error: "no stock"})
	if err == nil || err.Error() != "run r ended failed: no stock" {
		t.Fatalf("Succeeded = %v", err)
	}
}

func TestOpenReportsABadStore(t *testing.T) {
	if _, err := Open(context.Background(), Config{StoreURL: "nosuch://x"}); err == nil {
		t.Fatal("Open accepted an unknown store scheme")
	}
}

func TestSyncWriterKeepsLinesWhole(t *testing.T) {
	var buf bytes.Buffer
	w := SyncWriter(&buf)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				w.Write([]byte("0123456789\n"))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines; want 800", len(lines))
	}
	for _, l := range lines {
		if l != "0123456789" {
			t.Fatalf("torn line %q", l)
		}
	}
}
