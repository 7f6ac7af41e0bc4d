// Command remote_reply runs remote work that replies through the store,
// with no inbound endpoint.
//
//	go run ./examples/remote_reply
//
// Step 0 sends a request to a worker elsewhere and waits for the reply with
// ContinueOnSignal. The worker writes its reply as an object at a key the
// step chose; a watcher in this process turns the object's arrival into the
// signal that wakes the run. The remote side needs only a way to PUT one
// object (a presigned URL in production), and this process needs no
// reachable port.
//
//   - The reply key is replies/<run id>/<step>, so a step delivered twice
//     issues two requests whose replies overwrite each other.
//   - Step 0 stages a pending marker, remote/pending/<correlation key> with
//     the reply key as its value, through Step.Effects. The marker commits
//     in the settlement that registers the wait, so the watcher never sees a
//     marker without a waiter, and a step that fails to settle leaves none.
//   - The watcher scans the markers and HEADs each reply key: one HEAD per
//     waiting run per poll and no LIST. On a hit it signals the run with the
//     reply key and deletes the marker.
//   - Step 1 reads the reply object named by Step.Signal, or fails when the
//     timeout came first; either way it deletes the marker in its settlement.
//
// No lease is held during the wait: the waiting run is a scheduled job in
// the store, so the remote work can outlast this process. A reply that
// arrives after the timeout has no waiter; its object stays in the bucket.
// The remote machine is simulated by a goroutine that receives the request
// over a channel, works for --remote-work and PUTs the reply into the same
// store the queue uses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

func main() { exampleenv.Main("remote_reply", run) }

// pendingPrefix starts the caller-KV keys of pending markers.
const pendingPrefix = "remote/pending/"

// correlationKey is the signal key of the wait step n of runID registers.
func correlationKey(runID string, n int) string { return fmt.Sprintf("remote:%s:%d", runID, n) }

// replyKey is the object key of the reply to step n of runID.
func replyKey(runID string, n int) string { return fmt.Sprintf("replies/%s/%d", runID, n) }

// request is what the remote worker gets: the work and where to reply.
type request struct {
	text, replyKey string
}

// dispatcher is the step runner: step 0 dispatches, step 1 reads the reply.
type dispatcher struct {
	out     io.Writer
	remote  chan<- request
	store   objstore.Store
	timeout time.Duration
}

func (d dispatcher) RunStep(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	if s.Number == 0 {
		return d.dispatch(ctx, s)
	}
	return d.collect(ctx, s)
}

func (d dispatcher) dispatch(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	key := correlationKey(s.RunID, s.Number)
	reply := replyKey(s.RunID, s.Number)
	fmt.Fprintf(d.out, "[step %d] sending %q; reply expected at %s\n", s.Number, s.Payload, reply)
	// The marker commits with this step's settlement, in the same
	// transaction that registers the wait.
	if err := s.Effects.Put(pendingPrefix+key, []byte(reply)); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	select {
	case d.remote <- request{text: string(s.Payload), replyKey: reply}:
	case <-ctx.Done():
		return runtime.StepOutcome{}, context.Cause(ctx)
	}
	return runtime.ContinueOnSignal(s.Payload, key, d.timeout), nil
}

func (d dispatcher) collect(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	// Whatever happened, the wait is over: drop its marker with this step.
	if err := s.Effects.Delete(pendingPrefix + correlationKey(s.RunID, s.Number-1)); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	if s.Signal == nil {
		reason := fmt.Sprintf("no reply within %s", d.timeout)
		fmt.Fprintf(d.out, "[step %d] %s\n", s.Number, reason)
		return runtime.Fail(reason), nil
	}
	data, _, err := d.store.Get(ctx, string(s.Signal))
	if err != nil {
		return runtime.StepOutcome{}, fmt.Errorf("read the reply at %s: %w", s.Signal, err)
	}
	fmt.Fprintf(d.out, "[step %d] reply at %s: %q\n", s.Number, s.Signal, data)
	return runtime.Succeed(data), nil
}

// remoteWorker is the machine on the other side: it receives a request,
// works, and PUTs the reply at the key it was given.
func remoteWorker(ctx context.Context, out io.Writer, requests <-chan request, store objstore.Store, work time.Duration) {
	for {
		var r request
		select {
		case r = <-requests:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(work)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		if _, err := store.Put(ctx, r.replyKey, []byte(strings.ToUpper(r.text)), objstore.PutOptions{}); err != nil {
			fmt.Fprintf(out, "[remote] failed to write %s: %v\n", r.replyKey, err)
			continue
		}
		fmt.Fprintf(out, "[remote] wrote the reply to %s\n", r.replyKey)
	}
}

// watcher turns reply objects into signals.
type watcher struct {
	out   io.Writer
	q     *storage.Queue
	rt    *runtime.Runtime
	store objstore.Store
}

// pass reads the pending markers and signals every run whose reply arrived.
// Cost: one HEAD per marker; the scan reads memory.
func (w watcher) pass(ctx context.Context) error {
	after := ""
	for {
		markers, err := w.q.KVScan(ctx, pendingPrefix, after, 64)
		if err != nil {
			return err
		}
		for _, m := range markers {
			reply := string(m.Value)
			if _, err := w.store.Head(ctx, reply); errors.Is(err, objstore.ErrNotExist) {
				continue
			} else if err != nil {
				return fmt.Errorf("head %s: %w", reply, err)
			}
			key := strings.TrimPrefix(m.Key, pendingPrefix)
			res, err := w.rt.Signal(ctx, key, m.Value)
			if err != nil {
				return fmt.Errorf("signal %s: %w", key, err)
			}
			if res == signal.Delivered {
				fmt.Fprintf(w.out, "[watcher] %s arrived; woke %s\n", reply, key)
			} else {
				// The wait ended (timeout) between the scan and the signal.
				fmt.Fprintf(w.out, "[watcher] %s arrived after the wait ended; discarding the signal\n", reply)
				if _, err := w.rt.ClearSignal(ctx, key); err != nil {
					return err
				}
			}
			if _, err := w.q.KVCompareAndDelete(ctx, m.Key, m.Value); err != nil {
				return err
			}
		}
		if len(markers) < 64 {
			return nil
		}
		after = markers[len(markers)-1].Key
	}
}

// loop runs pass every interval until ctx is done.
func (w watcher) loop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if err := w.pass(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(w.out, "[watcher] pass failed: %v\n", err)
		}
	}
}

// run parses args, submits one run and works it to its end.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("remote_reply", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://remote_reply", "store URL (mem://NAME, file://DIR, s3://...)")
	runID := fs.String("run-id", "translate-invoice-118", "run id")
	text := fs.String("text", "invoice 118: three chairs, one table", "the request")
	timeout := fs.Duration("timeout", 30*time.Second, "how long the run waits for the reply")
	work := fs.Duration("remote-work", 2*time.Second, "how long the remote worker takes")
	interval := fs.Duration("watch-interval", 500*time.Millisecond, "how often the watcher looks for replies")
	if err := fs.Parse(args); err != nil {
		return err
	}
	out = exampleenv.SyncWriter(out)
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelError})
	if err != nil {
		return err
	}
	defer env.Close()
	store := env.Store

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	requests := make(chan request, 8)
	rt, err := env.NewRuntime(dispatcher{out: out, remote: requests, store: store, timeout: *timeout}, "", runtime.Options{})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { remoteWorker(ctx, out, requests, store, *work) })
	wg.Go(func() { watcher{out: out, q: env.Queue, rt: rt, store: store}.loop(ctx, *interval) })
	defer wg.Wait()
	defer cancel()

	sub, err := rt.Submit(ctx, runtime.RunSpec{RunID: *runID, Input: []byte(*text)})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(out, "submitted run %s\n", sub.RunID)
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))
	o, err := env.Await(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s %s: %q%s\n", o.RunID, o.Status, o.Result, o.Error)
	return exampleenv.Succeeded(o)
}
