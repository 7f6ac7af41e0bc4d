package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// A two-step run that waits for an approval signal, on an in-memory store.
func Example() {
	ctx := context.Background()
	store := mem.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	runner := runtime.StepRunnerFunc(func(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		switch s.Number {
		case 0:
			// Pause the run until "approval:<run>" is signalled, or a day passed.
			return runtime.ContinueOnSignal(s.Payload, "approval:"+s.RunID, 24*time.Hour), nil
		default:
			if s.Signal == nil {
				return runtime.Fail("no approval within a day"), nil
			}
			return runtime.Succeed(append(s.Payload, s.Signal...)), nil
		}
	})
	done := make(chan *runstate.Outcome, 1)
	hook := runtime.TerminalHookFunc(func(_ context.Context, o *runstate.Outcome, _ *runtime.TerminalEffects) error {
		done <- o
		return nil
	})
	rt, err := runtime.New(q, store, runner, runtime.Options{TerminalHook: hook, Logger: quiet})
	if err != nil {
		panic(err)
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(ctx)

	// A signal sent before the run waits is buffered and consumed when the
	// run registers its wait.
	res, _ := rt.Signal(ctx, "approval:order-7", []byte(" approved"))
	fmt.Println("signal:", res)
	if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: "order-7", Input: []byte("order 7")}); err != nil {
		panic(err)
	}
	o := <-done
	fmt.Printf("%s %s: %s\n", o.RunID, o.Status, o.Result)
	// Output:
	// signal: buffered
	// order-7 succeeded: order 7 approved
}
