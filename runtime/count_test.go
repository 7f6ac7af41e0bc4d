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
// states. (ListRuns given States lists the older sealed entry of an id
// whose newer entry it filters out, so the filter is applied here.)
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
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), recordingRunner{}, Options{Sealing: &SealOptions{BatchRuns: 32, CacheSegments: 2},
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
