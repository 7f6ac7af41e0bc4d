package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// StepRunner executes one step of a run. It must be idempotent for the same
// (run id, step number): delivery is at-least-once.
//
// ctx is cancelled when the run is cancelled (cause ErrRunCancelled) or the
// worker shuts down (cause ErrShutdown); watching it only shortens the wait,
// the runtime discards a cancelled step's outcome either way.
//
// Return an outcome (ContinueNow, Succeed, Fail, ...) or an error: one built
// with Permanent dead-letters the step at once, any other error is transient
// and retried with backoff.
type StepRunner interface {
	RunStep(ctx context.Context, step *Step) (StepOutcome, error)
}

// StepRunnerFunc adapts a function to StepRunner.
type StepRunnerFunc func(ctx context.Context, step *Step) (StepOutcome, error)

// RunStep calls f.
func (f StepRunnerFunc) RunStep(ctx context.Context, step *Step) (StepOutcome, error) {
	return f(ctx, step)
}

// Step is one delivery of one step of a run.
type Step struct {
	// RunID names the run.
	RunID string
	// Number is the zero-based step number.
	Number int
	// Payload is the run's input (step 0) or the previous Continue payload.
	Payload []byte
	// Headers are the submitter's headers, without the runtime's own.
	Headers map[string]string
	// JobID is the queue job carrying this step.
	JobID string
	// Attempt counts deliveries of this step, starting at 1.
	Attempt int
	// Memo is this step's durable memo; RunMemo is shared by the run's steps.
	Memo, RunMemo *memo.Memo
	// Effects stages caller-KV writes applied with the step's settlement.
	Effects *Effects
	// KV reads committed caller-KV state (not this step's staged effects).
	KV KVReader
	// Signal is the payload of the signal that woke this step, or nil when
	// the step was not waiting or its wait timed out. A delivered empty
	// payload is a non-nil empty slice.
	Signal []byte
	// Lease extends this delivery's lease for long steps.
	Lease *Lease
	// Submitted is when the run was submitted (its durable run record's
	// time), the same in every delivery of every step.
	Submitted time.Time
	// Cancelled says the run, submitted with RunSpec.CancelHandlers, was
	// cancelled: the step it was at was discarded, and the runner is to
	// run its handlers and end the run. Every later delivery of the run
	// says so too.
	Cancelled bool

	durableMu sync.Mutex
	onDurable []func()
	totals    map[string]float64 // AddTotal
}

// OnDurable registers fn to run once the settlement that commits the
// outcome this delivery returns (with its effects) is durable: the place
// to report the step complete (print it, notify someone). It never runs
// when that outcome is not committed: the runner returned an error, a
// Cancel overrode the outcome, the settlement failed or the process died
// first (a redelivery registers its own). fn runs on the worker's
// goroutine after the commit and must not block.
func (s *Step) OnDurable(fn func()) {
	s.durableMu.Lock()
	defer s.durableMu.Unlock()
	s.onDurable = append(s.onDurable, fn)
}

// runDurable runs the callbacks OnDurable registered.
func (s *Step) runDurable() {
	s.durableMu.Lock()
	fns := s.onDurable
	s.onDurable = nil
	s.durableMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// KVReader reads committed caller-KV state.
type KVReader interface {
	// Get returns the value at key, or found == false.
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
}

type queueKV struct{ q *queue.Queue }

func (k queueKV) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := k.q.KVGet(ctx, key)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}

// Lease extends the lease of a step's delivery, so the queue's reaper does
// not hand the step to a second worker while it runs.
type Lease struct {
	q *queue.Queue
	c *queue.Claim
}

// EnsureAtLeast makes the lease last at least d from now; a longer lease
// is left as it is. Call it at progress points, or once with a slow call's
// timeout before issuing the call.
func (l *Lease) EnsureAtLeast(ctx context.Context, d time.Duration) error {
	if err := l.q.EnsureLeaseAtLeast(ctx, l.c, d); err != nil {
		return fmt.Errorf("runtime: extend lease of job %s: %w", l.c.Job.ID, err)
	}
	return nil
}

// Effects stages caller-KV writes and deletes during a step. Everything
// staged is applied in the settlement that commits the outcome the runner
// returned (Continue, Succeed, Fail or CancelRun), and nothing when the
// runner returns an error or an external Cancel overrides the outcome.
// Delivery is at-least-once: stage absolute values. Safe for concurrent use.
type Effects struct {
	mu      sync.Mutex
	puts    map[string][]byte
	deletes map[string]struct{}
}

func newEffects() *Effects {
	return &Effects{puts: map[string][]byte{}, deletes: map[string]struct{}{}}
}

// Staged returns what is staged: writes and deletes, each in key order.
func (e *Effects) Staged() (puts []queue.KVWrite, deletes []string) {
	ps, dels := e.snapshot()
	for _, p := range ps {
		puts = append(puts, queue.KVWrite{Key: p.Key, Value: p.Value})
	}
	return puts, dels
}

// Put stages a write of value at key. A later Put of the same key replaces
// it. It fails with ErrReserved under "workflow/", ErrValueTooLarge over
// queue.MaxKVValueSize, and with an error when key is staged for delete.
func (e *Effects) Put(key string, value []byte) error {
	if err := validateAppKey(key); err != nil {
		return err
	}
	if len(value) > queue.MaxKVValueSize {
		return fmt.Errorf("%w: effect for key %q is %d bytes, the limit is %d", ErrValueTooLarge, key, len(value), queue.MaxKVValueSize)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.deletes[key]; ok {
		return fmt.Errorf("%w: key %q", errEffectConflict, key)
	}
	e.puts[key] = append([]byte{}, value...)
	return nil
}

// Delete stages a delete of key. It fails with ErrReserved under
// "workflow/", and with an error when key is staged for a put.
func (e *Effects) Delete(key string) error {
	if err := validateAppKey(key); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.puts[key]; ok {
		return fmt.Errorf("%w: key %q", errEffectConflict, key)
	}
	e.deletes[key] = struct{}{}
	return nil
}

// snapshot returns the staged operations in key order.
func (e *Effects) snapshot() ([]kvPut, []string) {
	if e == nil {
		return nil, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var puts []kvPut
	for k, v := range e.puts {
		puts = append(puts, kvPut{Key: k, Value: v})
	}
	sort.Slice(puts, func(i, j int) bool { return puts[i].Key < puts[j].Key })
	var dels []string
	for k := range e.deletes {
		dels = append(dels, k)
	}
	sort.Strings(dels)
	return puts, dels
}

// validateAppKey checks an application KV key.
func validateAppKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty KV key", ErrInvalidKey)
	}
	if strings.HasPrefix(key, ReservedKVPrefix) {
		return fmt.Errorf("%w: KV key %q is under %q, which the runtime owns; pick another prefix", ErrReserved, key, ReservedKVPrefix)
	}
	return nil
}

// validateUserHeaders rejects headers under the reserved prefix.
func validateUserHeaders(h map[string]string) error {
	for k := range h {
		if strings.HasPrefix(k, reservedHeaderPrefix) {
			return fmt.Errorf("%w: header %q starts with %q, which the runtime owns; rename it", ErrReserved, k, reservedHeaderPrefix)
		}
	}
	return nil
}

// userHeaders returns a copy of h without reserved headers.
func userHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !strings.HasPrefix(k, reservedHeaderPrefix) {
			out[k] = v
		}
	}
	return out
}
