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
	"strings"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
)

func main() { exampleenv.Main("single_step", run) }

// run parses args, runs one single-step run and prints its outcome to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("single_step", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://single_step", "store URL (mem://NAME, file://DIR, s3://...)")
	input := fs.String("input", "hello, durable world", "the run's input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The step runs on the worker's goroutine and prints too.
	out = exampleenv.SyncWriter(out)
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelWarn})
	if err != nil {
		return err
	}
	defer env.Close()

	// The whole workflow: one step that succeeds with its transformed input.
	upper := runtime.StepRunnerFunc(func(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
		fmt.Fprintf(out, "step %d of run %s: %q\n", s.Number, s.RunID, s.Payload)
		return runtime.Succeed([]byte(strings.ToUpper(string(s.Payload)))), nil
	})
	// A terminal hook hands the run's outcome to env.Await.
	rt, err := env.NewRuntime(upper, "", runtime.Options{})
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
	o, err := env.Await(ctx)
	if err != nil {
		return errors.New("interrupted before the run ended")
	}
	if err := exampleenv.Succeeded(o); err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s succeeded: %q\n", o.RunID, o.Result)
	return nil
}
