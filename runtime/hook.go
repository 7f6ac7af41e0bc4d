package runtime

import (
	"context"
	"fmt"
	"sync"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// TerminalHook observes run terminations. Each termination it observes is
// delivered as a notification job enqueued in the commit that terminates the
// run, so the hook sees only committed outcomes, at least once: OnTermination
// must be idempotent. A transient error retries the notification with the
// queue's backoff; a Permanent one dead-letters it.
type TerminalHook interface {
	// Observes is consulted when a run terminates; false skips the
	// notification job, so the termination costs nothing extra.
	Observes(outcome *runstate.Outcome) bool
	// OnTermination handles a termination. Effects staged on eff are
	// applied in the transaction that acknowledges the notification.
	OnTermination(ctx context.Context, outcome *runstate.Outcome, eff *TerminalEffects) error
}

// RunEndObserver is implemented by a StepRunner or TerminalHook that wants
// to learn, in this process, of each run end the runtime commits here,
// once the terminating commit is durable: the cheap way for the process
// that works a run to wait for it (no notification job, no request). It is
// best effort, unlike a TerminalHook: an end committed by another process,
// or in a commit that is not durable before the process dies, is not
// reported, nor is a run whose cancellation applies the effects stored
// with the Cancel call (a TerminalHook observing it is notified). RunEnded
// runs on the settling goroutine and must not block.
type RunEndObserver interface {
	RunEnded(outcome *runstate.Outcome)
}

// noopTerminalHook observes nothing: runs terminate without a notification.
type noopTerminalHook struct{}

// Observes returns false.
func (noopTerminalHook) Observes(*runstate.Outcome) bool { return false }

// OnTermination does nothing.
func (noopTerminalHook) OnTermination(context.Context, *runstate.Outcome, *TerminalEffects) error {
	return nil
}

// TerminalHookFunc is a TerminalHook that observes every run and calls f.
type TerminalHookFunc func(ctx context.Context, outcome *runstate.Outcome, eff *TerminalEffects) error

// Observes returns true.
func (TerminalHookFunc) Observes(*runstate.Outcome) bool { return true }

// OnTermination calls f.
func (f TerminalHookFunc) OnTermination(ctx context.Context, o *runstate.Outcome, eff *TerminalEffects) error {
	return f(ctx, o, eff)
}

// TerminalEffects stages caller-KV writes, deletes and follow-up enqueues
// that commit with a notification's acknowledgement. Safe for concurrent use.
type TerminalEffects struct {
	kv      *Effects
	mu      sync.Mutex
	enqueue []queue.NewJob
}

func newTerminalEffects() *TerminalEffects { return &TerminalEffects{kv: newEffects()} }

// Staged returns what is staged, as the settlement effects the runtime
// applies with the notification's acknowledgement.
func (t *TerminalEffects) Staged() queue.SettlementEffects { return *t.settlement() }

// Put stages a caller-KV write (same rules as Effects.Put).
func (t *TerminalEffects) Put(key string, value []byte) error { return t.kv.Put(key, value) }

// Delete stages a caller-KV delete (same rules as Effects.Delete).
func (t *TerminalEffects) Delete(key string) error { return t.kv.Delete(key) }

// Enqueue stages a job on queueName. Headers under "workflow." are rejected.
func (t *TerminalEffects) Enqueue(queueName string, payload []byte, opts queue.EnqueueOptions) error {
	if queueName == "" {
		return fmt.Errorf("%w: terminal effect enqueue without a queue name", ErrInvalidKey)
	}
	if err := validateUserHeaders(opts.Headers); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.enqueue = append(t.enqueue, queue.NewJob{Queue: queueName, Payload: append([]byte{}, payload...), Options: opts})
	return nil
}

func (t *TerminalEffects) settlement() *queue.SettlementEffects {
	puts, dels := t.kv.snapshot()
	eff := &queue.SettlementEffects{KVDeletes: dels}
	for _, p := range puts {
		eff.KVPuts = append(eff.KVPuts, queue.KVWrite{Key: p.Key, Value: p.Value})
	}
	t.mu.Lock()
	eff.Enqueue = append(eff.Enqueue, t.enqueue...)
	t.mu.Unlock()
	return eff
}
