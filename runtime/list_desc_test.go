package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// ListRuns with Descending lists, page by page through its cursor,
// exactly the ascending listing reversed, for every filter: live runs,
// results in the KV and runs sealed in several segments merged, and an
// id run again (sealed again, waiting again, ended again in the KV)
// listed once, by its newest copy.
func TestListRunsDescending(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), waitingRecorder{}, Options{Sealing: &SealOptions{BatchRuns: 8, CacheSegments: 2, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	startSwept(t, e)
	run := func(id, in string, labels map[string]string) {
		t.Helper()
		e.submit(RunSpec{RunID: id, Input: []byte(in), Labels: labels})
		if in == "wait" {
			e.waitRun(id, func(st runstate.Status) bool { return st.State == runstate.StateWaiting })
		} else {
			e.waitRun(id, func(st runstate.Status) bool { return st.State.Terminal() })
		}
	}
	seal := func(n int) {
		t.Helper()
		waitKV(t, e, kvSealQ, n)
		if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
			t.Fatalf("Sweep: %+v %v", res, err)
		}
	}
	team := func(i int) map[string]string { return map[string]string{"team": []string{"a", "b"}[i%2]} }
	// 24 runs sealed in three segments.
	for i := range 24 {
		run(fmt.Sprintf("run-%04d", i), []string{"ok", "fail", "ok"}[i%3], team(i))
	}
	seal(24)
	// run-0002 ends again, failing, sealed in a fourth segment.
	run("run-0002", "fail", team(2))
	seal(1)
	// run-0005 waits again; run-0010 ends again without its label, in the KV.
	run("run-0005", "wait", team(5))
	run("run-0010", "ok", nil)
	// Eight newer runs: ended in the KV, the last two waiting.
	for i := 24; i < 32; i++ {
		in := []string{"ok", "fail"}[i%2]
		if i >= 30 {
			in = "wait"
		}
		run(fmt.Sprintf("run-%04d", i), in, team(i))
	}

	in := e.rt.Inspector()
	list := func(opts runstate.ListOptions, page int) []runstate.Status {
		t.Helper()
		var out []runstate.Status
		seen := map[string]bool{}
		opts.Limit, opts.After = page, ""
		for {
			got, err := in.ListRuns(e.ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range got {
				if seen[st.RunID] {
					t.Fatalf("ListRuns(%+v) listed %s twice", opts, st.RunID)
				}
				seen[st.RunID] = true
			}
			out = append(out, got...)
			if len(got) < page {
				return out
			}
			opts.After = got[len(got)-1].RunID
		}
	}
	str := func(sts []runstate.Status) []string {
		var out []string
		for _, st := range sts {
			out = append(out, st.RunID+":"+st.State.String())
		}
		return out
	}
	filters := []runstate.ListOptions{
		{},
		{States: []runstate.State{runstate.StateSucceeded}},
		{States: []runstate.State{runstate.StateFailed}},
		{States: []runstate.State{runstate.StateWaiting}},
		{States: []runstate.State{runstate.StateSucceeded, runstate.StateWaiting}},
		{Labels: map[string]string{"team": "a"}},
		{Labels: map[string]string{"team": "b"}, States: []runstate.State{runstate.StateFailed, runstate.StateWaiting}},
	}
	for _, f := range filters {
		asc := str(list(f, 1000))
		want := slices.Clone(asc)
		slices.Reverse(want)
		for _, page := range []int{1, 3, 7, 1000} {
			d := f
			d.Descending = true
			if got := str(list(d, page)); !slices.Equal(got, want) {
				t.Errorf("descending ListRuns(states %v, labels %v) in pages of %d:\n got %v\nwant %v", f.States, f.Labels, page, got, want)
			}
		}
	}
	all := str(list(runstate.ListOptions{Descending: true}, 5))
	if len(all) != 32 || all[0] != "run-0031:waiting" || all[31] != "run-0000:succeeded" {
		t.Fatalf("descending listing: %v; want the 32 ids from run-0031 (waiting) down to run-0000", all)
	}
	for _, want := range []string{"run-0002:failed", "run-0005:waiting", "run-0010:succeeded"} {
		if !slices.Contains(all, want) {
			t.Errorf("descending listing lacks the newest copy %s: %v", want, all)
		}
	}
	if got := str(list(runstate.ListOptions{Descending: true, Labels: map[string]string{"team": "a"}}, 4)); slices.ContainsFunc(got, func(s string) bool { return s[:8] == "run-0010" }) {
		t.Errorf("team=a lists run-0010, whose newest copy has no label: %v", got)
	}
}
