package bulk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// pipe is a two-phase test pipeline: "measure" costs len(input) tokens,
// "price" costs 7 micro_usd per token and upper-cases the input. Items
// named "bad*" fail permanently in "price" while broken is set; "slow*"
// items block in "price" until release is closed or their context ends;
// "flaky*" items fail "price" transiently on their first attempt.
type pipe struct {
	measured, priced atomic.Int64
	broken           atomic.Bool
	release          chan struct{}
	entered          chan string
	// badAfter, when set, holds "bad*" items in "price" until it is
	// closed, so a test can order a failure after another item started.
	badAfter chan struct{}
	// slow0 is closed when "slow-0" enters "price".
	slow0     chan struct{}
	slow0Once sync.Once
	// measuredItems are the inputs "measure" ran for.
	measuredMu    sync.Mutex
	measuredItems map[string]bool
}

func newPipe() *pipe {
	p := &pipe{release: make(chan struct{}), entered: make(chan string, 100), slow0: make(chan struct{}), measuredItems: map[string]bool{}}
	p.broken.Store(true)
	return p
}

func (p *pipe) pipeline() Pipeline {
	return Pipeline{Phases: []Phase{
		{Name: "measure", Run: func(_ context.Context, pc *PhaseContext, in []byte) ([]byte, error) {
			p.measured.Add(1)
			p.measuredMu.Lock()
			p.measuredItems[string(in)] = true
			p.measuredMu.Unlock()
			pc.AddCost("tokens", int64(len(in)))
			return in, nil
		}},
		{Name: "price", Run: func(ctx context.Context, pc *PhaseContext, in []byte) ([]byte, error) {
			s := string(in)
			switch {
			case strings.HasPrefix(s, "bad") && p.broken.Load():
				if p.badAfter != nil {
					select {
					case <-p.badAfter:
					case <-ctx.Done():
						return nil, context.Cause(ctx)
					}
				}
				pc.AddCost("micro_usd", 1000) // a failed attempt: not counted
				return nil, runtime.Permanent(fmt.Errorf("cannot price %q", s))
			case strings.HasPrefix(s, "flaky") && pc.Attempt == 1:
				return nil, errors.New("price service unavailable")
			case strings.HasPrefix(s, "slow"):
				p.entered <- s
				if s == "slow-0" {
					p.slow0Once.Do(func() { close(p.slow0) })
				}
				select {
				case <-p.release:
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}
			p.priced.Add(1)
			pc.AddCost("micro_usd", 7*int64(len(in)))
			return []byte(fmt.Sprintf("%q", strings.ToUpper(s))), nil
		}},
	}}
}

// env is a bulk runner of a test pipe on an rttest env: a mem store
// driven by a clock.Mock.
type env struct {
	*rttest.Env
	r *Runner
	p *pipe
}

func newEnv(t *testing.T, opts ...Option) *env {
	t.Helper()
	e := &env{p: newPipe()}
	opts = append([]Option{WithLogger(queuetest.Quiet()), WithRuntimeOptions(runtime.Options{ShutdownTimeout: -1})}, opts...)
	e.Env = rttest.New(t, func(q *queue.Queue, store objstore.Store) (*runtime.Runtime, error) {
		r, err := New(q, store, e.p.pipeline(), opts...)
		if err != nil {
			return nil, err
		}
		e.r = r
		return r.Runtime(), nil
	})
	// Runs before the env's cleanup: slow items return, so the worker stops.
	t.Cleanup(func() {
		select {
		case <-e.p.release:
		default:
			close(e.p.release)
		}
	})
	return e
}

// wait is Runner.Wait that also advances the clock past retry backoffs.
func (e *env) wait(batch string) Progress {
	e.T.Helper()
	type res struct {
		p   Progress
		err error
	}
	done := make(chan res, 1)
	go func() {
		p, err := e.r.Wait(e.Ctx, batch)
		done <- res{p, err}
	}()
	var r res
	e.Until(func() bool {
		select {
		case r = <-done:
			return true
		default:
			return false
		}
	}, func() string {
		p, err := e.r.Progress(context.Background(), batch)
		st, _ := e.Q.Stats(context.Background(), DefaultQueueName)
		nst, _ := e.Q.Stats(context.Background(), DefaultQueueName+"-notify")
		return fmt.Sprintf("Wait(%s): durable %+v %v; steps %+v notify %+v", batch, p, err, st, nst)
	}, DefaultQueueName, DefaultQueueName+"-notify")
	if r.err != nil {
		e.T.Fatalf("Wait(%s): %v", batch, r.err)
	}
	return r.p
}

func items(names ...string) [][]byte {
	out := make([][]byte, len(names))
	for i, n := range names {
		out[i] = []byte(n)
	}
	return out
}

// expectCosts returns the exact costs of the items that completed both
// phases (ok) and of those that failed in "price" (failed).
func expectCosts(ok, failed []string) map[string]int64 {
	c := map[string]int64{}
	for _, s := range ok {
		c["tokens"] += int64(len(s))
		c["micro_usd"] += 7 * int64(len(s))
	}
	for _, s := range failed {
		c["tokens"] += int64(len(s))
	}
	return c
}

func sameCosts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestProgressTotalsAndResults(t *testing.T) {
	e := newEnv(t)
	e.Start()
	var names, ok, bad []string
	for i := range 20 {
		n := fmt.Sprintf("item-%02d", i)
		if i%7 == 3 {
			n = fmt.Sprintf("bad-%02d", i)
			bad = append(bad, n)
		} else if i%5 == 1 {
			n = fmt.Sprintf("flaky-%02d", i)
			ok = append(ok, n)
		} else {
			ok = append(ok, n)
		}
		names = append(names, n)
	}
	if _, err := e.r.Submit(e.Ctx, "b1", items(names...), Threshold{}); err != nil {
		t.Fatal(err)
	}
	p := e.wait("b1")
	if p.Total != 20 || p.Succeeded != len(ok) || p.Failed != len(bad) || p.Cancelled != 0 || p.Pending != 0 || !p.Done() || p.Stopped {
		t.Fatalf("progress %+v", p)
	}
	if want := expectCosts(ok, bad); !sameCosts(p.Costs, want) {
		t.Fatalf("costs %v, want %v", p.Costs, want)
	}
	if got := e.p.measured.Load(); got != 20 {
		t.Fatalf("measure ran %d times, want 20 (memoized across the flaky retries)", got)
	}
	var buf bytes.Buffer
	n, err := e.r.WriteResults(e.Ctx, "b1", &buf)
	if err != nil || n != 20 {
		t.Fatalf("WriteResults: %d %v", n, err)
	}
	sc := bufio.NewScanner(&buf)
	for i := 0; sc.Scan(); i++ {
		var res Result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		name := names[i]
		if res.Index != i || res.RunID != RunID("b1", i) {
			t.Fatalf("line %d: %+v", i, res)
		}
		if strings.HasPrefix(name, "bad") {
			if res.Status != "failed" || !strings.Contains(res.Error, "cannot price") || res.Costs["tokens"] != int64(len(name)) || res.Costs["micro_usd"] != 0 {
				t.Fatalf("line %d: %+v", i, res)
			}
			continue
		}
		var out string
		if err := json.Unmarshal(res.Output, &out); err != nil || out != strings.ToUpper(name) || res.Status != "succeeded" {
			t.Fatalf("line %d: %+v (%v)", i, res, err)
		}
	}
	buf.Reset()
	if n, err := e.r.WriteResults(e.Ctx, "b1", &buf, Failed); err != nil || n != len(bad) {
		t.Fatalf("WriteResults(Failed): %d %v", n, err)
	}
}

// A notification that fails after the hook did its work is redelivered;
// the totals count its item once.
func TestCostRollupNotDoubleCountedOnRedelivery(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	failed := map[string]bool{}
	e.r.hookFault = func(runID string) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed[runID] {
			failed[runID] = true
			return errors.New("injected: notification lost after the hook ran")
		}
		return nil
	}
	e.Start()
	names := []string{"a", "bb", "ccc", "bad-d", "eeeee", "flaky-f"}
	if _, err := e.r.Submit(e.Ctx, "b2", items(names...), Threshold{}); err != nil {
		t.Fatal(err)
	}
	p := e.wait("b2")
	want := expectCosts([]string{"a", "bb", "ccc", "eeeee", "flaky-f"}, []string{"bad-d"})
	if p.Succeeded != 5 || p.Failed != 1 || !sameCosts(p.Costs, want) {
		t.Fatalf("progress %+v, want costs %v", p, want)
	}
	// Every notification was delivered twice.
	notify := e.RT.NotifyQueueName()
	e.Until(func() bool {
		st, _ := e.Q.Stats(e.Ctx, notify)
		mu.Lock()
		n := len(failed)
		mu.Unlock()
		return n == len(names) && st.Pending+st.Scheduled+st.Claimed == 0
	}, func() string { return "notifications never settled" }, notify)
	// The in-memory aggregate agrees with the durable records.
	e.r.mu.Lock()
	mem := e.r.batches["b2"].progress("b2")
	e.r.mu.Unlock()
	if mem.Succeeded != 5 || mem.Failed != 1 || !sameCosts(mem.Costs, want) {
		t.Fatalf("in-memory aggregate %+v", mem)
	}
	if p2, _ := e.r.Progress(e.Ctx, "b2"); !sameCosts(p2.Costs, want) || p2.Succeeded != 5 {
		t.Fatalf("durable progress %+v", p2)
	}
}

func TestFailureThresholdStopsBatch(t *testing.T) {
	// One submission at a time, so the queue delivers items in index order.
	e := newEnv(t, WithConcurrency(3), WithSubmitConcurrency(1))
	// The bad items fail only once slow-0 runs: on a loaded machine they
	// could otherwise stop the batch before slow-0's step started at all,
	// which cancels it before it enters "price".
	e.p.badAfter = e.p.slow0
	e.Start()
	names := []string{"slow-0", "bad-1", "bad-2"}
	for i := 3; i < 10; i++ {
		names = append(names, fmt.Sprintf("slow-%d", i))
	}
	if _, err := e.r.Submit(e.Ctx, "b3", items(names...), Threshold{MaxFailed: 2}); err != nil {
		t.Fatal(err)
	}
	p := e.wait("b3")
	if !p.Stopped || !strings.Contains(p.StopReason, "2 items failed") || p.Failed != 2 || p.Cancelled != 8 || p.Succeeded != 0 {
		t.Fatalf("progress %+v", p)
	}
	// slow-0 was running when the batch stopped: cancelled through its
	// context. slow-3 and slow-4 took the slots the bad items freed and may
	// have started before the stop; the rest never ran.
	close(e.p.entered)
	tokens := int64(len("bad-1") + len("bad-2"))
	started := map[string]bool{}
	for s := range e.p.entered {
		started[s] = true
		tokens += int64(len(s))
	}
	// Items whose "measure" ran but whose "price" never started may have
	// had that phase committed (its tokens count) before the stop, or
	// cancelled with it (they do not).
	var maybe []int64
	e.p.measuredMu.Lock()
	for s := range e.p.measuredItems {
		if strings.HasPrefix(s, "slow") && !started[s] {
			maybe = append(maybe, int64(len(s)))
		}
	}
	e.p.measuredMu.Unlock()
	if !started["slow-0"] || len(started) > 3 || len(started) == 3 && !(started["slow-3"] && started["slow-4"]) {
		t.Fatalf("started %v", started)
	}
	if st := e.Status(RunID("b3", 0)); st.State != runstate.StateCancelled {
		t.Fatalf("running item: %+v", st)
	}
	if !subsetSum(p.Costs["tokens"]-tokens, maybe) || p.Costs["micro_usd"] != 0 {
		t.Fatalf("costs of a stopped batch %v, want %d tokens (measure completed for the started items) plus some of %v (measured, never priced)", p.Costs, tokens, maybe)
	}
	// A later Submit of the stopped batch runs nothing new.
	if p2, err := e.r.Submit(e.Ctx, "b3", items(names...), Threshold{MaxFailed: 2}); err != nil || p2.Cancelled != 8 || p2.Costs["tokens"] != p.Costs["tokens"] {
		t.Fatalf("resubmit: %+v %v", p2, err)
	}
}

// subsetSum reports whether some subset of xs sums to want.
func subsetSum(want int64, xs []int64) bool {
	if want == 0 {
		return true
	}
	if want < 0 || len(xs) == 0 {
		return false
	}
	return subsetSum(want-xs[0], xs[1:]) || subsetSum(want, xs[1:])
}

func TestReplayFailedItems(t *testing.T) {
	e := newEnv(t)
	e.Start()
	names := []string{"ok-1", "bad-2", "ok-3", "bad-4"}
	if _, err := e.r.Submit(e.Ctx, "b4", items(names...), Threshold{}); err != nil {
		t.Fatal(err)
	}
	if p := e.wait("b4"); p.Failed != 2 {
		t.Fatalf("progress %+v", p)
	}
	measured := e.p.measured.Load()
	e.p.broken.Store(false)
	n, err := e.r.Replay(e.Ctx, "b4")
	if err != nil || n != 2 {
		t.Fatalf("Replay: %d %v", n, err)
	}
	p := e.wait("b4")
	if p.Succeeded != 4 || p.Failed != 0 || !sameCosts(p.Costs, expectCosts(names, nil)) {
		t.Fatalf("after replay %+v", p)
	}
	if e.p.measured.Load() != measured {
		t.Fatal("replay ran a memoized phase again")
	}
	if n, err := e.r.Replay(e.Ctx, "b4"); err != nil || n != 0 {
		t.Fatalf("second Replay: %d %v", n, err)
	}
}

func TestSubmitIdempotent(t *testing.T) {
	e := newEnv(t)
	names := items("x", "y", "z")
	if _, err := e.r.Submit(e.Ctx, "b5", names, Threshold{}); err != nil {
		t.Fatal(err)
	}
	st, _ := e.Q.Stats(e.Ctx, DefaultQueueName)
	if _, err := e.r.Submit(e.Ctx, "b5", names, Threshold{}); err != nil {
		t.Fatal(err)
	}
	if st2, _ := e.Q.Stats(e.Ctx, DefaultQueueName); st2 != st || st.Pending != 3 {
		t.Fatalf("resubmission enqueued: %+v -> %+v", st, st2)
	}
	if _, err := e.r.Submit(e.Ctx, "b5", items("x", "Y", "z"), Threshold{}); !errors.Is(err, ErrInputMismatch) {
		t.Fatalf("changed item: %v", err)
	}
	if _, err := e.r.Submit(e.Ctx, "b5", items("x"), Threshold{}); !errors.Is(err, ErrBatchMismatch) {
		t.Fatalf("changed count: %v", err)
	}
	for _, bad := range []string{"", "a.b", "a/b", strings.Repeat("x", 49)} {
		if _, err := e.r.Submit(e.Ctx, bad, names, Threshold{}); !errors.Is(err, ErrInvalidBatch) {
			t.Fatalf("batch id %q: %v", bad, err)
		}
	}
	if _, err := e.r.Submit(e.Ctx, "b6", names, Threshold{MaxFailedRatio: 2}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("bad threshold: %v", err)
	}
	if _, err := e.r.Progress(e.Ctx, "nope"); !errors.Is(err, ErrBatchNotFound) {
		t.Fatalf("unknown batch: %v", err)
	}
}

// The process is dropped without Close mid-batch (a second queue fences
// it), a new one opens on the same store, and the batch finishes with
// exact totals.
func TestResumeAfterAbruptStop(t *testing.T) {
	e := newEnv(t, WithConcurrency(2))
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("item-%02d", i))
	}
	e.Start()
	if _, err := e.r.Submit(e.Ctx, "b7", items(names[:25]...), Threshold{}); err != nil {
		t.Fatal(err)
	}
	// Wait until some items finished, then drop everything.
	var p Progress
	e.Until(func() bool {
		var err error
		if p, err = e.r.Progress(e.Ctx, "b7"); err != nil {
			t.Fatal(err)
		}
		return p.Succeeded >= 5
	}, func() string { return fmt.Sprintf("fewer than 5 items succeeded: %+v", p) })
	old := e.W
	e.W, e.Q = nil, nil // no Close: the old queue keeps running until fenced
	e.Open()
	_ = old.Shutdown(e.Ctx) // fenced: it stops with an error or nothing left to do
	e.Start()
	if _, err := e.r.Submit(e.Ctx, "b7", items(names[:25]...), Threshold{}); err != nil {
		t.Fatalf("resubmit after restart: %v", err)
	}
	p = e.wait("b7")
	if p.Total != 25 || p.Succeeded != 25 || !sameCosts(p.Costs, expectCosts(names[:25], nil)) {
		t.Fatalf("after resume %+v", p)
	}
}

func FuzzDecodeRecords(f *testing.F) {
	for _, v := range []any{
		&metaRecord{Total: 3, Threshold: Threshold{MaxFailed: 1, MaxFailedRatio: 0.5, MinFinished: 2}, Stopped: true, StopReason: "r", CreatedMs: 9},
		&itemRecord{Gen: 2, Status: Failed, Input: []byte("in"), Costs: map[string]int64{"t": 3}, Error: "e", Attempts: 3},
		&itemRecord{Gen: 1, Status: Succeeded, Output: []byte(`"x"`), OutInMem: true},
		&phaseMemo{Out: []byte("o"), Costs: map[string]int64{"a": -1}},
	} {
		b, err := encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'g', 0xc0})
	for _, b := range hostileRecords {
		f.Add(b)
	}
	golden.AddCorpus(f, "testdata/golden/*.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		allocbound.Check(t, 3*len(b), func() {
			_, _ = decodeMeta(b)
			_, _ = decodeItem(b)
			var pm phaseMemo
			_ = decode("phase memo", b, &pm)
		})
		if m, err := decodeMeta(b); err == nil {
			if m.Total < 0 || m.Threshold.validate() != nil {
				t.Fatalf("accepted meta %+v", m)
			}
		} else if !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("meta error %v", err)
		}
		if r, err := decodeItem(b); err == nil {
			if r.Gen < 1 || r.Status > Cancelled {
				t.Fatalf("accepted item %+v", r)
			}
		} else if !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("item error %v", err)
		}
	})
}
