package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// ListRuns given States lists what the unfiltered listing lists in those
// states: an id run again after sealing is listed by its newest copy, so
// an older sealed copy in a state the filter keeps is not listed when
// the newer copy (in a newer segment, or in the KV) is in another.
func TestListRunsByStateHidesOlderCopiesOfReusedIDs(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), recordingRunner{}, Options{Sealing: &SealOptions{BatchRuns: 8, CacheSegments: 2, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	startSwept(t, e)
	run := func(id, in string) {
		e.submit(RunSpec{RunID: id, Input: []byte(in)})
		e.waitRun(id, func(st runstate.Status) bool { return st.State.Terminal() })
	}
	seal := func(n int) {
		t.Helper()
		waitKV(t, e, kvSealQ, n)
		if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
			t.Fatalf("Sweep: %+v %v", res, err)
		}
	}
	const first = 40
	for i := range first {
		in := "ok"
		if i%4 == 3 {
			in = "fail"
		}
		run(fmt.Sprintf("run-%04d", i), in)
	}
	seal(first)
	// Run again and sealed in a newer segment that holds only failures
	// (its state counts rule it out of a listing of successes).
	for _, i := range []int{0, 5, 9} {
		run(fmt.Sprintf("run-%04d", i), "fail")
	}
	seal(3)
	// And one run again whose new end is still in the KV.
	run("run-0001", "fail")

	in := e.rt.Inspector()
	var all []runstate.Status
	after := ""
	for {
		page, err := in.ListRuns(e.ctx, runstate.ListOptions{After: after, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 7 {
			break
		}
		after = page[len(page)-1].RunID
	}
	if len(all) != first {
		t.Fatalf("the unfiltered listing has %d runs; want %d", len(all), first)
	}
	for _, states := range [][]runstate.State{{runstate.StateSucceeded}, {runstate.StateFailed}, {runstate.StateSucceeded, runstate.StateRunning}} {
		var want []string
		for _, st := range all {
			if slices.Contains(states, st.State) {
				want = append(want, st.RunID)
			}
		}
		var got []string
		after := ""
		for {
			page, err := in.ListRuns(e.ctx, runstate.ListOptions{States: states, After: after, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range page {
				if !slices.Contains(states, st.State) {
					t.Errorf("ListRuns(%v) listed %s in state %s", states, st.RunID, st.State)
				}
				got = append(got, st.RunID)
			}
			if len(page) < 5 {
				break
			}
			after = page[len(page)-1].RunID
		}
		if !slices.Equal(got, want) {
			t.Errorf("ListRuns(%v) = %v\nwant %v", states, got, want)
		}
	}
}

// waitingRecorder is recordingRunner whose runs with input "wait" wait
// on a signal at their last step.
type waitingRecorder struct{ recordingRunner }

func (r waitingRecorder) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	if s.Number >= 2 && string(s.Payload) == "wait" {
		return ContinueOnSignal(nil, "sig-"+s.RunID, 24*time.Hour), nil
	}
	return r.recordingRunner.RunStep(ctx, s)
}

// The newest copy of a reused id may be in the KV where the filtered
// listing does not look: an active run when only ended states are
// listed, and a run without the label when listing by label. Its older
// sealed copy is not listed either.
func TestListRunsHidesSealedCopiesOfRunsInTheKV(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), waitingRecorder{}, Options{Sealing: &SealOptions{BatchRuns: 8, CacheSegments: 2, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	startSwept(t, e)
	labels := map[string]string{"team": "a"}
	for i := range 16 {
		id := fmt.Sprintf("run-%04d", i)
		e.submit(RunSpec{RunID: id, Input: []byte("ok"), Labels: labels})
		e.waitRun(id, func(st runstate.Status) bool { return st.State.Terminal() })
	}
	waitKV(t, e, kvSealQ, 16)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != 16 {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	// run-0003 runs again and waits; run-0007 runs again without the label.
	e.submit(RunSpec{RunID: "run-0003", Input: []byte("wait"), Labels: labels})
	e.waitRun("run-0003", func(st runstate.Status) bool { return st.State == runstate.StateWaiting })
	e.submit(RunSpec{RunID: "run-0007", Input: []byte("ok")})
	e.waitRun("run-0007", func(st runstate.Status) bool { return st.State.Terminal() })

	in := e.rt.Inspector()
	ids := func(opts runstate.ListOptions) []string {
		t.Helper()
		page, err := in.ListRuns(e.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range page {
			out = append(out, st.RunID)
		}
		return out
	}
	if got := ids(runstate.ListOptions{States: []runstate.State{runstate.StateSucceeded}}); slices.Contains(got, "run-0003") || len(got) != 15 {
		t.Errorf("succeeded runs: %v; want the 15 but run-0003, which waits again", got)
	}
	if got := ids(runstate.ListOptions{Labels: labels}); slices.Contains(got, "run-0007") || len(got) != 15 {
		t.Errorf("runs labelled team=a: %v; want the 15 but run-0007, run again without the label", got)
	}
}
