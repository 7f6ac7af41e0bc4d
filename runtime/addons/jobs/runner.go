package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/addons/addon"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Defaults of the options.
const (
	// DefaultQueueName is the queue job steps go to.
	DefaultQueueName = "jobs"
	// DefaultKVPrefix starts the caller-KV keys of outcome records.
	DefaultKVPrefix = "jobs/"
	// DefaultMaxAttempts is how many times a transient error is tried.
	DefaultMaxAttempts = 3
)

// Headers the runner sets on every job run.
const (
	// HeaderName carries the job type's name.
	HeaderName = "job.name"
	// HeaderInputHash carries the hex SHA-256 of the JSON input.
	HeaderInputHash = "job.input_sha256"
)

// Option configures New. The options are addon's, shared with bulk.
type Option = addon.Option

// WithQueueName sets the runtime queue of job runs (default "jobs").
func WithQueueName(name string) Option { return addon.WithQueueName(name) }

// WithKVPrefix sets the caller-KV prefix of outcome records (default
// "jobs/").
func WithKVPrefix(prefix string) Option { return addon.WithKVPrefix(prefix) }

// WithMaxAttempts sets how many times a job runs before a transient
// error fails it (default 3).
func WithMaxAttempts(n int) Option { return addon.WithMaxAttempts(n) }

// WithConcurrency sets how many jobs run at once (default 8).
func WithConcurrency(n int) Option { return addon.WithConcurrency(n) }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return addon.WithLogger(l) }

// WithRuntimeOptions sets the options passed to runtime.New (clock, retention,
// replay...). The queue name, maximum attempts, concurrency (steps and
// notifications: WithConcurrency, at least 2) and terminal hook are the
// runner's own and override these.
func WithRuntimeOptions(o runtime.Options) Option { return addon.WithRuntimeOptions(o) }

// jobType is a registered job type with its types erased.
type jobType struct {
	name string
	// run decodes the input, runs the job and encodes its output; on error
	// it also returns the error's class.
	run func(ctx context.Context, jc JobContext, payload []byte) ([]byte, Class, error)
}

// Runner registers job types, submits jobs and works them. It owns one
// runtime.Runtime on its own queue. Safe for concurrent use.
type Runner struct {
	q   *queue.Queue
	rt  *runtime.Runtime
	cfg addon.Options
	log *slog.Logger

	mu      sync.Mutex
	types   map[string]*jobType
	waiters map[string][]chan struct{}
}

// New returns a runner on q with memo entries in store (usually the store q
// was opened on). Register job types before starting the worker, so a job
// recovered from the store finds its type. It makes no request.
func New(q *queue.Queue, store objstore.Store, opts ...Option) (*Runner, error) {
	// One submission in flight: a jobs Submit submits one job.
	cfg := addon.Options{QueueName: DefaultQueueName, KVPrefix: DefaultKVPrefix, MaxAttempts: DefaultMaxAttempts, Concurrency: 8, SubmitConcurrency: 1}
	cfg.Apply(opts)
	if cfg.SubmitConcurrency != 1 {
		return nil, fmt.Errorf("jobs: WithSubmitConcurrency(%d): an option of bulk; a jobs Submit submits one job", cfg.SubmitConcurrency)
	}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	r := &Runner{q: q, cfg: cfg, log: cfg.Log("jobs"), types: map[string]*jobType{}, waiters: map[string][]chan struct{}{}}
	rt, err := cfg.NewRuntime(q, store, stepRunner{r}, hook{r})
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	r.rt = rt
	return r, nil
}

// Runtime returns the runtime the jobs run on (status, listing, signals).
func (r *Runner) Runtime() *runtime.Runtime { return r.rt }

// Run works jobs until ctx is done; see runtime.Runtime.Run.
func (r *Runner) Run(ctx context.Context) error { return r.rt.Run(ctx) }

// Spawn starts Run in a goroutine; stop it with Worker.Shutdown.
func (r *Runner) Spawn(ctx context.Context) *runtime.Worker { return r.rt.Spawn(ctx) }

// Cancel cancels a job; see runtime.Runtime.Cancel. Its awaiters get a
// *Failure matching ErrJobCancelled.
func (r *Runner) Cancel(ctx context.Context, id string) (bool, error) { return r.rt.Cancel(ctx, id) }

// Forget deletes the outcome record of a finished job. A later submission
// with the same idempotency key then runs the job again. Cost: one commit.
func (r *Runner) Forget(ctx context.Context, id string) error {
	if err := r.q.KVDelete(ctx, r.resultKey(id)); err != nil {
		return fmt.Errorf("jobs: forget job %s: %w", id, err)
	}
	return nil
}

// Register adds job type J, whose output is Out, to r. JobName is called on
// J's zero value, so it must not depend on the value.
func Register[J Job[Out], Out any](r *Runner) (err error) {
	var zero J
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %T.JobName panicked on the zero value (%v); do not read fields in JobName", ErrInvalidName, zero, p)
		}
	}()
	name := zero.JobName()
	if err := validateName(name); err != nil {
		return err
	}
	jt := &jobType{name: name, run: func(ctx context.Context, jc JobContext, payload []byte) ([]byte, Class, error) {
		var in J
		if err := json.Unmarshal(payload, &in); err != nil {
			return nil, Permanent, fmt.Errorf("decode the input of job %s as %T: %w", jc.ID, in, err)
		}
		out, err := in.Run(ctx, jc)
		if err != nil {
			return nil, classify(in, err), err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, Permanent, fmt.Errorf("encode the output of job %s (%T) as JSON: %w", jc.ID, out, err)
		}
		return b, 0, nil
	}}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.types[name]; dup {
		return fmt.Errorf("%w: job type %q is registered twice", ErrInvalidName, name)
	}
	r.types[name] = jt
	return nil
}

func validateName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%w %q: want 1 to 64 characters", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w %q: character %q not allowed; use letters, digits and ._-", ErrInvalidName, name, c)
		}
	}
	return nil
}

func (r *Runner) lookup(name string) *jobType {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.types[name]
}

// JobID returns the job id of the job named name with idempotency key key:
// "<name>:<key>" when that is a valid run id, else "<name>=" and 32 hex
// digits of the key's SHA-256 (names contain neither ':' nor '=').
func JobID(name, key string) string {
	if id := name + ":" + key; runstate.ValidateRunID(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(key))
	return name + "=" + hex.EncodeToString(sum[:16])
}

func (r *Runner) resultKey(id string) string { return r.cfg.KVPrefix + "results/" + id }

// load returns the outcome record of id, or nil.
func (r *Runner) load(ctx context.Context, id string) (*record, error) {
	b, err := r.q.KVGet(ctx, r.resultKey(id))
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: read outcome of job %s: %w", id, err)
	}
	rec, err := decodeRecord(b)
	if err != nil {
		return nil, fmt.Errorf("jobs: job %s: %w", id, err)
	}
	return rec, nil
}

// Submit submits job and returns its handle. With an idempotency key, a
// job already running or finished under the same key is returned instead
// (Handle.Deduplicated); a different input under that key fails with
// ErrInputMismatch. Cost: one commit for a new job, memory reads otherwise.
func Submit[J Job[Out], Out any](ctx context.Context, r *Runner, job J) (*Handle[Out], error) {
	name := job.JobName()
	if r.lookup(name) == nil {
		return nil, fmt.Errorf("%w: %q (%T); call jobs.Register first", ErrUnknownJob, name, job)
	}
	in, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode the input of %s (%T) as JSON: %w", name, job, err)
	}
	sum := sha256.Sum256(in)
	h := &Handle[Out]{r: r, Name: name, hash: sum[:]}
	if k, ok := any(job).(Idempotent); ok {
		if key := k.IdempotencyKey(); key != "" {
			h.ID = JobID(name, key)
		}
	}
	if h.ID != "" {
		rec, err := r.load(ctx, h.ID)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			if err := h.check(rec); err != nil {
				return nil, err
			}
			h.Deduplicated = true
			return h, nil
		}
	}
	out, err := r.rt.Submit(ctx, runtime.RunSpec{RunID: h.ID, Input: in,
		Headers: map[string]string{HeaderName: name, HeaderInputHash: hex.EncodeToString(sum[:])}})
	if err != nil {
		return nil, fmt.Errorf("jobs: submit %s: %w", name, err)
	}
	h.ID, h.Deduplicated = out.RunID, !out.NewlySubmitted
	return h, nil
}

// Handle is a submitted job whose result is of type Out.
type Handle[Out any] struct {
	r *Runner
	// ID is the job id (the run id); keep it to OpenHandle after a restart.
	ID string
	// Name is the job type's name ("" for a handle from OpenHandle).
	Name string
	// Deduplicated is true when Submit found the job already submitted or
	// finished under the same idempotency key.
	Deduplicated bool
	hash         []byte // SHA-256 of the submitted input; nil from OpenHandle
}

// OpenHandle returns a handle of job id, for instance after a restart.
func OpenHandle[Out any](r *Runner, id string) *Handle[Out] { return &Handle[Out]{r: r, ID: id} }

// check verifies that rec is the outcome of the job h submitted.
func (h *Handle[Out]) check(rec *record) error {
	if h.Name != "" && rec.Name != h.Name || h.hash != nil && rec.InputHash != nil && !bytes.Equal(rec.InputHash, h.hash) {
		return fmt.Errorf("jobs: job %s: %w; choose another idempotency key for a new job", h.ID, ErrInputMismatch)
	}
	return nil
}

// FetchResult returns the job's outcome without waiting: the output, a
// *Failure (ErrJobFailed, ErrJobCancelled), ErrNotDone while it runs or
// ErrNotFound for an unknown id. It reads durable records only, so it
// works in a process restarted after the job finished. Cost: memory reads.
func (h *Handle[Out]) FetchResult(ctx context.Context) (Out, error) {
	var zero Out
	rec, err := h.r.load(ctx, h.ID)
	if err != nil {
		return zero, err
	}
	if rec == nil {
		if _, err := h.r.rt.Status(ctx, h.ID); errors.Is(err, runtime.ErrRunNotFound) || errors.Is(err, runstate.ErrInvalidRunID) {
			return zero, fmt.Errorf("%w: %s", ErrNotFound, h.ID)
		} else if err != nil {
			return zero, fmt.Errorf("jobs: job %s: %w", h.ID, err)
		}
		return zero, fmt.Errorf("%w: %s", ErrNotDone, h.ID)
	}
	if err := h.check(rec); err != nil {
		return zero, err
	}
	if rec.Status != runstate.Succeeded {
		return zero, rec.failure(h.ID)
	}
	var out Out
	if err := json.Unmarshal(rec.Output, &out); err != nil {
		return zero, fmt.Errorf("jobs: decode the output of job %s as %T: %w", h.ID, out, err)
	}
	return out, nil
}

// Await waits until the job finished and returns FetchResult's answer.
// The outcome it returns is durable. Waiting needs the worker (Run or
// Spawn) of this runner; it costs no request.
func (h *Handle[Out]) Await(ctx context.Context) (Out, error) {
	for {
		ch := h.r.watch(h.ID)
		out, err := h.FetchResult(ctx)
		if !errors.Is(err, ErrNotDone) {
			h.r.unwatch(h.ID, ch)
			return out, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			h.r.unwatch(h.ID, ch)
			var zero Out
			return zero, fmt.Errorf("jobs: await job %s: %w", h.ID, ctx.Err())
		}
	}
}

func (r *Runner) watch(id string) chan struct{} {
	ch := make(chan struct{})
	r.mu.Lock()
	r.waiters[id] = append(r.waiters[id], ch)
	r.mu.Unlock()
	return ch
}

func (r *Runner) unwatch(id string, ch chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.waiters[id]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(r.waiters, id)
	} else {
		r.waiters[id] = ws
	}
}

// wake releases every waiter of id.
func (r *Runner) wake(id string) {
	r.mu.Lock()
	ws := r.waiters[id]
	delete(r.waiters, id)
	r.mu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

// stepRunner runs one job as the single step of its run.
type stepRunner struct{ r *Runner }

func (s stepRunner) RunStep(ctx context.Context, step *runtime.Step) (runtime.StepOutcome, error) {
	r := s.r
	name := step.Headers[HeaderName]
	hash, _ := hex.DecodeString(step.Headers[HeaderInputHash])
	// A run re-created under a finished job's id (a Submit racing the
	// first run's end) must not run the job again.
	if b, found, err := step.KV.Get(ctx, r.resultKey(step.RunID)); err != nil {
		return runtime.StepOutcome{}, err
	} else if found {
		if rec, derr := decodeRecord(b); derr == nil {
			if !bytes.Equal(rec.InputHash, hash) {
				return runtime.Fail(fmt.Sprintf("job %s already finished with another input; %v", step.RunID, ErrInputMismatch)), nil
			}
			if rec.Status == runstate.Succeeded {
				return runtime.Succeed(nil), nil
			}
			return runtime.Fail(rec.Message), nil
		}
	}
	rec := &record{Name: name, InputHash: hash, Attempts: step.Attempt}
	jt := r.lookup(name)
	if jt == nil {
		rec.Status, rec.Class = runstate.Failed, Permanent
		rec.Message = fmt.Sprintf("%v: %q is not registered in the worker process; register it before starting the worker", ErrUnknownJob, name)
		return r.finish(step, rec)
	}
	jc := JobContext{ID: step.RunID, Name: name, Attempt: step.Attempt, MaxAttempts: r.cfg.MaxAttempts,
		Memo: step.Memo, Lease: step.Lease, Effects: step.Effects, KV: step.KV}
	out, cls, err := jt.run(ctx, jc, step.Payload)
	if err != nil {
		if errors.Is(context.Cause(ctx), runtime.ErrShutdown) || cls == Transient && step.Attempt < r.cfg.MaxAttempts {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		rec.Status, rec.Class, rec.Message = runstate.Failed, cls, err.Error()
		var c Coder
		if errors.As(err, &c) {
			rec.Code = c.ErrorCode()
		}
		var d Detailer
		if errors.As(err, &d) {
			if b, jerr := json.Marshal(d.ErrorDetail()); jerr == nil {
				rec.Detail = b
			} else {
				r.log.Warn("dropping a failure detail that does not encode as JSON", "job", step.RunID, "err", jerr)
			}
		}
		return r.finish(step, rec)
	}
	rec.Status, rec.Output = runstate.Succeeded, out
	return r.finish(step, rec)
}

// finish stages rec as the job's outcome record and ends the run with it.
func (r *Runner) finish(step *runtime.Step, rec *record) (runtime.StepOutcome, error) {
	rec.FinishMs = r.rt.Queue().Clock().Now().UnixMilli()
	b, err := encodeRecord(rec)
	if err == nil {
		err = step.Effects.Put(r.resultKey(step.RunID), b)
	}
	if err != nil {
		// An output too large for a KV value: fail the job with a record
		// that says so.
		msg := fmt.Sprintf("the outcome of job %s could not be stored (%v); return smaller outputs and keep large data in objects", step.RunID, err)
		small := &record{Name: rec.Name, InputHash: rec.InputHash, Status: runstate.Failed, Class: Permanent,
			Message: msg, Attempts: rec.Attempts, FinishMs: rec.FinishMs}
		if b, err = encodeRecord(small); err == nil {
			err = step.Effects.Put(r.resultKey(step.RunID), b)
		}
		if err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		return runtime.Fail(msg), nil
	}
	if rec.Status == runstate.Succeeded {
		return runtime.Succeed(nil), nil
	}
	return runtime.Fail(rec.Message), nil
}

// hook completes records of terminations the job's step did not decide
// and wakes the job's waiters.
type hook struct{ r *Runner }

func (h hook) Observes(o *runstate.Outcome) bool { return o.Headers[HeaderName] != "" }

func (h hook) OnTermination(ctx context.Context, o *runstate.Outcome, _ *runtime.TerminalEffects) error {
	r := h.r
	rec, err := r.load(ctx, o.RunID)
	switch {
	case errors.Is(err, ErrCorruptRecord):
		// Keep the evidence: FetchResult reports the corruption.
		r.log.Error("outcome record is corrupt", "job", o.RunID, "err", err)
	case err != nil:
		return err
	case rec == nil:
		hash, _ := hex.DecodeString(o.Headers[HeaderInputHash])
		rec = &record{Name: o.Headers[HeaderName], InputHash: hash, Status: o.Status, Message: o.Error,
			FinishMs: o.FinishedAt.UnixMilli()}
		if o.Status == runstate.Failed {
			rec.Class = Permanent
		}
		if rec.Status == runstate.Succeeded { // a success always has a record; be safe
			rec.Output = []byte("null")
		}
		b, err := encodeRecord(rec)
		if err != nil {
			return runtime.Permanent(err)
		}
		// Written before waking anyone, so the outcome an awaiter reads is
		// durable; only if absent, so a redelivery changes nothing.
		// A lost race means a record exists now, which is all waiters need.
		if _, err := r.q.KVCompareAndPut(ctx, r.resultKey(o.RunID), nil, b); err != nil {
			return fmt.Errorf("jobs: record the outcome of job %s: %w", o.RunID, err)
		}
	}
	r.wake(o.RunID)
	return nil
}
