// Command crash_resume shows recovery across processes on the local file
// store. A run has --stages stages (one durable step each) of --units units
// of work; each unit's result is memoized in the step's memo as soon as it
// is computed.
//
//	go run ./examples/crash_resume            # interrupt it (Ctrl-C, or kill -9) during any stage
//	go run ./examples/crash_resume            # resumes the same run
//
// Start it, interrupt it during any stage and start it again: the second
// process resumes the same run (same --run-id), skips the stages already
// committed and serves the completed units of the interrupted stage from the
// memo store, computing only the rest. Once the run succeeded, another
// invocation prints its result; pass a new --run-id to start over.
//
// --effects FILE appends one line per unit of work actually done (and one
// per stage start), which makes repeated work visible; --stop-after S.U
// simulates a crash point: the process stops working after unit U of stage S
// and stays up until it is killed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
)

func main() { exampleenv.Main("crash_resume", run) }

// options are the command's flags.
type options struct {
	store, runID, effects, stopAfter string
	stages, units                    int
	unitDelay                        time.Duration
}

// stages runs one stage per step. The payload is the list of the finished
// stages' totals; the last stage succeeds with the grand total.
type stages struct {
	opts options
	out  io.Writer
	q    *storage.Queue
	// effectsMu serializes appends to the effects file.
	effectsMu sync.Mutex
}

// unitResult is what one unit of work produces (and what its memo holds).
type unitResult struct {
	Value int `msgpack:"value"`
}

func (s *stages) RunStep(ctx context.Context, st *runtime.Step) (runtime.StepOutcome, error) {
	var totals []int
	if err := json.Unmarshal(st.Payload, &totals); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("stage %d payload: %w", st.Number, err))
	}
	// Step n starts as soon as step n-1's commit is visible, which may be
	// before it is durable. Waiting for durability here means a crash
	// during this stage never repeats the previous one.
	if err := s.q.DB().Sync(ctx); err != nil {
		return runtime.StepOutcome{}, err
	}
	fmt.Fprintf(s.out, "stage %d: start (attempt %d)\n", st.Number, st.Attempt)
	if err := s.effect(fmt.Sprintf("start stage=%d", st.Number)); err != nil {
		return runtime.StepOutcome{}, err
	}
	total := 0
	for u := range s.opts.units {
		computed := false
		r, err := memo.Memoized(ctx, st.Memo, fmt.Sprintf("unit-%d", u), func(ctx context.Context) (unitResult, error) {
			computed = true
			return s.work(ctx, st.Number, u)
		})
		if err != nil {
			return runtime.StepOutcome{}, fmt.Errorf("stage %d unit %d: %w", st.Number, u, err)
		}
		how := "served from memo"
		if computed {
			how = "computed"
		}
		fmt.Fprintf(s.out, "stage %d unit %d: %s (%d)\n", st.Number, u, how, r.Value)
		total += r.Value
		if s.opts.stopAfter == fmt.Sprintf("%d.%d", st.Number, u) {
			fmt.Fprintf(s.out, "stopping after stage %d unit %d; kill this process (kill -9 %d) and run it again\n", st.Number, u, os.Getpid())
			<-ctx.Done()
			return runtime.StepOutcome{}, context.Cause(ctx)
		}
	}
	totals = append(totals, total)
	next, err := json.Marshal(totals)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	if st.Number == s.opts.stages-1 {
		return runtime.Succeed(next), nil
	}
	return runtime.ContinueNow(next), nil
}

// work is one unit: it waits --unit-delay (the cost of the work), records
// the side effect and returns a value derived from its position.
func (s *stages) work(ctx context.Context, stage, unit int) (unitResult, error) {
	t := time.NewTimer(s.opts.unitDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return unitResult{}, context.Cause(ctx)
	}
	if err := s.effect(fmt.Sprintf("unit stage=%d unit=%d", stage, unit)); err != nil {
		return unitResult{}, err
	}
	return unitResult{Value: (stage + 1) * (unit + 1)}, nil
}

// effect appends line to the effects file, durably, when one is set.
func (s *stages) effect(line string) error {
	if s.opts.effects == "" {
		return nil
	}
	s.effectsMu.Lock()
	defer s.effectsMu.Unlock()
	f, err := os.OpenFile(s.opts.effects, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("effects file: %w", err)
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		f.Close()
		return fmt.Errorf("effects file %s: %w", s.opts.effects, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("effects file %s: %w", s.opts.effects, err)
	}
	return f.Close()
}

// run parses args and works the run until it ends or ctx is done.
func run(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("crash_resume", flag.ContinueOnError)
	fs.StringVar(&o.store, "store", "file://.tqw-examples/crash_resume", "store URL; a file:// or s3:// store survives the process")
	fs.StringVar(&o.runID, "run-id", "batch-1", "the run to start or resume")
	fs.IntVar(&o.stages, "stages", 3, "stages (durable steps) in the run")
	fs.IntVar(&o.units, "units", 5, "units of work per stage, each memoized")
	fs.DurationVar(&o.unitDelay, "unit-delay", 400*time.Millisecond, "how long one unit of work takes")
	fs.StringVar(&o.effects, "effects", "", "append one line per unit of work done to this file")
	fs.StringVar(&o.stopAfter, "stop-after", "", "STAGE.UNIT: stop working after this unit and wait to be killed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.stages < 1 || o.units < 1 {
		return errors.New("--stages and --units must be at least 1")
	}
	out = exampleenv.SyncWriter(out)
	// A short backoff: a stage interrupted by Ctrl-C is retried soon after
	// the next start.
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: o.store, LogLevel: slog.LevelError,
		Queue: storage.Options{QueueConfigs: map[string]storage.QueueConfig{
			runtime.DefaultQueueName: {BackoffBase: 200 * time.Millisecond, BackoffMax: 5 * time.Second},
		}}})
	if err != nil {
		return err
	}
	defer env.Close()

	runner := &stages{opts: o, out: out, q: env.Queue}
	rt, err := env.NewRuntime(runner, o.runID,
		runtime.Options{MaxAttempts: 50, ResultRetention: 7 * 24 * time.Hour,
			// Ctrl-C interrupts the running stage instead of letting it finish.
			ShutdownTimeout: 50 * time.Millisecond})
	if err != nil {
		return err
	}

	// A finished run releases its id; report it instead of starting over.
	st, err := exampleenv.Status(ctx, rt, o.runID)
	if err != nil {
		return err
	}
	if st.State.Terminal() {
		fmt.Fprintf(out, "run %s already %s: totals %s%s (use --run-id to start another)\n", o.runID, st.State, st.Result, st.Error)
		return nil
	}
	// Submit before the worker starts: started first, it could finish the
	// interrupted run before Submit, which would then start a new one
	// under the released id.
	sub, err := rt.Submit(ctx, runtime.RunSpec{RunID: o.runID, Input: []byte("[]")})
	if err != nil {
		return fmt.Errorf("submit %s: %w", o.runID, err)
	}
	if sub.NewlySubmitted {
		fmt.Fprintf(out, "submitted run %s\n", o.runID)
	} else {
		st, _ = rt.Status(ctx, o.runID)
		fmt.Fprintf(out, "resuming run %s at stage %d\n", o.runID, st.Step)
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))
	ro, err := env.Await(ctx)
	if err != nil {
		fmt.Fprintf(out, "interrupted; run %s resumes at the next invocation\n", o.runID)
		return nil
	}
	fmt.Fprintf(out, "run %s %s: totals %s%s\n", ro.RunID, ro.Status, ro.Result, ro.Error)
	return exampleenv.Succeeded(ro)
}
