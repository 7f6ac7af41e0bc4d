// Command kv_effects shows application key-value writes that commit
// atomically with the run's own state.
//
//	go run ./examples/kv_effects
//
// RunSpec.KVWrites are committed in the same transaction as the run's first
// step: the order record exists exactly when the run does. Inside a step,
// Step.Effects stages puts and deletes that are applied in the settlement
// that commits the step's outcome, and not at all when the step returns an
// error: the first attempt of the "ship" step stages a write and then fails,
// and the retry finds no trace of it. Step.KV reads committed state; after the
// run the program reads everything back with the queue's KVGet and KVScan.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
)

func main() { exampleenv.Main("kv_effects", run) }

// fulfil packs an order (step 0) and ships it (step 1), keeping the order's
// state in the caller KV under "orders/<id>/" and the stock in "stock/".
type fulfil struct{ out io.Writer }

func (f fulfil) RunStep(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	order := "orders/" + string(s.Payload) + "/"
	status, ok, err := s.KV.Get(ctx, order+"status")
	if err != nil {
		return runtime.StepOutcome{}, err
	}
	if !ok {
		return runtime.Fail("no order record " + order + "status"), nil
	}
	switch s.Number {
	case 0:
		stock, _, err := s.KV.Get(ctx, "stock/chair")
		if err != nil {
			return runtime.StepOutcome{}, err
		}
		n, err := strconv.Atoi(string(stock))
		if err != nil {
			return runtime.Fail(fmt.Sprintf("stock/chair = %q: %v", stock, err)), nil
		}
		fmt.Fprintf(f.out, "step 0 (attempt %d): status %q, %d chairs in stock; packing\n", s.Attempt, status, n)
		// Absolute values, not increments: a redelivered step stages the
		// same writes again.
		if err := errors.Join(
			s.Effects.Put(order+"status", []byte("packed")),
			s.Effects.Put("stock/chair", []byte(strconv.Itoa(n-1))),
			s.Effects.Delete(order+"hold"),
		); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		return runtime.ContinueNow(s.Payload), nil
	default:
		by, seen, err := s.KV.Get(ctx, order+"shipped_by")
		if err != nil {
			return runtime.StepOutcome{}, err
		}
		fmt.Fprintf(f.out, "step 1 (attempt %d): status %q, shipped_by present: %t\n", s.Attempt, status, seen)
		if seen {
			return runtime.Fail("shipped_by leaked from a failed attempt: " + string(by)), nil
		}
		if err := s.Effects.Put(order+"shipped_by", []byte(fmt.Sprintf("attempt-%d", s.Attempt))); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		if s.Attempt == 1 {
			// The staged write above is discarded with this error.
			fmt.Fprintln(f.out, "step 1 (attempt 1): carrier unavailable; failing after staging a write")
			return runtime.StepOutcome{}, runtime.Transient(errors.New("carrier unavailable"))
		}
		if err := s.Effects.Put(order+"status", []byte("shipped")); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		return runtime.Succeed([]byte("shipped")), nil
	}
}

// run parses args, runs one order and prints the KV state it left.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kv_effects", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://kv_effects", "store URL (mem://NAME, file://DIR, s3://...)")
	orderID := fs.String("order", "42", "order id")
	if err := fs.Parse(args); err != nil {
		return err
	}
	out = exampleenv.SyncWriter(out)
	// A short backoff, so the retry of the failed attempt comes quickly.
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelError,
		Queue: storage.Options{QueueConfigs: map[string]storage.QueueConfig{
			runtime.DefaultQueueName: {BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second},
		}}})
	if err != nil {
		return err
	}
	defer env.Close()
	q := env.Queue
	rt, err := env.NewRuntime(fulfil{out: out}, "", runtime.Options{})
	if err != nil {
		return err
	}
	// Stock is ordinary application state, written before any run.
	if err := q.KVPut(ctx, "stock/chair", []byte("8")); err != nil {
		return err
	}
	order := "orders/" + *orderID + "/"
	sub, err := rt.Submit(ctx, runtime.RunSpec{
		RunID: "order-" + *orderID,
		Input: []byte(*orderID),
		// Committed with step 0's enqueue: the record and the run exist
		// together or not at all.
		KVWrites: map[string][]byte{order + "status": []byte("received"), order + "hold": []byte("fraud check")},
	})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(out, "submitted run %s with its order record\n", sub.RunID)
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))

	o, err := env.Await(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s %s: %s%s\n", o.RunID, o.Status, o.Result, o.Error)
	if err := exampleenv.Succeeded(o); err != nil {
		return err
	}

	status, err := q.KVGet(ctx, order+"status")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "KVGet %sstatus = %q\n", order, status)
	if _, err := q.KVGet(ctx, order+"hold"); errors.Is(err, storage.ErrNotFound) {
		fmt.Fprintf(out, "KVGet %shold: deleted by step 0\n", order)
	} else if err != nil {
		return err
	}
	for _, prefix := range []string{order, "stock/"} {
		entries, err := q.KVScan(ctx, prefix, "", 100)
		if err != nil {
			return err
		}
		for _, e := range entries {
			fmt.Fprintf(out, "KVScan %s: %s = %q\n", prefix, e.Key, e.Value)
		}
	}
	return nil
}
