// Command single_step is the smallest durable run: one step that turns its
// input into the run's result.
//
//	go run ./examples/single_step --input "hello"
//
// The step runner returns Succeed, so the run ends after one step; a terminal
// hook observes the outcome once its commit is durable, and the program
// exits. The default store is in memory (mem://); pass
// --store file://DIR to keep the run's records on disk.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/objstore/storeurl"
	"github.com/tqw-dsl/tqw/runtime/queue"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "single_step:", err)
		os.Exit(1)
	}
}

// run parses args, runs one single-step run and prints its outcome to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("single_step", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://single_step", "store URL (mem://NAME, file://DIR, s3://...)")
	input := fs.String("input", "hello, durable world", "the run's input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The step runs on the worker's goroutine and prints too.
	out = &lockedWriter{w: out}
	store, err := storeurl.Open(ctx, *storeURL)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := queue.Open(ctx, store, queue.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("open the queue on %s: %w", *storeURL, err)
	}
	defer q.Close()

	// The whole workflow: one step that succeeds with its transformed input.
	upper := runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		fmt.Fprintf(out, "step %d of run %s: %q\n", s.Number, s.RunID, s.Payload)
		return runtime.Succeed([]byte(strings.ToUpper(string(s.Payload)))), nil
	})
	done := make(chan *runtime.RunOutcome, 1)
	hook := runtime.TerminalHookFunc(func(_ context.Context, o *runtime.RunOutcome, _ *runtime.TerminalEffects) error {
		select {
		case done <- o:
		default: // a redelivered notification: the first one was taken
		}
		return nil
	})
	rt, err := runtime.New(q, store, upper, runtime.WithTerminalHook(hook), runtime.WithLogger(log))
	if err != nil {
		return err
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))

	sub, err := rt.Submit(ctx, runtime.RunSpec{Input: []byte(*input)})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(out, "submitted run %s\n", sub.RunID)
	select {
	case o := <-done:
		if o.Status != runtime.Succeeded {
			return fmt.Errorf("run %s ended %s: %s", o.RunID, o.Status, o.Error)
		}
		fmt.Fprintf(out, "run %s succeeded: %q\n", o.RunID, o.Result)
		return nil
	case <-ctx.Done():
		return errors.New("interrupted before the run ended")
	}
}

// lockedWriter serializes writes from the worker and the main goroutine.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
