package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/internal/queuetest"
	"github.com/tqw-dsl/tqw/internal/rttest"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/addons/addon"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// env is a jobs runner on an rttest env: a mem store driven by a clock.Mock.
type env struct {
	*rttest.Env
	r *Runner
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{}
	e.Env = rttest.New(t, func(q *queue.Queue, store objstore.Store) (*runtime.Runtime, error) {
		r, err := New(q, store, WithLogger(queuetest.Quiet()), WithRuntimeOptions(runtime.Options{ShutdownTimeout: -1}))
		if err != nil {
			return nil, err
		}
		for _, err := range []error{Register[Echo](r), Register[Flaky](r), Register[Gated](r)} {
			if err != nil {
				return nil, fmt.Errorf("Register: %w", err)
			}
		}
		e.r = r
		return r.Runtime(), nil
	})
	return e
}

// retryUntil advances the clock past the queue's backoff whenever a job
// waits for a retry, until done is closed.
func (e *env) retryUntil(done <-chan struct{}) {
	e.T.Helper()
	e.Until(func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}, func() string { return "the job never finished" }, DefaultQueueName)
}

// Echo returns its text upper-cased; Key makes it idempotent.
type Echo struct {
	Text string `json:"text"`
	Key  string `json:"key,omitempty"`
}

var echoRuns atomic.Int64

func (Echo) JobName() string { return "echo" }

func (e Echo) IdempotencyKey() string { return e.Key }

func (e Echo) Run(_ context.Context, jc JobContext) (EchoOut, error) {
	echoRuns.Add(1)
	return EchoOut{Upper: strings.ToUpper(e.Text), ID: jc.ID}, nil
}

type EchoOut struct {
	Upper string `json:"upper"`
	ID    string `json:"id"`
}

// Flaky fails with its Fail error FailFor attempts.
type Flaky struct {
	FailFor int  `json:"fail_for"`
	Perm    bool `json:"perm"`
}

func (Flaky) JobName() string { return "flaky" }

type quotaError struct{ Limit int }

func (q quotaError) Error() string    { return fmt.Sprintf("quota %d exceeded", q.Limit) }
func (quotaError) ErrorCode() string  { return "quota" }
func (q quotaError) ErrorDetail() any { return map[string]int{"limit": q.Limit} }
func (f Flaky) ClassifyError(err error) Class {
	if f.Perm {
		return Permanent
	}
	return Transient
}

func (f Flaky) Run(_ context.Context, jc JobContext) (int, error) {
	if jc.Attempt <= f.FailFor {
		return 0, quotaError{Limit: jc.Attempt}
	}
	return jc.Attempt, nil
}

// Gated blocks until its gate opens.
type Gated struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

var (
	gateMu   sync.Mutex
	gates    = map[string]chan struct{}{}
	gateRuns atomic.Int64
	gateSeq  atomic.Int64
)

func gateFor(key string) chan struct{} {
	gateMu.Lock()
	defer gateMu.Unlock()
	if gates[key] == nil {
		gates[key] = make(chan struct{})
	}
	return gates[key]
}

func (Gated) JobName() string          { return "gated" }
func (g Gated) IdempotencyKey() string { return g.Key }
func (g Gated) Run(ctx context.Context, _ JobContext) (int, error) {
	gateRuns.Add(1)
	select {
	case <-gateFor(g.Key):
		return g.N * 2, nil
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

func TestSubmitAwait(t *testing.T) {
	e := newEnv(t)
	e.Start()
	h, err := Submit(e.Ctx, e.r, Echo{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Await(e.Ctx)
	if err != nil {
		t.Fatalf("Await: %v", err)
	}
	if out.Upper != "HELLO" || out.ID != h.ID || h.Deduplicated {
		t.Fatalf("out %+v, handle %+v", out, h)
	}
	if st := e.Status(h.ID); st.State != runstate.StateSucceeded {
		t.Fatalf("run status %+v", st)
	}
}

func TestTypedErrors(t *testing.T) {
	e := newEnv(t)
	e.Start()

	// Permanent: fails at once with code and detail.
	h, err := Submit(e.Ctx, e.r, Flaky{FailFor: 10, Perm: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Await(e.Ctx)
	var f *Failure
	if !errors.As(err, &f) || !errors.Is(err, ErrJobFailed) || errors.Is(err, ErrJobCancelled) {
		t.Fatalf("Await: %v", err)
	}
	if f.Class != Permanent || f.Code != "quota" || f.Attempts != 1 || f.Message != "quota 1 exceeded" || f.Job != "flaky" {
		t.Fatalf("failure %+v", f)
	}
	d, ok, derr := DecodeDetail[map[string]int](err)
	if !ok || derr != nil || d["limit"] != 1 {
		t.Fatalf("detail %v %v %v", d, ok, derr)
	}

	// Transient: retried with backoff, succeeds on the third attempt.
	h, err = Submit(e.Ctx, e.r, Flaky{FailFor: 2})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var n int
	go func() { defer close(done); n, err = h.Await(e.Ctx) }()
	e.retryUntil(done)
	if err != nil || n != 3 {
		t.Fatalf("transient job: %d, %v", n, err)
	}

	// Transient until the attempts run out.
	h, err = Submit(e.Ctx, e.r, Flaky{FailFor: 5})
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { defer close(done); _, err = h.Await(e.Ctx) }()
	e.retryUntil(done)
	if !errors.As(err, &f) || f.Class != Transient || f.Attempts != DefaultMaxAttempts || f.Code != "quota" {
		t.Fatalf("exhausted job: %v (%+v)", err, f)
	}
}

func TestIdempotencyBeforeAndAfterCompletion(t *testing.T) {
	e := newEnv(t)
	e.Start()
	before := gateRuns.Load()
	key := fmt.Sprintf("idem-%d", gateSeq.Add(1))
	h1, err := Submit(e.Ctx, e.r, Gated{Key: key, N: 21})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := Submit(e.Ctx, e.r, Gated{Key: key, N: 21})
	if err != nil {
		t.Fatal(err)
	}
	if h1.ID != "gated:"+key || h2.ID != h1.ID || h1.Deduplicated || !h2.Deduplicated {
		t.Fatalf("handles %+v %+v", h1, h2)
	}
	// A different input under the same key while the job runs.
	if _, err := Submit(e.Ctx, e.r, Gated{Key: key, N: 22}); !errors.Is(err, ErrInputMismatch) {
		t.Fatalf("mismatch while running: %v", err)
	}
	if _, err := h1.FetchResult(e.Ctx); !errors.Is(err, ErrNotDone) {
		t.Fatalf("FetchResult while running: %v", err)
	}
	close(gateFor(key))
	for _, h := range []*Handle[int]{h1, h2} {
		if v, err := h.Await(e.Ctx); err != nil || v != 42 {
			t.Fatalf("Await: %d %v", v, err)
		}
	}
	// After completion: the stored outcome, no new run.
	h3, err := Submit(e.Ctx, e.r, Gated{Key: key, N: 21})
	if err != nil {
		t.Fatal(err)
	}
	if !h3.Deduplicated || h3.ID != h1.ID {
		t.Fatalf("after completion: %+v", h3)
	}
	if v, err := h3.FetchResult(e.Ctx); err != nil || v != 42 {
		t.Fatalf("FetchResult after completion: %d %v", v, err)
	}
	if _, err := Submit(e.Ctx, e.r, Gated{Key: key, N: 23}); !errors.Is(err, ErrInputMismatch) {
		t.Fatalf("mismatch after completion: %v", err)
	}
	if got := gateRuns.Load() - before; got != 1 {
		t.Fatalf("job ran %d times, want 1", got)
	}
	e.Status(h1.ID)
	// Forget frees the key: the job runs again.
	if err := e.r.Forget(e.Ctx, h1.ID); err != nil {
		t.Fatal(err)
	}
	h4, err := Submit(e.Ctx, e.r, Gated{Key: key, N: 5})
	if err != nil || h4.Deduplicated {
		t.Fatalf("after Forget: %+v %v", h4, err)
	}
	if v, err := h4.Await(e.Ctx); err != nil || v != 10 {
		t.Fatalf("after Forget: %d %v", v, err)
	}
}

func TestFetchResultAfterReopen(t *testing.T) {
	e := newEnv(t)
	e.Start()
	h, err := Submit(e.Ctx, e.r, Echo{Text: "durable"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Await(e.Ctx); err != nil {
		t.Fatal(err)
	}
	hk, err := Submit(e.Ctx, e.r, Echo{Text: "keyed", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hk.Await(e.Ctx); err != nil {
		t.Fatal(err)
	}
	e.Reopen() // a fresh queue and runner on the same store, no worker
	out, err := OpenHandle[EchoOut](e.r, h.ID).FetchResult(e.Ctx)
	if err != nil || out.Upper != "DURABLE" {
		t.Fatalf("after reopen: %+v %v", out, err)
	}
	runs := echoRuns.Load()
	h2, err := Submit(e.Ctx, e.r, Echo{Text: "keyed", Key: "k1"})
	if err != nil || !h2.Deduplicated {
		t.Fatalf("keyed resubmit after reopen: %+v %v", h2, err)
	}
	if out, err := h2.Await(e.Ctx); err != nil || out.Upper != "KEYED" || echoRuns.Load() != runs {
		t.Fatalf("keyed after reopen: %+v %v", out, err)
	}
	if _, err := Submit(e.Ctx, e.r, Echo{Text: "other", Key: "k1"}); !errors.Is(err, ErrInputMismatch) {
		t.Fatalf("mismatch after reopen: %v", err)
	}
	if _, err := OpenHandle[EchoOut](e.r, "nope").FetchResult(e.Ctx); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

// A job submitted before a restart finishes under the next process, and
// its awaiter there gets the result.
func TestAwaitAcrossRestart(t *testing.T) {
	e := newEnv(t)
	h, err := Submit(e.Ctx, e.r, Echo{Text: "later"})
	if err != nil {
		t.Fatal(err)
	}
	e.Reopen()
	e.Start()
	out, err := OpenHandle[EchoOut](e.r, h.ID).Await(e.Ctx)
	if err != nil || out.Upper != "LATER" {
		t.Fatalf("%+v %v", out, err)
	}
}

func TestCancelledJob(t *testing.T) {
	e := newEnv(t)
	// Not started: the job is pending, Cancel removes it in one commit and
	// the hook writes the record once the worker runs.
	ckey := fmt.Sprintf("cancel-%d", gateSeq.Add(1))
	h, err := Submit(e.Ctx, e.r, Gated{Key: ckey, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.r.Cancel(e.Ctx, h.ID); !ok || err != nil {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	e.Start()
	_, err = h.Await(e.Ctx)
	var f *Failure
	if !errors.Is(err, ErrJobCancelled) || !errors.As(err, &f) || f.Job != "gated" {
		t.Fatalf("Await: %v", err)
	}
	// The record is durable: a resubmission under the key is deduplicated.
	if h2, err := Submit(e.Ctx, e.r, Gated{Key: ckey, N: 1}); err != nil || !h2.Deduplicated {
		t.Fatalf("resubmit: %+v %v", h2, err)
	}
}

func TestRegisterAndSubmitErrors(t *testing.T) {
	e := newEnv(t)
	if err := Register[Echo](e.r); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("double register: %v", err)
	}
	if err := Register[badName](e.r); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := Submit(e.Ctx, e.r, unregistered{}); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("unregistered: %v", err)
	}
	if got := JobID("echo", "a b"); !strings.HasPrefix(got, "echo=") || len(got) != len("echo=")+32 {
		t.Fatalf("JobID of a key with a space: %q", got)
	}
	if got := JobID("echo", "order-7"); got != "echo:order-7" {
		t.Fatalf("JobID: %q", got)
	}
}

type badName struct{}

func (badName) JobName() string                              { return "bad name" }
func (badName) Run(context.Context, JobContext) (int, error) { return 0, nil }

type unregistered struct{}

func (unregistered) JobName() string                              { return "unregistered" }
func (unregistered) Run(context.Context, JobContext) (int, error) { return 0, nil }

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []*record{
		{Name: "echo", InputHash: make([]byte, 32), Status: runstate.Succeeded, Output: []byte(`{"a":1}`), FinishMs: 5},
		{Name: "flaky", Status: runstate.Failed, Message: "m", Class: Permanent, Code: "c", Detail: []byte(`[1]`), Attempts: 2},
		{Name: "g", Status: runstate.Cancelled},
	} {
		b, err := encodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x81, 0xa1, 's', 0x07})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	for _, b := range hostileRecords {
		f.Add(b)
	}
	golden.AddCorpus(f, "testdata/golden/*.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		var rec *record
		var err error
		allocbound.Check(t, len(b), func() { rec, err = decodeRecord(b) })
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("error %v is not ErrCorruptRecord", err)
			}
			return
		}
		if rec.Name == "" || rec.Status < runstate.Succeeded || rec.Status > runstate.Cancelled {
			t.Fatalf("accepted invalid record %+v", rec)
		}
	})
}

// The options are shared with bulk; New rejects bulk's own instead of
// ignoring it.
func TestNewRejectsBulkOnlyOption(t *testing.T) {
	e := newEnv(t)
	_, err := New(e.Q, e.Store, addon.WithSubmitConcurrency(4))
	if err == nil || !strings.Contains(err.Error(), "WithSubmitConcurrency(4)") {
		t.Fatalf("New with WithSubmitConcurrency: %v; want an error naming it", err)
	}
	if _, err := New(e.Q, e.Store, WithMaxAttempts(0)); err == nil || !strings.Contains(err.Error(), "jobs: WithMaxAttempts(0)") {
		t.Fatalf("New with WithMaxAttempts(0): %v", err)
	}
}
