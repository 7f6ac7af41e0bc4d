package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Sentinel errors returned by injected faults.
var (
	// ErrInjected is the default error of a fault that fails a call.
	ErrInjected = errors.New("faults: injected failure")
	// ErrLostResponse reports that the call was performed but its response
	// was dropped, so the caller cannot know whether it took effect.
	ErrLostResponse = errors.New("faults: response lost after the call was performed")
)

// Op is a bit set of Store methods a Rule applies to.
type Op uint8

// The operations a Rule can select. Combine them with |.
const (
	OpGet Op = 1 << iota
	OpPut
	OpDelete
	OpHead
	OpList
)

// String names the operations in the set, e.g. "get|put".
func (o Op) String() string {
	if o == 0 {
		return "all"
	}
	var parts []string
	for i, name := range []string{"get", "put", "delete", "head", "list"} {
		if o&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	return strings.Join(parts, "|")
}

// Rule describes one fault. A call matches a rule when its method is in Ops
// (0 means every method) and its key, or its List prefix, starts with
// KeyPrefix. A matching call is affected with probability Rate, or, when Nth
// is set, exactly the Nth matching call (1-based) is affected, once. A rule
// with Rate 0 and Nth 0 never fires.
//
// When a rule fires its effects apply in this order: Latency; then Hang;
// then TornWrite, LoseResponse or, failing those, the error. A rule whose
// only effect is Latency delays the call and then performs it normally.
type Rule struct {
	Ops       Op     // methods affected; 0 means all
	KeyPrefix string // only keys/prefixes starting with this ("" = all)
	Rate      float64
	Nth       int
	// Err is returned instead of performing the call (default ErrInjected).
	Err error
	// Latency is added before the call; a cancelled ctx cuts it short.
	Latency time.Duration
	// LoseResponse performs the call, then returns ErrLostResponse.
	LoseResponse bool
	// Hang blocks until ctx is done and returns ctx.Err(); nothing is performed.
	Hang bool
	// TornWrite (Put only) stores a strict prefix of the data without any
	// precondition and returns Err (default ErrInjected). A TornWrite rule
	// matches Put calls only.
	TornWrite bool
}

func (r Rule) failsCall() bool {
	return r.Err != nil || !(r.Latency > 0 || r.Hang || r.LoseResponse || r.TornWrite)
}

func (r Rule) err() error {
	if r.Err != nil {
		return r.Err
	}
	return ErrInjected
}

type ruleState struct {
	Rule
	seen  int // matching calls so far (for Nth)
	fired bool
}

// Store is an objstore.Store that injects the faults of its active rules
// into calls to the wrapped store. It is safe for concurrent use.
type Store struct {
	inner objstore.Store
	mu    sync.Mutex
	rng   *rand.Rand
	rules []ruleState
	fired int64         // faults injected so far
	wake  chan struct{} // closed and replaced at every injected fault
}

var _ objstore.Store = (*Store)(nil)

// New wraps inner with no active rules; seed makes the random choices
// reproducible.
func New(inner objstore.Store, seed int64) *Store {
	return &Store{inner: inner, rng: rand.New(rand.NewPCG(uint64(seed), 0x7471772d6661756c)), wake: make(chan struct{})}
}

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() objstore.Store { return s.inner }

// Injected returns how many calls a rule fired on so far.
func (s *Store) Injected() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fired
}

// WaitInjected returns once rules fired on at least n calls in total, or
// with ctx's error. Tests use it to know an outage was felt (a writer
// retried against it) without sleeping.
func (s *Store) WaitInjected(ctx context.Context, n int64) error {
	for {
		s.mu.Lock()
		fired, wake := s.fired, s.wake
		s.mu.Unlock()
		if fired >= n {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("faults: %d of %d injected faults: %w", fired, n, ctx.Err())
		}
	}
}

// Set replaces the active rules; Nth counters start again from zero.
func (s *Store) Set(rules ...Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = make([]ruleState, len(rules))
	for i, r := range rules {
		s.rules[i] = ruleState{Rule: r}
	}
}

// Clear removes every rule; calls pass through unchanged.
func (s *Store) Clear() { s.Set() }

// pick returns the rule that fires for this call, if any, and, for a torn
// write, how many bytes of size to keep.
func (s *Store) pick(op Op, key string, size int) (Rule, int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.rules {
		r := &s.rules[i]
		if r.Ops != 0 && r.Ops&op == 0 || !strings.HasPrefix(key, r.KeyPrefix) {
			continue
		}
		if r.TornWrite && op != OpPut {
			continue
		}
		fire := false
		if r.Nth > 0 {
			r.seen++
			fire = !r.fired && r.seen == r.Nth
			r.fired = r.fired || fire
		} else if r.Rate > 0 {
			fire = r.Rate >= 1 || s.rng.Float64() < r.Rate
		}
		if !fire {
			continue
		}
		keep := 0
		if r.TornWrite && size > 0 {
			keep = s.rng.IntN(size) // strict prefix: 0..size-1 bytes
		}
		s.fired++
		close(s.wake)
		s.wake = make(chan struct{})
		return r.Rule, keep, true
	}
	return Rule{}, 0, false
}

// before applies the rule's effects that come before the call. It returns
// done=true with err when the call must not be performed.
func before(ctx context.Context, op Op, key string, r Rule) (done bool, err error) {
	if r.Latency > 0 {
		t := time.NewTimer(r.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return true, fmt.Errorf("faults: %s %q: %w", op, key, ctx.Err())
		}
	}
	if r.Hang {
		<-ctx.Done()
		return true, fmt.Errorf("faults: %s %q hung: %w", op, key, ctx.Err())
	}
	if r.TornWrite || r.LoseResponse {
		return false, nil
	}
	if r.failsCall() {
		return true, fmt.Errorf("faults: %s %q: %w", op, key, r.err())
	}
	return false, nil
}

func lost(op Op, key string) error {
	return fmt.Errorf("faults: %s %q: %w", op, key, ErrLostResponse)
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	r, _, ok := s.pick(OpGet, key, 0)
	if ok {
		if done, err := before(ctx, OpGet, key, r); done {
			return nil, objstore.ObjectInfo{}, err
		}
	}
	b, info, err := s.inner.Get(ctx, key)
	if ok && r.LoseResponse {
		return nil, objstore.ObjectInfo{}, lost(OpGet, key)
	}
	return b, info, err
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	r, keep, ok := s.pick(OpPut, key, len(data))
	if ok {
		if done, err := before(ctx, OpPut, key, r); done {
			return objstore.ObjectInfo{}, err
		}
		if r.TornWrite {
			if _, err := s.inner.Put(ctx, key, data[:keep:keep], objstore.PutOptions{}); err != nil {
				return objstore.ObjectInfo{}, fmt.Errorf("faults: put %q: torn write: %w", key, err)
			}
			return objstore.ObjectInfo{}, fmt.Errorf("faults: put %q: torn write kept %d of %d bytes: %w", key, keep, len(data), r.err())
		}
	}
	info, err := s.inner.Put(ctx, key, data, opts)
	if ok && r.LoseResponse {
		return objstore.ObjectInfo{}, lost(OpPut, key)
	}
	return info, err
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	r, _, ok := s.pick(OpDelete, key, 0)
	if ok {
		if done, err := before(ctx, OpDelete, key, r); done {
			return err
		}
	}
	err := s.inner.Delete(ctx, key)
	if ok && r.LoseResponse {
		return lost(OpDelete, key)
	}
	return err
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	r, _, ok := s.pick(OpHead, key, 0)
	if ok {
		if done, err := before(ctx, OpHead, key, r); done {
			return objstore.ObjectInfo{}, err
		}
	}
	info, err := s.inner.Head(ctx, key)
	if ok && r.LoseResponse {
		return objstore.ObjectInfo{}, lost(OpHead, key)
	}
	return info, err
}

// List implements objstore.Store. Rules match the List prefix.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	r, _, ok := s.pick(OpList, prefix, 0)
	if ok {
		if done, err := before(ctx, OpList, prefix, r); done {
			return nil, err
		}
	}
	out, err := s.inner.List(ctx, prefix, startAfter, limit)
	if ok && r.LoseResponse {
		return nil, lost(OpList, prefix)
	}
	return out, err
}
