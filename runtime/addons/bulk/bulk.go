package bulk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/addons/addon"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Defaults of the options.
const (
	// DefaultQueueName is the runtime queue of item runs.
	DefaultQueueName = "bulk"
	// DefaultKVPrefix starts the caller-KV keys of batch and item records.
	DefaultKVPrefix = "bulk/"
	// DefaultMaxAttempts is how many times an item is tried on transient errors.
	DefaultMaxAttempts = 3
	// MaxItemSize bounds one input item; it is kept in the item's record.
	MaxItemSize = 256 << 10
	// maxInlineOutput bounds an output kept in the item record; a larger
	// one is read from the last phase's memo.
	maxInlineOutput = 64 << 10
)

// Headers the runner sets on item runs.
const (
	HeaderBatch = "bulk.batch"
	HeaderIndex = "bulk.index"
	HeaderGen   = "bulk.gen"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrInvalidBatch reports a batch id, pipeline or threshold that
	// cannot be used.
	ErrInvalidBatch = errors.New("bulk: invalid batch")
	// ErrBatchMismatch reports a Submit of an existing batch id with a
	// different number of items.
	ErrBatchMismatch = errors.New("bulk: batch id already used with other items")
	// ErrInputMismatch is runtime.ErrInputMismatch: an item index
	// resubmitted with a different input.
	ErrInputMismatch = runtime.ErrInputMismatch
	// ErrBatchNotFound reports an unknown batch id.
	ErrBatchNotFound = errors.New("bulk: batch not found")
	// ErrItemTooLarge reports an input item over MaxItemSize.
	ErrItemTooLarge = errors.New("bulk: input item too large")
)

// Phase is one stage of a pipeline. Its result is memoized in the item's
// step memo under "phase-<Name>", so a retried or redelivered item skips
// the phases it completed and does not pay for them twice.
type Phase struct {
	// Name is 1 to 64 characters of [A-Za-z0-9._-], unique in the pipeline.
	Name string
	// Run turns the previous phase's output (the item itself for the first
	// phase) into this phase's output. Record costs with pc.AddCost. An
	// error built with runtime.Permanent fails the item at once; any other
	// is retried until the attempts run out.
	Run func(ctx context.Context, pc *PhaseContext, input []byte) ([]byte, error)
}

// Pipeline is the phases every item goes through, in order. The last
// phase's output is the item's result.
type Pipeline struct {
	Phases []Phase
}

func (p Pipeline) validate() error {
	if len(p.Phases) == 0 {
		return fmt.Errorf("%w: a pipeline needs at least one phase", ErrInvalidBatch)
	}
	seen := map[string]bool{}
	for i, ph := range p.Phases {
		if err := validName(ph.Name, 64, true); err != nil {
			return fmt.Errorf("%w: phase %d: %w", ErrInvalidBatch, i, err)
		}
		if seen[ph.Name] {
			return fmt.Errorf("%w: phase name %q used twice", ErrInvalidBatch, ph.Name)
		}
		if ph.Run == nil {
			return fmt.Errorf("%w: phase %q has no Run", ErrInvalidBatch, ph.Name)
		}
		seen[ph.Name] = true
	}
	return nil
}

// validName checks a phase name or batch id: 1 to max characters of
// [A-Za-z0-9_-], plus '.' when dot (batch ids end at the '.' of run ids).
func validName(s string, max int, dot bool) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("name %q: want 1 to %d characters", s, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' && dot) {
			return fmt.Errorf("name %q: character %q not allowed", s, c)
		}
	}
	return nil
}

// PhaseContext is what a running phase sees.
type PhaseContext struct {
	// BatchID, Index and RunID name the item.
	BatchID string
	Index   int
	RunID   string
	// Attempt counts deliveries of the item, starting at 1.
	Attempt int
	// Lease extends the delivery's lease for long phases.
	Lease *runtime.Lease
	mu    sync.Mutex
	costs map[string]int64
}

// AddCost adds n to the named cost counter ("tokens", "micro_usd", ...)
// of this phase. Costs are integers so sums are exact; use the smallest
// unit. They count once the phase completed: a failed attempt's costs are
// not recorded.
func (pc *PhaseContext) AddCost(name string, n int64) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.costs == nil {
		pc.costs = map[string]int64{}
	}
	pc.costs[name] += n
}

// Threshold stops a batch that fails too much: once exceeded, the batch is
// marked stopped, its running items are cancelled and its pending and
// unsubmitted items end as Cancelled without running. The zero value
// never stops.
type Threshold struct {
	// MaxFailed stops the batch once this many items failed (0: no limit).
	MaxFailed int `msgpack:"mf,omitempty"`
	// MaxFailedRatio stops the batch once failed / (succeeded + failed)
	// exceeds it, counted from MinFinished finished items on (0: no limit).
	MaxFailedRatio float64 `msgpack:"mr,omitempty"`
	MinFinished    int     `msgpack:"mn,omitempty"`
}

func (t Threshold) validate() error {
	if t.MaxFailed < 0 || t.MinFinished < 0 || t.MaxFailedRatio < 0 || t.MaxFailedRatio > 1 || t.MaxFailedRatio != t.MaxFailedRatio {
		return fmt.Errorf("%w: threshold %+v: counts must not be negative and the ratio must be in [0, 1]", ErrInvalidBatch, t)
	}
	return nil
}

// exceeded reports whether failed of finished items crosses t, and why.
func (t Threshold) exceeded(failed, succeeded int) (bool, string) {
	if t.MaxFailed > 0 && failed >= t.MaxFailed {
		return true, fmt.Sprintf("%d items failed; the threshold is %d", failed, t.MaxFailed)
	}
	finished := failed + succeeded
	if t.MaxFailedRatio > 0 && finished > 0 && finished >= t.MinFinished && float64(failed)/float64(finished) > t.MaxFailedRatio {
		return true, fmt.Sprintf("%d of %d finished items failed; the threshold ratio is %g", failed, finished, t.MaxFailedRatio)
	}
	return false, ""
}

// Progress is a batch's state.
type Progress struct {
	BatchID string
	// Total is the number of items; Pending counts those not finished
	// (queued, running, retrying or not submitted yet).
	Total, Succeeded, Failed, Cancelled, Pending int
	// Costs sums the cost counters of every finished item.
	Costs map[string]int64
	// Stopped is set once the threshold stopped the batch (StopReason says why).
	Stopped    bool
	StopReason string
}

// Done reports whether every item finished.
func (p Progress) Done() bool { return p.Pending == 0 }

// Option configures New. The options are addon's, shared with jobs.
type Option = addon.Option

// WithQueueName sets the runtime queue of item runs (default "bulk").
func WithQueueName(name string) Option { return addon.WithQueueName(name) }

// WithKVPrefix sets the caller-KV prefix of batch records (default
// "bulk/").
func WithKVPrefix(prefix string) Option { return addon.WithKVPrefix(prefix) }

// WithMaxAttempts sets how many times an item runs before a transient
// error fails it (default 3).
func WithMaxAttempts(n int) Option { return addon.WithMaxAttempts(n) }

// WithConcurrency sets how many items run at once (default 8).
func WithConcurrency(n int) Option { return addon.WithConcurrency(n) }

// WithSubmitConcurrency sets how many item submissions Submit keeps in
// flight, so their commits share WAL PUTs (default 32).
func WithSubmitConcurrency(n int) Option { return addon.WithSubmitConcurrency(n) }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return addon.WithLogger(l) }

// WithRuntimeOptions sets the options passed to runtime.New. The queue name,
// maximum attempts, concurrency (steps and notifications:
// WithConcurrency, at least 2) and terminal hook are the runner's own.
func WithRuntimeOptions(o runtime.Options) Option { return addon.WithRuntimeOptions(o) }

// Runner runs one pipeline over batches of items. It owns one
// runtime.Runtime on its own queue. Safe for concurrent use.
type Runner struct {
	q    *queue.Queue
	rt   *runtime.Runtime
	pipe Pipeline
	cfg  addon.Options
	log  *slog.Logger

	mu      sync.Mutex
	batches map[string]*batchState
	running map[string]int // run id -> deliveries in progress

	// hookFault, when set (tests), runs after the hook did its work and
	// can fail the notification to force a redelivery.
	hookFault func(runID string) error
}

// batchState is the in-memory aggregate of a batch: loaded from its
// records on first use and updated from committed item records only.
type batchState struct {
	meta    *metaRecord
	items   map[int]*itemRecord // terminal items
	counts  [4]int
	costs   map[string]int64
	changed chan struct{} // closed on every change
}

// New returns a runner of pipe on q, with memo entries in store (usually
// the store q was opened on). It makes no request.
func New(q *queue.Queue, store objstore.Store, pipe Pipeline, opts ...Option) (*Runner, error) {
	cfg := addon.Options{QueueName: DefaultQueueName, KVPrefix: DefaultKVPrefix, MaxAttempts: DefaultMaxAttempts, Concurrency: 8, SubmitConcurrency: 32}
	cfg.Apply(opts)
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	if err := pipe.validate(); err != nil {
		return nil, err
	}
	r := &Runner{q: q, pipe: pipe, cfg: cfg, log: cfg.Log("bulk"), batches: map[string]*batchState{}, running: map[string]int{}}
	rt, err := cfg.NewRuntime(q, store, stepRunner{r}, hook{r})
	if err != nil {
		return nil, fmt.Errorf("bulk: %w", err)
	}
	r.rt = rt
	return r, nil
}

// Runtime returns the runtime the items run on.
func (r *Runner) Runtime() *runtime.Runtime { return r.rt }

// Run works items until ctx is done; see runtime.Runtime.Run.
func (r *Runner) Run(ctx context.Context) error { return r.rt.Run(ctx) }

// Spawn starts Run in a goroutine; stop it with Worker.Shutdown.
func (r *Runner) Spawn(ctx context.Context) *runtime.Worker { return r.rt.Spawn(ctx) }

// RunID returns the run id of item index of batchID.
func RunID(batchID string, index int) string { return batchID + "." + strconv.Itoa(index) }

func (r *Runner) metaKey(batch string) string { return r.cfg.KVPrefix + batch + "/meta" }
func (r *Runner) itemPrefix(batch string) string {
	return r.cfg.KVPrefix + batch + "/i/"
}
func (r *Runner) itemKey(batch string, i int) string {
	return fmt.Sprintf("%s%010d", r.itemPrefix(batch), i)
}

func validBatchID(id string) error {
	if err := validName(id, 48, false); err != nil {
		return fmt.Errorf("%w: batch id: %w; use letters, digits, _ and -", ErrInvalidBatch, err)
	}
	return nil
}

func (r *Runner) kvGet(ctx context.Context, key string) ([]byte, error) {
	v, err := r.q.KVGet(ctx, key)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bulk: read %s: %w", key, err)
	}
	return v, nil
}

// scan calls fn for every item record of batch, in index order.
func (r *Runner) scan(ctx context.Context, batch string, fn func(i int, rec *itemRecord) error) error {
	prefix, after := r.itemPrefix(batch), ""
	for {
		page, err := r.q.KVScan(ctx, prefix, after, 1000)
		if err != nil {
			return fmt.Errorf("bulk: scan batch %s: %w", batch, err)
		}
		for _, e := range page {
			i, err := strconv.Atoi(strings.TrimPrefix(e.Key, prefix))
			if err != nil {
				return fmt.Errorf("bulk: batch %s: %w: item key %q", batch, ErrCorruptRecord, e.Key)
			}
			rec, err := decodeItem(e.Value)
			if err != nil {
				return fmt.Errorf("bulk: batch %s item %d: %w", batch, i, err)
			}
			if err := fn(i, rec); err != nil {
				return err
			}
		}
		if len(page) < 1000 {
			return nil
		}
		after = page[len(page)-1].Key
	}
}

// state returns the loaded aggregate of batch, or nil for an unknown
// batch. Callers hold r.mu.
func (r *Runner) state(ctx context.Context, batch string) (*batchState, error) {
	if st := r.batches[batch]; st != nil {
		return st, nil
	}
	b, err := r.kvGet(ctx, r.metaKey(batch))
	if err != nil || b == nil {
		return nil, err
	}
	meta, err := decodeMeta(b)
	if err != nil {
		return nil, fmt.Errorf("bulk: batch %s: %w", batch, err)
	}
	st := &batchState{meta: meta, items: map[int]*itemRecord{}, costs: map[string]int64{}, changed: make(chan struct{})}
	if err := r.scan(ctx, batch, func(i int, rec *itemRecord) error {
		st.apply(i, rec)
		return nil
	}); err != nil {
		return nil, err
	}
	r.batches[batch] = st
	return st, nil
}

// apply replaces item i's contribution with rec's; idempotent.
func (st *batchState) apply(i int, rec *itemRecord) {
	if old := st.items[i]; old != nil {
		if old.Gen > rec.Gen || old.Gen == rec.Gen && !rec.Status.Terminal() {
			return // a stale generation, or a pending record folded late
		}
		st.counts[old.Status]--
		for k, v := range old.Costs {
			st.costs[k] -= v
		}
		delete(st.items, i)
	}
	if rec.Status.Terminal() {
		st.items[i] = &itemRecord{Gen: rec.Gen, Status: rec.Status, Costs: rec.Costs}
		st.counts[rec.Status]++
		for k, v := range rec.Costs {
			st.costs[k] += v
		}
	}
	close(st.changed)
	st.changed = make(chan struct{})
}

func (st *batchState) progress(batch string) Progress {
	p := Progress{BatchID: batch, Total: st.meta.Total, Succeeded: st.counts[Succeeded], Failed: st.counts[Failed],
		Cancelled: st.counts[Cancelled], Costs: map[string]int64{}, Stopped: st.meta.Stopped, StopReason: st.meta.StopReason}
	p.Pending = p.Total - p.Succeeded - p.Failed - p.Cancelled
	for k, v := range st.costs {
		if v != 0 {
			p.Costs[k] = v
		}
	}
	return p
}

// Submit starts batchID over items: one run per item, at most the
// submit concurrency in flight. It is idempotent: after a crash, call it
// again with the same items to submit the ones that were not; items
// already submitted or finished are skipped, an item whose input differs
// from the recorded one fails with ErrInputMismatch and a different
// number of items with ErrBatchMismatch. The threshold of the first
// Submit holds. On a stopped batch, unsubmitted items are recorded as
// Cancelled without running. Cost: one commit for the batch record, then
// one per item submitted.
func (r *Runner) Submit(ctx context.Context, batchID string, items [][]byte, th Threshold) (Progress, error) {
	if err := validBatchID(batchID); err != nil {
		return Progress{}, err
	}
	if err := th.validate(); err != nil {
		return Progress{}, err
	}
	for i, it := range items {
		if len(it) > MaxItemSize {
			return Progress{}, fmt.Errorf("%w: item %d of batch %s is %d bytes, the limit is %d; put large inputs in objects and pass keys",
				ErrItemTooLarge, i, batchID, len(it), MaxItemSize)
		}
	}
	meta, err := encode(&metaRecord{Total: len(items), Threshold: th, CreatedMs: r.q.Clock().Now().UnixMilli()})
	if err != nil {
		return Progress{}, err
	}
	if _, err := r.q.KVCompareAndPut(ctx, r.metaKey(batchID), nil, meta); err != nil {
		return Progress{}, fmt.Errorf("bulk: create batch %s: %w", batchID, err)
	}
	r.mu.Lock()
	st, err := r.state(ctx, batchID)
	r.mu.Unlock()
	if err != nil {
		return Progress{}, err
	}
	if st == nil {
		return Progress{}, fmt.Errorf("%w: %s vanished while being created", ErrBatchNotFound, batchID)
	}
	if st.meta.Total != len(items) {
		return Progress{}, fmt.Errorf("%w: batch %s has %d items, Submit got %d; use a fresh batch id", ErrBatchMismatch, batchID, st.meta.Total, len(items))
	}
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range min(r.cfg.SubmitConcurrency, max(len(items), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := r.submitItem(ctx, batchID, i, items[i]); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range items {
		if len(errs) > 0 || ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return Progress{}, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return Progress{}, fmt.Errorf("bulk: submit batch %s: %w", batchID, err)
	}
	return r.Progress(ctx, batchID)
}

// submitItem submits item i unless it has a record.
func (r *Runner) submitItem(ctx context.Context, batch string, i int, input []byte) error {
	key := r.itemKey(batch, i)
	b, err := r.kvGet(ctx, key)
	if err != nil {
		return err
	}
	if b != nil {
		rec, err := decodeItem(b)
		if err != nil {
			return fmt.Errorf("bulk: batch %s item %d: %w", batch, i, err)
		}
		if !bytes.Equal(rec.Input, input) {
			return fmt.Errorf("bulk: batch %s item %d: %w; use a fresh batch id for new items", batch, i, ErrInputMismatch)
		}
		return nil
	}
	if r.stopped(batch) {
		rec := &itemRecord{Gen: 1, Status: Cancelled, Input: input, Error: "batch stopped before the item was submitted",
			FinishMs: r.q.Clock().Now().UnixMilli()}
		v, err := encode(rec)
		if err != nil {
			return err
		}
		if ok, err := r.q.KVCompareAndPut(ctx, key, nil, v); err != nil {
			return fmt.Errorf("bulk: batch %s item %d: %w", batch, i, err)
		} else if ok {
			r.observe(batch, i, rec)
		}
		return nil
	}
	return r.submitRun(ctx, batch, i, 1, input)
}

// submitRun enqueues generation gen of item i with its pending record.
func (r *Runner) submitRun(ctx context.Context, batch string, i, gen int, input []byte) error {
	v, err := encode(&itemRecord{Gen: gen, Status: Pending, Input: input})
	if err != nil {
		return err
	}
	_, err = r.rt.Submit(ctx, runtime.RunSpec{RunID: RunID(batch, i), Input: input,
		Headers:  map[string]string{HeaderBatch: batch, HeaderIndex: strconv.Itoa(i), HeaderGen: strconv.Itoa(gen)},
		KVWrites: map[string][]byte{r.itemKey(batch, i): v}})
	if err != nil {
		return fmt.Errorf("bulk: submit batch %s item %d: %w", batch, i, err)
	}
	return nil
}

// stopped reports whether batch is stopped, as this process knows it.
func (r *Runner) stopped(batch string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.batches[batch]
	return st != nil && st.meta.Stopped
}

// observe folds a committed item record into the batch's aggregate.
func (r *Runner) observe(batch string, i int, rec *itemRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.batches[batch]; st != nil {
		st.apply(i, rec)
	}
}

// Progress returns the batch's totals read from its durable records (the
// batch record and one record per item). Cost: memory reads only.
func (r *Runner) Progress(ctx context.Context, batchID string) (Progress, error) {
	if err := validBatchID(batchID); err != nil {
		return Progress{}, err
	}
	b, err := r.kvGet(ctx, r.metaKey(batchID))
	if err != nil {
		return Progress{}, err
	}
	if b == nil {
		return Progress{}, fmt.Errorf("%w: %s", ErrBatchNotFound, batchID)
	}
	meta, err := decodeMeta(b)
	if err != nil {
		return Progress{}, fmt.Errorf("bulk: batch %s: %w", batchID, err)
	}
	st := &batchState{meta: meta, items: map[int]*itemRecord{}, costs: map[string]int64{}, changed: make(chan struct{})}
	if err := r.scan(ctx, batchID, func(i int, rec *itemRecord) error {
		st.apply(i, rec)
		return nil
	}); err != nil {
		return Progress{}, err
	}
	return st.progress(batchID), nil
}

// Wait blocks until every item of batchID finished, then returns its
// Progress. It needs this runner's worker (Run or Spawn), and, after a
// crash during Submit, a Submit that completes the batch.
func (r *Runner) Wait(ctx context.Context, batchID string) (Progress, error) {
	for {
		r.mu.Lock()
		st, err := r.state(ctx, batchID)
		if err != nil || st == nil {
			r.mu.Unlock()
			if err == nil {
				err = fmt.Errorf("%w: %s", ErrBatchNotFound, batchID)
			}
			return Progress{}, err
		}
		done, ch := st.progress(batchID).Done(), st.changed
		r.mu.Unlock()
		if done {
			return r.Progress(ctx, batchID)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Progress{}, fmt.Errorf("bulk: wait for batch %s: %w", batchID, ctx.Err())
		}
	}
}

// Replay submits the batch's failed and cancelled items again, as a new
// generation of each item's run, and clears the stopped flag. Phases an
// item completed before are served from its memo, so they are neither run
// nor paid again, and its earlier costs are not counted twice (an item
// contributes its current record only). It returns how many items it
// resubmitted. Cost: one commit per item plus one for the batch record.
func (r *Runner) Replay(ctx context.Context, batchID string) (int, error) {
	if err := validBatchID(batchID); err != nil {
		return 0, err
	}
	r.mu.Lock()
	st, err := r.state(ctx, batchID)
	if err == nil && st != nil && st.meta.Stopped {
		meta := *st.meta
		meta.Stopped, meta.StopReason = false, ""
		var b []byte
		if b, err = encode(&meta); err == nil {
			if err = r.q.KVPut(ctx, r.metaKey(batchID), b); err == nil {
				st.meta = &meta
			}
		}
	}
	r.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("bulk: replay batch %s: %w", batchID, err)
	}
	if st == nil {
		return 0, fmt.Errorf("%w: %s", ErrBatchNotFound, batchID)
	}
	type redo struct {
		i   int
		rec *itemRecord
	}
	var todo []redo
	if err := r.scan(ctx, batchID, func(i int, rec *itemRecord) error {
		if rec.Status == Failed || rec.Status == Cancelled {
			todo = append(todo, redo{i, rec})
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for n, t := range todo {
		if err := r.submitRun(ctx, batchID, t.i, t.rec.Gen+1, t.rec.Input); err != nil {
			return n, err
		}
		r.observe(batchID, t.i, &itemRecord{Gen: t.rec.Gen + 1, Status: Pending})
	}
	return len(todo), nil
}
