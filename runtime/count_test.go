package runtime

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// scanCounter counts the run records (active and result) a StateReader
// hands out through KVScan.
type scanCounter struct {
	StateReader
	runRecords atomic.Int64
}

func (s *scanCounter) KVScan(ctx context.Context, prefix, startAfter string, limit int) ([]queue.KVEntry, error) {
	page, err := s.StateReader.KVScan(ctx, prefix, startAfter, limit)
	if prefix == kvRuns || prefix == kvResults {
		s.runRecords.Add(int64(len(page)))
	}
	return page, err
}

// listedCounts counts by state every run ListRuns lists, keeping those in
// states: the filter is applied here, so CountRuns is checked against the
// unfiltered listing.
func listedCounts(t *testing.T, in *Inspector, states []runstate.State) map[runstate.State]int {
	t.Helper()
	out := map[runstate.State]int{}
	after := ""
	for {
		page, err := in.ListRuns(context.Background(), runstate.ListOptions{After: after, Limit: 100})
		if err != nil {
			t.Fatalf("ListRuns: %v", err)
		}
		for _, st := range page {
			if stateSet(states)(st.State) {
				out[st.State]++
			}
		}
		if len(page) < 100 {
			return out
		}
		after = page[len(page)-1].RunID
	}
}

// CountRuns counts what ListRuns lists, sealed and unsealed runs and ids
// reused after sealing among them, and visits only the runs still in the
// KV.
func TestCountRunsMatchesListingWithoutVisitingSealedRuns(t *testing.T) {
	const sealed, reused, unsealed = 600, 7, 40
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), recordingRunner{}, Options{Sealing: &SealOptions{BatchRuns: 32, CacheSegments: 2, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	startSwept(t, e)
	run := func(id, in string) {
		e.submit(RunSpec{RunID: id, Input: []byte(in)})
		e.waitRun(id, func(st runstate.Status) bool { return st.State.Terminal() })
	}
	for i := range sealed {
		in := "ok"
		if i%3 == 2 {
			in = "fail"
		}
		run(fmt.Sprintf("run-%04d", i), in)
	}
	waitKV(t, e, kvSealQ, sealed)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != sealed {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	// Ids run again after sealing, their new ends sealed in a newer
	// segment with another state: the older entries are hidden.
	for i := range reused {
		run(fmt.Sprintf("run-%04d", 3*i), "fail")
	}
	waitKV(t, e, kvSealQ, reused)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != reused {
		t.Fatalf("Sweep of the reused ids: %+v %v", res, err)
	}
	// Unsealed: finished in the KV, one of them reusing a sealed id.
	for i := range unsealed {
		run(fmt.Sprintf("new-%04d", i), "ok")
	}
	run("run-0001", "fail")

	r := &scanCounter{StateReader: e.q}
	in := NewArchiveInspector(r, e.store, SealOptions{CacheSegments: 2})
	for _, states := range [][]runstate.State{nil, {runstate.StateFailed}, {runstate.StateSucceeded, runstate.StatePending}} {
		want := listedCounts(t, in, states)
		r.runRecords.Store(0)
		got, err := in.CountRuns(e.ctx, runstate.ListOptions{States: states})
		if err != nil {
			t.Fatalf("CountRuns(%v): %v", states, err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("CountRuns(%v) = %v, ListRuns counts %v", states, got, want)
		}
		if n := r.runRecords.Load(); n != unsealed+1 {
			t.Errorf("CountRuns(%v) read %d run records from the KV, want the %d unsealed", states, n, unsealed+1)
		}
	}
	all, err := in.CountRuns(e.ctx, runstate.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Of the 400 sealed successes, 7 ids failed on their second run and
	// run-0001 in the KV; the 40 new runs succeeded.
	if want := map[runstate.State]int{runstate.StateSucceeded: 400 - reused - 1 + unsealed, runstate.StateFailed: 200 + reused + 1}; !maps.Equal(all, want) {
		t.Errorf("CountRuns = %v, want %v", all, want)
	}
	if _, err := in.CountRuns(e.ctx, runstate.ListOptions{Labels: map[string]string{"a": "b"}}); err == nil || !strings.Contains(err.Error(), "by label") {
		t.Errorf("CountRuns with labels: err %v, want a refusal", err)
	}
}

// readCounter counts a StateReader's point reads of run-keyed records
// (run, pointer, cancel, result) and of whole job records.
type readCounter struct {
	StateReader
	runGets, jobs atomic.Int64
}

func (r *readCounter) KVGet(ctx context.Context, key string) ([]byte, error) {
	for _, p := range []string{kvRuns, kvSteps, kvCancel, kvResults} {
		if strings.HasPrefix(key, p) {
			r.runGets.Add(1)
		}
	}
	return r.StateReader.KVGet(ctx, key)
}

func (r *readCounter) GetJob(ctx context.Context, id string) (queue.Job, error) {
	r.jobs.Add(1)
	return r.StateReader.GetJob(ctx, id)
}

// CountRuns counts active runs in every state ListRuns shows them in
// (waiting, scheduled, running, cancelling, pending) and unsealed ended
// ones without a point read per run: the step pointers and cancels come
// from scans beside the run records, and of each live job only its state
// and signal header (JobState), not the record GetJob decodes.
func TestCountRunsReadsNoJobRecordPerActiveRun(t *testing.T) {
	hold := newGate(t)
	runner := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		switch id := s.RunID; {
		case strings.HasPrefix(id, "wait-"):
			return ContinueOnSignal(nil, "sig-"+id, 24*time.Hour), nil
		case strings.HasPrefix(id, "sleep-"):
			return ContinueAfter(nil, 24*time.Hour), nil
		case strings.HasPrefix(id, "hold-"):
			hold.entered <- s
			<-hold.release
			return Succeed(nil), nil
		case strings.HasPrefix(id, "fail-"):
			return Fail("no"), nil
		}
		return Succeed(nil), nil
	})
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), runner, Options{Concurrency: 2, ResultRetention: time.Hour})
	e.start()
	const waiting, sleeping, ended = 30, 20, 10
	for i := range waiting {
		e.submit(RunSpec{RunID: fmt.Sprintf("wait-%03d", i)})
	}
	for i := range sleeping {
		e.submit(RunSpec{RunID: fmt.Sprintf("sleep-%03d", i)})
	}
	for i := range ended {
		e.submit(RunSpec{RunID: fmt.Sprintf("done-%03d", i)})
		e.submit(RunSpec{RunID: fmt.Sprintf("fail-%03d", i)})
	}
	for i := range waiting {
		e.waitRun(fmt.Sprintf("wait-%03d", i), inState(runstate.StateWaiting))
	}
	for i := range sleeping {
		e.waitRun(fmt.Sprintf("sleep-%03d", i), inState(runstate.StateScheduled))
	}
	for i := range ended {
		e.waitRun(fmt.Sprintf("done-%03d", i), inState(runstate.StateSucceeded))
		e.waitRun(fmt.Sprintf("fail-%03d", i), inState(runstate.StateFailed))
	}
	// Both runners held, then more runs stay pending behind them.
	e.submit(RunSpec{RunID: "hold-0"})
	e.submit(RunSpec{RunID: "hold-1"})
	<-hold.entered
	<-hold.entered
	if _, err := e.rt.Cancel(e.ctx, "hold-1"); err != nil {
		t.Fatal(err)
	}
	e.submit(RunSpec{RunID: "pend-0"})
	e.submit(RunSpec{RunID: "pend-1"})
	// A cancel of a waiting run ends it at once; of a sleeping one too.
	if _, err := e.rt.Cancel(e.ctx, "wait-000"); err != nil {
		t.Fatal(err)
	}
	e.waitRun("wait-000", inState(runstate.StateCancelled))
	e.waitRun("hold-1", inState(runstate.StateCancelling))

	r := &readCounter{StateReader: e.q}
	in := NewArchiveInspector(r, e.store, SealOptions{})
	want := map[runstate.State]int{
		runstate.StateWaiting: waiting - 1, runstate.StateScheduled: sleeping, runstate.StateRunning: 1,
		runstate.StateCancelling: 1, runstate.StatePending: 2, runstate.StateCancelled: 1,
		runstate.StateSucceeded: ended, runstate.StateFailed: ended,
	}
	if got := listedCounts(t, in, nil); !maps.Equal(got, want) {
		t.Fatalf("ListRuns counts %v, want %v", got, want)
	}
	for _, states := range [][]runstate.State{nil, {runstate.StateWaiting, runstate.StateCancelling}, {runstate.StatePending, runstate.StateSucceeded}} {
		wantSt := listedCounts(t, in, states)
		r.runGets.Store(0)
		r.jobs.Store(0)
		got, err := in.CountRuns(e.ctx, runstate.ListOptions{States: states})
		if err != nil {
			t.Fatalf("CountRuns(%v): %v", states, err)
		}
		if !maps.Equal(got, wantSt) {
			t.Errorf("CountRuns(%v) = %v, ListRuns counts %v", states, got, wantSt)
		}
		if n, j := r.runGets.Load(), r.jobs.Load(); n != 0 || j != 0 {
			t.Errorf("CountRuns(%v) read %d run-keyed records and %d job records one by one, want none (%d runs active)", states, n, j, waiting+sleeping+3)
		}
	}
	hold.open()
}

// BenchmarkCountRunsWaiting counts 10,000 waiting runs (half on signals,
// half on timers) on the writer: the part of GET /v1/runs that grows
// with the active runs.
func BenchmarkCountRunsWaiting(b *testing.B) {
	const n = 10_000
	e := newEnvCfg(b, mem.New(), defaultQueueConfig(), waitingRunner(), Options{TerminalHook: noopTerminalHook{}, Concurrency: 32})
	e.start()
	parkRuns(b, e, n)
	for b.Loop() {
		c, err := e.rt.Inspector().CountRuns(e.ctx, runstate.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if c[runstate.StateWaiting]+c[runstate.StateScheduled] != n {
			b.Fatalf("CountRuns = %v, want %d waiting or scheduled", c, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/run")
}

// CountRuns while runs are submitted, step, wait, are cancelled and end
// fails on nothing (the race detector watches its scans beside the
// writer), and once they settle counts what ListRuns lists.
func TestCountRunsWhileRunsChange(t *testing.T) {
	runner := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		switch {
		case s.Number < 2:
			return ContinueNow(nil), nil
		case s.RunID[len(s.RunID)-1]%3 == 0:
			return ContinueOnSignal(nil, "sig-"+s.RunID, 24*time.Hour), nil
		case s.RunID[len(s.RunID)-1]%3 == 1:
			return Fail("no"), nil
		}
		return Succeed(nil), nil
	})
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), runner, Options{Concurrency: 8, ResultRetention: time.Hour})
	e.start()
	n := 300
	if raceEnabled {
		n = 120
	}
	done := make(chan struct{})
	counted := make(chan error, 1)
	go func() {
		defer close(counted)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := e.rt.Inspector().CountRuns(e.ctx, runstate.ListOptions{}); err != nil {
				counted <- err
				return
			}
		}
	}()
	for i := range n {
		e.submit(RunSpec{RunID: fmt.Sprintf("r-%04d", i)})
	}
	// Cancels while the other runs still step, some racing their run's
	// end (TestCancelRacingTheRunsEnd).
	for i := range n {
		id := fmt.Sprintf("r-%04d", i)
		if i%2 == 0 {
			if _, err := e.rt.Cancel(e.ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	if err := <-counted; err != nil {
		t.Fatalf("CountRuns during the runs: %v", err)
	}
	// The two counts compared below are taken apart, so they agree only
	// once no run moves between them: every run waits or has ended.
	for i := range n {
		e.waitRun(fmt.Sprintf("r-%04d", i), func(st runstate.Status) bool {
			return st.State.Terminal() || st.State == runstate.StateWaiting
		})
	}
	got, err := e.rt.Inspector().CountRuns(e.ctx, runstate.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := listedCounts(t, e.rt.Inspector(), nil); !maps.Equal(got, want) {
		t.Errorf("CountRuns = %v, ListRuns counts %v", got, want)
	}
	total := 0
	for _, c := range got {
		total += c
	}
	if total != n {
		t.Errorf("CountRuns counted %d runs, want %d", total, n)
	}
}
