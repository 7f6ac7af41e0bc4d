package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/archive"
	"github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// recordingRunner runs three steps, each writing one history record under
// app/hist/<run>/, and fails runs whose input is "fail".
type recordingRunner struct{}

func (recordingRunner) RunRecordPrefixes(runID string) []string {
	return []string{"app/hist/" + runID + "/"}
}

func (recordingRunner) RunStep(_ context.Context, s *Step) (StepOutcome, error) {
	if err := s.Effects.Put(fmt.Sprintf("app/hist/%s/%d", s.RunID, s.Number), []byte(fmt.Sprintf("step %d of %s", s.Number, s.Payload))); err != nil {
		return StepOutcome{}, err
	}
	switch {
	case s.Number < 2:
		return ContinueNow(s.Payload), nil
	case string(s.Payload) == "fail":
		return Fail("failed on purpose"), nil
	}
	return Succeed([]byte("result of " + s.RunID)), nil
}

// sealEnv runs n runs to their end on store and waits until every one is
// handed to the sealer.
func sealEnv(t *testing.T, store objstore.Store, n int, opts ...Options) *env {
	t.Helper()
	o := oneOptions(t, opts)
	if o.Sealing == nil {
		o.Sealing = &SealOptions{BatchRuns: 4, CacheSegments: 2, Delay: -1}
	}
	if o.ResultRetention == 0 {
		o.ResultRetention = time.Hour
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = 24 * time.Hour
	}
	e := newEnvCfg(t, store, defaultQueueConfig(), recordingRunner{}, o)
	startSwept(t, e)
	for i := range n {
		in := "ok"
		if i%3 == 2 {
			in = "fail"
		}
		e.submit(RunSpec{RunID: fmt.Sprintf("run-%02d", i), Input: []byte(in), Labels: map[string]string{"parity": fmt.Sprint(i % 2)}})
	}
	waitKV(t, e, kvSealQ, n)
	return e
}

// startSwept starts the worker and returns once its first retention
// sweep, which runs as it starts and seals every run finished by then, is
// done: a run submitted before it ended could be sealed by it alone when
// the machine was slow, and the tests seal their runs themselves.
func startSwept(t *testing.T, e *env) {
	t.Helper()
	swept := make(chan struct{})
	var once sync.Once
	e.rt.afterSweep = func() { once.Do(func() { close(swept) }) }
	e.start()
	select {
	case <-swept:
	case <-e.ctx.Done():
		t.Fatal("the worker's first retention sweep never ran")
	}
}

// waitKV waits until prefix holds want entries: the notification's
// acknowledgement that writes a seal marker commits after the hook ran.
func waitKV(t *testing.T, e *env, prefix string, want int) {
	t.Helper()
	for {
		page, err := e.q.KVScan(e.ctx, prefix, "", 10000)
		if err == nil && len(page) == want {
			return
		}
		if e.ctx.Err() != nil {
			t.Fatalf("%s holds %d entries (err %v), want %d", prefix, len(page), err, want)
		}
		yield()
	}
}

// snapshot is what a reader sees of every run.
func snapshot(t *testing.T, e *env, ids []string) (map[string]runstate.Status, string) {
	t.Helper()
	out := map[string]runstate.Status{}
	for _, id := range ids {
		st, err := e.rt.Status(e.ctx, id)
		if err != nil {
			t.Fatalf("Status(%s): %v", id, err)
		}
		out[id] = st
	}
	return out, listString(t, e.rt.Inspector(), runstate.ListOptions{Limit: 1000})
}

func runIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%02d", i)
	}
	return ids
}

func TestSealedRunsReadAsBefore(t *testing.T) {
	const n = 10
	store := mem.New()
	e := sealEnv(t, store, n)
	ids := runIDs(n)
	before, beforeList := snapshot(t, e, ids)
	if before["run-00"].Totals == nil || before["run-02"].State != runstate.StateFailed {
		t.Fatalf("unexpected statuses before sealing: %+v %+v", before["run-00"], before["run-02"])
	}

	res, err := e.rt.Sweep(e.ctx)
	if err != nil || res.Sealed != n {
		t.Fatalf("Sweep: %+v %v; want %d sealed", res, err, n)
	}
	for _, p := range []string{kvResults, kvTotals, kvExpiry, kvSealQ, "app/hist/"} {
		if page, _ := e.q.KVScan(e.ctx, p, "", 100); len(page) != 0 {
			t.Errorf("after sealing the KV still holds %d entries under %s", len(page), p)
		}
	}
	// Nothing per run stays in the KV: the catalog rows find the runs.
	all, err := e.q.KVScan(e.ctx, "", "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all {
		if !strings.HasPrefix(kv.Key, kvSealedSegs) && kv.Key != kvSealNext && kv.Key != kvSealGen {
			t.Errorf("after sealing the KV holds %s", kv.Key)
		}
	}
	segs, _ := store.List(e.ctx, defaultSealPrefix, "", 100)
	if len(segs) != 6 { // 10 runs in segments of 4: 3 segments, 2 objects each
		t.Fatalf("sealed objects: %d, want 6", len(segs))
	}
	check := func(when string) {
		t.Helper()
		after, afterList := snapshot(t, e, ids)
		if afterList != beforeList {
			t.Errorf("%s: ListRuns = %q, want %q", when, afterList, beforeList)
		}
		for _, id := range ids {
			if !reflect.DeepEqual(after[id], before[id]) {
				t.Errorf("%s: Status(%s) = %+v, want %+v", when, id, after[id], before[id])
			}
		}
		if got := listString(t, e.rt.Inspector(), runstate.ListOptions{Labels: map[string]string{"parity": "1"}, States: []runstate.State{runstate.StateFailed}}); got != "run-05:failed" {
			t.Errorf("%s: failed runs of parity 1: %q", when, got)
		}
		if got := listString(t, e.rt.Inspector(), runstate.ListOptions{After: "run-07", Limit: 2}); got != "run-08:failed run-09:succeeded" {
			t.Errorf("%s: page after run-07: %q", when, got)
		}
		recs, ok, err := e.rt.Inspector().SealedRecords(e.ctx, "run-04", "app/hist/run-04/")
		if err != nil || !ok || len(recs) != 3 || string(recs[2].Value) != "step 2 of ok" {
			t.Errorf("%s: SealedRecords(run-04) = %v %v %v", when, recs, ok, err)
		}
	}
	check("sealed")
	e.reopen()
	check("reopened")

	// A run id is free again once its run ended: the new run is listed,
	// not the sealed one.
	startSwept(t, e)
	e.clock.Advance(30 * time.Minute)
	e.submit(RunSpec{RunID: "run-01", Input: []byte("again")})
	if st := e.waitRun("run-01", inState(runstate.StateSucceeded)); string(st.Result) != "result of run-01" || st.Step != 2 || st.Labels != nil {
		t.Fatalf("rerun status %+v", st)
	}
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{Limit: 3}); got != "run-00:succeeded run-01:succeeded run-02:failed" {
		t.Fatalf("ListRuns with a rerun: %q", got)
	}

	// Retention: a segment goes when its newest run expires, objects and
	// rows with it.
	waitKV(t, e, kvSealQ, 1)
	e.clock.Advance(31 * time.Minute)
	res, err = e.rt.Sweep(e.ctx)
	if err != nil || res.SealedExpired != n || res.Sealed != 1 {
		t.Fatalf("Sweep after the retention: %+v %v", res, err)
	}
	for _, id := range ids {
		if id == "run-01" {
			continue
		}
		if _, err := e.rt.Status(e.ctx, id); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("expired sealed run %s: %v", id, err)
		}
	}
	if st := e.status("run-01"); st.State != runstate.StateSucceeded {
		t.Fatalf("the rerun sealed after the expiry: %+v", st)
	}
	segs, _ = store.List(e.ctx, defaultSealPrefix, "", 100)
	if len(segs) != 2 {
		t.Fatalf("sealed objects after expiry: %v, want the rerun's segment only", segs)
	}
	if page, _ := e.q.KVScan(e.ctx, kvLabels, "", 100); len(page) != 0 {
		t.Fatalf("label entries of expired runs left: %v", page)
	}
}

// memoRunner is recordingRunner that also writes a run memo entry.
type memoRunner struct{ recordingRunner }

func (r memoRunner) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	if s.Number == 0 {
		if err := s.RunMemo.Put(ctx, "paid", []byte("answer")); err != nil {
			return StepOutcome{}, err
		}
	}
	return r.recordingRunner.RunStep(ctx, s)
}

// Under a memo retention longer than the result retention, a sealed run
// keeps no memo marker in the KV: its segment hides its runs once their
// results expire (slim catalog entry), and when the memo retention
// passes too it clears their memo entries and goes.
func TestSealedSegmentMemoRetention(t *testing.T) {
	const n = 6
	store := mem.New()
	opts := Options{Sealing: &SealOptions{BatchRuns: 4, CacheSegments: 2, Delay: -1}, ResultRetention: time.Hour,
		MemoRetention: 3 * time.Hour, SweepInterval: 24 * time.Hour}
	e := newEnvCfg(t, store, defaultQueueConfig(), memoRunner{}, opts)
	startSwept(t, e)
	for i := range n {
		e.submit(RunSpec{RunID: fmt.Sprintf("run-%02d", i), Input: []byte("ok")})
	}
	waitKV(t, e, kvSealQ, n)
	memoObjects := func() int {
		objs, err := store.List(e.ctx, e.rt.cfg.memoPrefix, "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	if got := memoObjects(); got != n {
		t.Fatalf("memo objects before sealing: %d, want %d", got, n)
	}
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	if page, _ := e.q.KVScan(e.ctx, kvTerminals, "", 100); len(page) != 0 {
		t.Fatalf("memo markers of sealed runs left in the KV: %v", page)
	}
	e.clock.Advance(90 * time.Minute)
	res, err := e.rt.Sweep(e.ctx)
	if err != nil || res.SealedExpired != n || res.MemoRuns != 0 {
		t.Fatalf("Sweep after the result retention: %+v %v", res, err)
	}
	if _, err := e.rt.Status(e.ctx, "run-00"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("Status of a run whose result expired: %v", err)
	}
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{}); got != "" {
		t.Fatalf("ListRuns after the result retention: %q", got)
	}
	if got := memoObjects(); got != n {
		t.Fatalf("memo objects within the memo retention: %d, want %d", got, n)
	}
	e.clock.Advance(2 * time.Hour)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.SealedExpired != 0 {
		t.Fatalf("Sweep after the memo retention: %+v %v", res, err)
	}
	if got := memoObjects(); got != 0 {
		t.Fatalf("memo objects after the memo retention: %d, want 0", got)
	}
	if segs, _ := store.List(e.ctx, defaultSealPrefix, "", 100); len(segs) != 0 {
		t.Fatalf("sealed objects after the memo retention: %v", segs)
	}
	if page, _ := e.q.KVScan(e.ctx, kvSealedSegs, "", 100); len(page) != 0 {
		t.Fatalf("catalog rows after the memo retention: %v", page)
	}
}

// A seal interrupted at any point (a write failing, a lost response, the
// process gone before its commit) leaves every run readable exactly once,
// and a later pass seals it and deletes what the interrupted one left.
func TestSealInterruptedAnywhereLeavesEveryRunOnce(t *testing.T) {
	const n = 6
	cases := []struct {
		name string
		rule faults.Rule
		kill bool // the process dies between the objects and the commit
	}{
		{name: "data object write fails", rule: faults.Rule{Ops: faults.OpPut, KeyPrefix: defaultSealPrefix, Nth: 1}},
		{name: "index object write fails", rule: faults.Rule{Ops: faults.OpPut, KeyPrefix: defaultSealPrefix, Nth: 2}},
		{name: "index object torn", rule: faults.Rule{Ops: faults.OpPut, KeyPrefix: defaultSealPrefix, Nth: 2, TornWrite: true}},
		{name: "index write response lost", rule: faults.Rule{Ops: faults.OpPut, KeyPrefix: defaultSealPrefix, Nth: 2, LoseResponse: true}},
		{name: "killed before the commit", kill: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := faults.New(mem.New(), 1)
			e := sealEnv(t, fs, n, Options{TerminalHook: noopTerminalHook{}})
			ids := runIDs(n)
			before, beforeList := snapshot(t, e, ids)
			e.stop()
			if c.kill {
				// Gone before the commit: no cleanup either.
				e.rt.beforeSealCommit = func(string) {
					fs.Set(faults.Rule{Ops: faults.OpDelete, KeyPrefix: defaultSealPrefix, Rate: 1})
					_ = e.q.Close()
				}
			} else {
				fs.Set(c.rule)
			}
			if _, err := e.rt.Seal(e.ctx); err == nil {
				t.Fatal("the interrupted seal reported success")
			}
			fs.Clear()
			e.reopen()
			after, afterList := snapshot(t, e, ids)
			if afterList != beforeList || !reflect.DeepEqual(after, before) {
				t.Fatalf("after the interrupted seal: %q, want %q", afterList, beforeList)
			}
			sealed, err := e.rt.Seal(e.ctx)
			if err != nil || sealed != n {
				t.Fatalf("Seal after reopening: %d %v", sealed, err)
			}
			after, afterList = snapshot(t, e, ids)
			if afterList != beforeList || !reflect.DeepEqual(after, before) {
				t.Fatalf("after sealing: %q, want %q", afterList, beforeList)
			}
			objs, _ := fs.List(e.ctx, defaultSealPrefix, "", 100)
			var names []string
			for _, o := range objs {
				names = append(names, o.Key)
			}
			if len(objs) != 4 { // 6 runs in segments of 4: 2 segments
				t.Fatalf("sealed objects %v: want the 2 segments' only", strings.Join(names, " "))
			}
		})
	}
}

// A segment expiry interrupted by a failed DELETE (of a memo object while
// its runs' memo entries are cleared, or of a segment object after the
// commit) loses nothing and leaves nothing behind: the next pass clears
// the memo entries again, and the next process's first seal pass
// deletes the objects no catalog row names.
func TestSegmentExpiryInterrupted(t *testing.T) {
	const n = 6
	cases := []struct {
		name string
		rule faults.Rule
	}{
		{name: "memo object delete fails", rule: faults.Rule{Ops: faults.OpDelete, KeyPrefix: memo.DefaultPrefix, Nth: 3}},
		{name: "segment object delete fails", rule: faults.Rule{Ops: faults.OpDelete, KeyPrefix: defaultSealPrefix, Nth: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := faults.New(mem.New(), 1)
			e := newEnvCfg(t, fs, defaultQueueConfig(), memoRunner{}, Options{Sealing: &SealOptions{BatchRuns: 4, Delay: -1},
				ResultRetention: time.Hour, MemoRetention: 2 * time.Hour, SweepInterval: 24 * time.Hour})
			startSwept(t, e)
			for i := range n {
				e.submit(RunSpec{RunID: fmt.Sprintf("run-%02d", i), Input: []byte("ok")})
			}
			waitKV(t, e, kvSealQ, n)
			if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
				t.Fatalf("Sweep: %+v %v", res, err)
			}
			e.clock.Advance(3 * time.Hour)
			fs.Set(c.rule)
			_, err := e.rt.Sweep(e.ctx)
			fs.Clear()
			if c.rule.KeyPrefix == memo.DefaultPrefix && err == nil {
				t.Fatal("the interrupted expiry reported success")
			}
			if _, err := e.rt.Sweep(e.ctx); err != nil {
				t.Fatalf("Sweep after the failure: %v", err)
			}
			e.reopen()
			if _, err := e.rt.Seal(e.ctx); err != nil {
				t.Fatalf("first seal pass after reopening: %v", err)
			}
			for _, p := range []string{memo.DefaultPrefix, defaultSealPrefix} {
				if objs, _ := fs.List(e.ctx, p, "", 100); len(objs) != 0 {
					t.Errorf("objects left under %s: %d", p, len(objs))
				}
			}
			if page, _ := e.q.KVScan(e.ctx, kvSealedSegs, "", 100); len(page) != 0 {
				t.Errorf("catalog rows left: %d", len(page))
			}
			for _, id := range runIDs(n) {
				if _, err := e.rt.Status(e.ctx, id); !errors.Is(err, ErrRunNotFound) {
					t.Errorf("Status(%s) after the expiry: %v", id, err)
				}
			}
		})
	}
}

// pagesString lists every run through pages of size, following the
// cursor.
func pagesString(t *testing.T, in *Inspector, opts runstate.ListOptions, size int) string {
	t.Helper()
	var all []string
	opts.Limit = size
	for {
		runs, err := in.ListRuns(context.Background(), opts)
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		for _, r := range runs {
			all = append(all, fmt.Sprintf("%s:%s", r.RunID, r.State))
		}
		if len(runs) < size {
			return strings.Join(all, " ")
		}
		opts.After = runs[len(runs)-1].RunID
	}
}

// Segments whose id ranges overlap (ids not in submission order) list
// the same runs in the same order as before sealing, page by page, with
// and without state and label filters.
func TestSealedListingAcrossOverlappingSegments(t *testing.T) {
	const n = 23
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), recordingRunner{}, Options{Sealing: &SealOptions{BatchRuns: 4, CacheSegments: 2, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	startSwept(t, e)
	for i := range n {
		id := (i * 7) % n // a permutation: segments interleave in id order
		in := "ok"
		if id%3 == 0 {
			in = "fail"
		}
		e.submit(RunSpec{RunID: fmt.Sprintf("run-%02d", id), Input: []byte(in), Labels: map[string]string{"mod": fmt.Sprint(id % 4)}})
		e.waitRun(fmt.Sprintf("run-%02d", id), func(st runstate.Status) bool { return st.State.Terminal() })
	}
	waitKV(t, e, kvSealQ, n)
	views := []runstate.ListOptions{
		{},
		{States: []runstate.State{runstate.StateFailed}},
		{Labels: map[string]string{"mod": "1"}},
		{Labels: map[string]string{"mod": "2"}, States: []runstate.State{runstate.StateSucceeded}},
	}
	var before []string
	for _, v := range views {
		before = append(before, pagesString(t, e.rt.Inspector(), v, 3))
	}
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	for i, v := range views {
		for _, size := range []int{1, 3, 100} {
			if got := pagesString(t, e.rt.Inspector(), v, size); got != before[i] {
				t.Errorf("%+v in pages of %d after sealing:\n got %s\nwant %s", v, size, got, before[i])
			}
		}
	}
	if !strings.Contains(before[1], "run-03:failed") || strings.Contains(before[1], "succeeded") || len(strings.Fields(before[0])) != n {
		t.Fatalf("unexpected listings before sealing: %q", before)
	}
}

// A store sealed by an earlier build kept a row and label index entries
// per sealed run in the KV: such runs read the same (the catalog rows
// carry the same hashes), are listed once, and their expiry deletes the
// rows and entries.
func TestSealedByEarlierBuild(t *testing.T) {
	const n = 6
	store := mem.New()
	e := sealEnv(t, store, n)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	segs, err := e.rt.insp.catalog().catalog(e.ctx, e.q)
	if err != nil {
		t.Fatal(err)
	}
	// What the earlier build wrote beside the catalog rows.
	for _, m := range segs {
		x, err := e.rt.insp.segments.index(e.ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		for i := range x.Entries {
			en := &x.Entries[i]
			row, err := encodeRecord(&sealedRow{Nonce: en.Nonce, Seq: m.Seq, State: runstate.TerminalStatus(en.Status)})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.q.KVPut(e.ctx, sealedRunKey(en.ID), row); err != nil {
				t.Fatal(err)
			}
			for _, w := range labelWrites(en.Labels, en.ID, en.Nonce) {
				if err := e.q.KVPut(e.ctx, w.Key, w.Value); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	e.reopen()
	want := "run-01:succeeded run-03:succeeded run-05:failed"
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{Labels: map[string]string{"parity": "1"}}); got != want {
		t.Fatalf("labelled listing: %q, want %q", got, want)
	}
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{}); len(strings.Fields(got)) != n {
		t.Fatalf("listing: %q, want %d runs once each", got, n)
	}
	if st, err := e.rt.Status(e.ctx, "run-04"); err != nil || st.State != runstate.StateSucceeded {
		t.Fatalf("Status(run-04) = %+v, %v", st, err)
	}
	e.clock.Advance(2 * time.Hour)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.SealedExpired != n {
		t.Fatalf("Sweep after the retention: %+v %v", res, err)
	}
	for _, p := range []string{kvSealedRuns, kvLabels, kvSealedSegs} {
		if page, _ := e.q.KVScan(e.ctx, p, "", 100); len(page) != 0 {
			t.Errorf("left under %s after the expiry: %d entries", p, len(page))
		}
	}
}

// A seal whose context is cancelled (the process shutting down) while it
// writes its objects logs no warning: leaving what it wrote to the next
// process is not a failure.
func TestSealCancelledAtShutdownLogsNoWarning(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fs := faults.New(mem.New(), 1)
	e := sealEnv(t, fs, 4, Options{TerminalHook: noopTerminalHook{}, Logger: logger})
	e.stop()
	// The index object's write hangs until the shutdown cancels it.
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: defaultSealPrefix, Nth: 2, Hang: true})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.rt.Seal(ctx)
		done <- err
	}()
	if err := fs.WaitInjected(e.ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled seal reported success")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a seal cancelled at shutdown logged a warning:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestSealLoopSealsAsRunsEnd: with the default seal delay, Run seals
// finished runs without a retention sweep, at once when BatchRuns runs
// ended, and Delay after the first end for fewer.
func TestSealLoopSealsAsRunsEnd(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), recordingRunner{}, Options{Sealing: &SealOptions{BatchRuns: 4, CacheSegments: 2},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	waits := make(chan struct{}, 1)
	e.rt.sealWaits = func() {
		select {
		case waits <- struct{}{}:
		default:
		}
	}
	startSwept(t, e)
	// sealedAll waits until segments hold n runs, then checks that no
	// seal marker is left and that the runs' records left the KV.
	sealedAll := func(n int) {
		t.Helper()
		for sealedRuns(t, e) != n {
			if e.ctx.Err() != nil {
				t.Fatalf("segments hold %d runs, want %d", sealedRuns(t, e), n)
			}
			yield()
		}
		if page, err := e.q.KVScan(e.ctx, kvSealQ, "", 10); err != nil || len(page) != 0 {
			t.Fatalf("%d seal markers left (%v) with every run sealed", len(page), err)
		}
		for _, id := range runIDs(n) {
			if page, err := e.q.KVScan(e.ctx, "app/hist/"+id+"/", "", 10); err != nil || len(page) != 0 {
				t.Fatalf("%s keeps %d records in the KV (%v) after it was sealed", id, len(page), err)
			}
		}
	}
	for i := range 4 {
		e.submit(RunSpec{RunID: fmt.Sprintf("run-%02d", i), Input: []byte("ok")})
	}
	sealedAll(4) // BatchRuns ended: no clock advance needed

	// One run, fewer than BatchRuns: sealed once the delay passed.
	select { // a wait of the first batch's
	case <-waits:
	default:
	}
	e.submit(RunSpec{RunID: "run-04", Input: []byte("ok")})
	waitKV(t, e, kvSealQ, 1)
	select {
	case <-waits:
	case <-e.ctx.Done():
		t.Fatal("the seal loop never waited for the delay of run-04")
	}
	if page, err := e.q.KVScan(e.ctx, kvSealQ, "", 10); err != nil || len(page) != 1 {
		t.Fatalf("run-04 was sealed before its delay passed: %d markers, %v", len(page), err)
	}
	e.clock.Advance(defaultSealDelay)
	sealedAll(5)
	for _, id := range runIDs(5) {
		st, err := e.rt.Status(e.ctx, id)
		if err != nil || st.State != runstate.StateSucceeded || string(st.Result) != "result of "+id {
			t.Fatalf("Status(%s) = %+v, %v", id, st, err)
		}
	}
}

// sealedRuns counts the runs of every catalog row.
func sealedRuns(t *testing.T, e *env) int {
	t.Helper()
	rows, err := e.q.KVScan(e.ctx, kvSealedSegs, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, r := range rows {
		m, err := archive.DecodeMeta(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		runs += m.Runs
	}
	return runs
}

// expiringRunner is a recordingRunner that also keeps something of each
// run outside the KV: ExpireRunRecords notes the run and whether its
// status was still shown then (it must be: its records go first).
type expiringRunner struct {
	recordingRunner
	rt      *Runtime
	mu      sync.Mutex
	expired []string
}

func (r *expiringRunner) ExpireRunRecords(ctx context.Context, runID string, finished time.Time) error {
	_, err := r.rt.Status(ctx, runID)
	shown := err == nil
	if err != nil && !errors.Is(err, ErrRunNotFound) {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expired = append(r.expired, fmt.Sprintf("%s@%s shown=%v", runID, finished.Sub(t0), shown))
	return nil
}

func (r *expiringRunner) calls() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.expired, " ")
}

// kvCount is how many KV entries lie under prefix.
func kvCount(t *testing.T, e *env, prefix string) int {
	t.Helper()
	page, err := e.q.KVScan(e.ctx, prefix, "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	return len(page)
}

// wantGone checks that nothing of run id is left: no status, no runner
// records, no retention or seal marker of it.
func wantGone(t *testing.T, e *env, id string) {
	t.Helper()
	if st, err := e.rt.Status(e.ctx, id); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("Status(%s) = %+v, %v; want not found", id, st, err)
	}
	if n := kvCount(t, e, "app/hist/"+id+"/"); n != 0 {
		t.Fatalf("run %s: %d runner records left", id, n)
	}
	for _, p := range []string{kvExpiry, kvSealQ, resultKey(id), totalsKey(id)} {
		page, err := e.q.KVScan(e.ctx, p, "", 10000)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range page {
			if strings.HasSuffix(kv.Key, id) {
				t.Fatalf("run %s: %s left", id, kv.Key)
			}
		}
	}
}

// A run handed to the sealer but not sealed before its result retention
// ended expires whole: the runner's records leave with its result, and
// nothing of it is sealed.
func TestRunPastRetentionBeforeSealingExpiresWhole(t *testing.T) {
	r := &expiringRunner{}
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), r, Options{ResultRetention: time.Hour, SweepInterval: 24 * time.Hour,
		Sealing: &SealOptions{BatchRuns: 4, Delay: -1}})
	r.rt = e.rt
	startSwept(t, e)
	for _, id := range runIDs(3) {
		e.submit(RunSpec{RunID: id, Input: []byte("ok"), Labels: map[string]string{"k": "v"}})
	}
	waitKV(t, e, kvSealQ, 3)
	e.stop()

	e.clock.Advance(time.Hour)
	res, err := e.rt.Sweep(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Results != 3 || res.Sealed != 0 {
		t.Fatalf("sweep past retention: %+v; want 3 results expired, none sealed", res)
	}
	for _, id := range runIDs(3) {
		wantGone(t, e, id)
	}
	if n := kvCount(t, e, kvSealedSegs); n != 0 {
		t.Fatalf("%d segments written for expired runs", n)
	}
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{Labels: map[string]string{"k": "v"}}); got != "" {
		t.Fatalf("expired runs listed by label: %s", got)
	}
	if got, want := r.calls(), "run-00@0s shown=true run-01@0s shown=true run-02@0s shown=true"; got != want {
		t.Fatalf("ExpireRunRecords calls %q; want %q", got, want)
	}
}

// A sealed run's records outside the KV go with its segment, not at the
// run's own expiry while a later run keeps the segment listed; under a
// longer memo retention, when the segment turns slim (its runs hidden),
// once.
func TestSealedRunExpiresWithItsSegment(t *testing.T) {
	for _, memoRet := range []time.Duration{0, 3 * time.Hour} {
		t.Run(fmt.Sprint("memo retention ", memoRet), func(t *testing.T) {
			r := &expiringRunner{}
			e := newEnvCfg(t, mem.New(), defaultQueueConfig(), r, Options{ResultRetention: time.Hour, MemoRetention: memoRet,
				SweepInterval: 24 * time.Hour, Sealing: &SealOptions{BatchRuns: 4, Delay: -1}})
			r.rt = e.rt
			startSwept(t, e)
			e.submit(RunSpec{RunID: "run-00", Input: []byte("ok")})
			waitKV(t, e, kvSealQ, 1)
			e.clock.Advance(30 * time.Minute)
			e.submit(RunSpec{RunID: "run-01", Input: []byte("ok")})
			waitKV(t, e, kvSealQ, 2)
			e.stop()
			if n, err := e.rt.Seal(e.ctx); err != nil || n != 2 {
				t.Fatalf("Seal = %d, %v; want both runs in one segment", n, err)
			}

			e.clock.Advance(31 * time.Minute)
			if _, err := e.rt.Sweep(e.ctx); err != nil {
				t.Fatal(err)
			}
			if st, err := e.rt.Status(e.ctx, "run-00"); err != nil || st.State != runstate.StateSucceeded {
				t.Fatalf("run-00 past its retention in a listed segment: %+v, %v", st, err)
			}
			if got := r.calls(); got != "" {
				t.Fatalf("records expired while their segment is listed: %s", got)
			}

			e.clock.Advance(30 * time.Minute)
			if res, err := e.rt.Sweep(e.ctx); err != nil || res.SealedExpired != 2 {
				t.Fatalf("sweep past the segment's retention: %+v, %v", res, err)
			}
			for _, id := range runIDs(2) {
				wantGone(t, e, id)
			}
			want := "run-00@0s shown=true run-01@30m0s shown=true"
			if got := r.calls(); got != want {
				t.Fatalf("ExpireRunRecords calls %q; want %q", got, want)
			}
			e.clock.Advance(memoRet)
			if _, err := e.rt.Sweep(e.ctx); err != nil {
				t.Fatal(err)
			}
			if n := kvCount(t, e, kvSealedSegs); n != 0 {
				t.Fatalf("%d segments left past the memo retention", n)
			}
			if got := r.calls(); got != want {
				t.Fatalf("ExpireRunRecords calls %q after the segment went; want %q", got, want)
			}
		})
	}
}

// expiredUnhandled ends run-00 while its hook fails, then expires its
// result by a sweep past the retention with the worker stopped. handle
// makes the hook succeed, restarts the worker and returns once the end is
// handled (its seal marker written, maybe swept already), with the worker
// stopped again.
func expiredUnhandled(t *testing.T) (e *env, r *expiringRunner, handle func()) {
	t.Helper()
	var failing atomic.Bool
	failing.Store(true)
	hook := TerminalHookFunc(func(context.Context, *runstate.Outcome, *TerminalEffects) error {
		if failing.Load() {
			return Transient(errors.New("not yet"))
		}
		return nil
	})
	r = &expiringRunner{}
	e = newEnvCfg(t, mem.New(), defaultQueueConfig(), r, Options{ResultRetention: time.Hour, SweepInterval: 24 * time.Hour,
		TerminalHook: hook, Sealing: &SealOptions{Delay: -1}})
	r.rt = e.rt
	startSwept(t, e)
	e.submit(RunSpec{RunID: "run-00", Input: []byte("ok")})
	for {
		if st, err := e.rt.Status(e.ctx, "run-00"); err == nil && st.State.Terminal() {
			break
		}
		if e.ctx.Err() != nil {
			t.Fatal("run-00 never ended")
		}
		yield()
	}
	e.stop()

	// The end is not handled: the result expires alone.
	e.clock.Advance(time.Hour)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Results != 1 {
		t.Fatalf("sweep past retention: %+v, %v", res, err)
	}
	if n := kvCount(t, e, "app/hist/run-00/"); n != 3 {
		t.Fatalf("%d runner records before the end is handled; want 3", n)
	}
	return e, r, func() {
		t.Helper()
		failing.Store(false)
		startSwept(t, e)
		for {
			if s, err := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); err == nil && s.Pending+s.Scheduled+s.Claimed == 0 {
				break
			}
			if e.ctx.Err() != nil {
				t.Fatal("the end of run-00 was never handled")
			}
			yield()
		}
		e.stop()
	}
}

// A run whose result expired before its end was handled (its hook kept
// failing) keeps its runner's records only until the end is handled: the
// seal marker the hook's success writes takes them with it.
func TestResultExpiredBeforeItsEndWasHandled(t *testing.T) {
	e, r, handle := expiredUnhandled(t)
	handle()
	if _, err := e.rt.Sweep(e.ctx); err != nil {
		t.Fatal(err)
	}
	wantGone(t, e, "run-00")
	if got, want := r.calls(), "run-00@0s shown=false"; got != want {
		t.Fatalf("ExpireRunRecords calls %q; want %q", got, want)
	}
}

// The late seal marker of an id a new run now holds leaves the records
// under the id alone (they are the new run's), and seals nothing stuck.
func TestLateSealMarkerKeepsANewRunsRecords(t *testing.T) {
	e, r, handle := expiredUnhandled(t)
	// A run under the id again (a record the worker does not work).
	if err := e.q.KVPut(e.ctx, runKey("run-00"), []byte("new run")); err != nil {
		t.Fatal(err)
	}
	handle()
	if _, err := e.rt.Sweep(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := kvCount(t, e, "app/hist/run-00/"); n != 3 {
		t.Fatalf("%d records under the reused id; want 3", n)
	}
	if n := kvCount(t, e, kvSealQ); n != 0 {
		t.Fatalf("%d seal markers left", n)
	}
	if got := r.calls(); got != "" {
		t.Fatalf("ExpireRunRecords called for a reused id: %s", got)
	}
}
