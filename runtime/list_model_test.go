package runtime

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// An id whose ended run is still in the KV and that runs again is listed
// by its active copy alone: a listing of ended states skips the active
// runs unread, and must not list the older result in their place.
func TestListRunsByStateHidesTheResultOfAnIDActiveAgain(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), waitingRecorder{}, Options{ResultRetention: time.Hour})
	e.start()
	for i := range 4 {
		id := fmt.Sprintf("run-%04d", i)
		e.submit(RunSpec{RunID: id, Input: []byte("ok")})
		e.waitRun(id, inState(runstate.StateSucceeded))
	}
	e.submit(RunSpec{RunID: "run-0002", Input: []byte("wait")})
	e.waitRun("run-0002", inState(runstate.StateWaiting))

	for _, desc := range []bool{false, true} {
		page, err := e.rt.Inspector().ListRuns(e.ctx, runstate.ListOptions{States: []runstate.State{runstate.StateSucceeded}, Descending: desc})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, st := range page {
			got = append(got, st.RunID)
		}
		want := []string{"run-0000", "run-0001", "run-0003"}
		if desc {
			slices.Reverse(want)
		}
		if !slices.Equal(got, want) {
			t.Errorf("succeeded runs (descending %v): %v; want %v (run-0002 waits again)", desc, got, want)
		}
	}
}

// modelRunner is recordingRunner whose runs with input "wait" wait on a
// signal at their last step and with input "sleep" sleep a day there.
type modelRunner struct{ recordingRunner }

func (r modelRunner) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	if s.Number >= 2 {
		switch string(s.Payload) {
		case "wait":
			return ContinueOnSignal(nil, "sig-"+s.RunID, 24*time.Hour), nil
		case "sleep":
			return ContinueAfter(nil, 24*time.Hour), nil
		}
	}
	return r.recordingRunner.RunStep(ctx, s)
}

// modelCopy is what the model compares of a run: its newest copy's state
// and labels.
type modelCopy struct {
	id     string
	state  runstate.State
	labels map[string]string
}

func (c modelCopy) String() string { return fmt.Sprintf("%s:%s:%v", c.id, c.state, c.labels) }

// newestCopies is the brute-force reading of every run in the store: all
// run records, result records and sealed entries read whole, and per id
// the newest copy kept (active, else ended in the KV, else the entry of
// the newest visible segment holding it).
func newestCopies(t *testing.T, ctx context.Context, in *Inspector) map[string]modelCopy {
	t.Helper()
	out := map[string]modelCopy{}
	segs, err := in.catalog().catalog(ctx, in.r)
	if err != nil {
		t.Fatal(err)
	}
	// Oldest segment first, each overwriting older copies of its ids.
	for _, m := range segs {
		if m.Slim {
			continue
		}
		x, err := in.segments.index(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		for i := range x.Entries {
			e := &x.Entries[i]
			out[e.ID] = modelCopy{id: e.ID, state: runstate.TerminalStatus(e.Status).State(), labels: e.Labels}
		}
	}
	var results, runs []queue.KVEntry
	if err := scanAll(ctx, in.r, kvResults, func(e queue.KVEntry) { results = append(results, e) }); err != nil {
		t.Fatal(err)
	}
	if err := scanAll(ctx, in.r, kvRuns, func(e queue.KVEntry) { runs = append(runs, e) }); err != nil {
		t.Fatal(err)
	}
	for _, e := range results {
		id := strings.TrimPrefix(e.Key, kvResults)
		res, err := decodeResultRecord(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = modelCopy{id: id, state: res.Status.State(), labels: res.Labels}
	}
	for _, e := range runs {
		id := strings.TrimPrefix(e.Key, kvRuns)
		rec, err := decodeRunRecord(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		st, err := in.activeState(ctx, id, rec)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = modelCopy{id: id, state: st.State, labels: rec.Labels}
	}
	return out
}

// modelList is the brute-force listing: the newest copies past after in
// order, then filtered.
func modelList(newest map[string]modelCopy, opts runstate.ListOptions) []modelCopy {
	ids := slices.Sorted(maps.Keys(newest))
	if opts.Descending {
		slices.Reverse(ids)
	}
	var out []modelCopy
	for _, id := range ids {
		c := newest[id]
		past := opts.After == "" || (!opts.Descending && id > opts.After) || (opts.Descending && id < opts.After)
		if past && stateSet(opts.States)(c.state) && hasLabels(c.labels, opts.Labels) {
			out = append(out, c)
		}
	}
	return out
}

// A store with runs in every place and state (live, ended in the KV,
// sealed in several segments; ids reused across all three; labels and
// workflows) lists and counts, for every filter, order, cursor and page
// size, exactly what the brute-force reading of its records gives.
func TestListAndCountRunsMatchTheNewestCopies(t *testing.T) {
	e := newEnvCfg(t, mem.New(), defaultQueueConfig(), modelRunner{}, Options{Sealing: &SealOptions{BatchRuns: 8, CacheSegments: 32, Delay: -1},
		ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	startSwept(t, e)
	id := func(i int) string { return fmt.Sprintf("run-%04d", i) }
	labels := func(i, round int) map[string]string {
		l := map[string]string{"workflow": []string{"w1", "w2", "w3"}[(i+round)%3]}
		if (i+round)%4 != 0 {
			l["team"] = []string{"a", "b"}[(i/2+round)%2]
		}
		return l
	}
	// run starts id(i) with input in (ok, fail, wait, sleep, cancel: wait
	// then cancelled) and waits until it ended or parked.
	run := func(i, round int, in string) {
		t.Helper()
		input := in
		if in == "cancel" {
			input = "wait"
		}
		e.submit(RunSpec{RunID: id(i), Input: []byte(input), Labels: labels(i, round)})
		switch in {
		case "wait", "cancel":
			e.waitRun(id(i), inState(runstate.StateWaiting))
		case "sleep":
			e.waitRun(id(i), inState(runstate.StateScheduled))
		default:
			e.waitRun(id(i), func(st runstate.Status) bool { return st.State.Terminal() })
		}
		if in == "cancel" {
			if _, err := e.rt.Cancel(e.ctx, id(i)); err != nil {
				t.Fatal(err)
			}
			e.waitRun(id(i), inState(runstate.StateCancelled))
		}
	}
	sealed := 0
	seal := func() {
		t.Helper()
		page, err := e.q.KVScan(e.ctx, kvSealQ, "", 10000)
		if err != nil {
			t.Fatal(err)
		}
		n := len(page)
		if res, err := e.rt.Sweep(e.ctx); err != nil || res.Sealed != n {
			t.Fatalf("Sweep: %+v %v, want %d sealed", res, err, n)
		}
		sealed += n
	}
	ended := []string{"ok", "fail", "ok", "cancel"}
	// Round 0: 48 ids end and are sealed in six segments.
	for i := range 48 {
		run(i, 0, ended[i%4])
	}
	waitKV(t, e, kvSealQ, 48)
	seal()
	// Round 1: every fifth id ends again, sealed in a newer segment.
	for i := 0; i < 48; i += 5 {
		run(i, 1, ended[(i+1)%4])
	}
	waitKV(t, e, kvSealQ, 10)
	seal()
	// Round 2: ids ending again in the KV, and 16 new ones.
	round2 := []int{1, 8, 15, 22, 29, 36, 43, 10}
	for _, i := range round2 {
		run(i, 2, ended[(i+2)%4])
	}
	for i := 48; i < 64; i++ {
		run(i, 2, ended[i%4])
	}
	// Round 3: ids active again (their older copies sealed, ended in the
	// KV, or both), and 8 new active ones.
	parked := []string{"wait", "sleep"}
	for _, i := range []int{3, 9, 15, 20, 22, 40, 1, 10, 50, 55} {
		run(i, 3, parked[i%2])
	}
	for i := 64; i < 72; i++ {
		run(i, 3, parked[i%2])
	}

	// The comparisons below take long under the race detector: they read
	// only, past the env's deadline if need be.
	ctx := context.Background()
	in := e.rt.Inspector()
	newest := newestCopies(t, ctx, in)
	if len(newest) != 72 {
		t.Fatalf("the store holds %d run ids, want 72", len(newest))
	}
	for _, c := range newest {
		st, err := in.Status(ctx, c.id)
		if err != nil || st.State != c.state || !maps.Equal(st.Labels, c.labels) {
			t.Errorf("Status(%s) = %s %v, %v; its newest copy is %s", c.id, st.State, st.Labels, err, c)
		}
	}
	every := []runstate.State{runstate.StatePending, runstate.StateRunning, runstate.StateWaiting, runstate.StateScheduled,
		runstate.StateCancelling, runstate.StateSucceeded, runstate.StateFailed, runstate.StateCancelled}
	// Every set of states; cursors and pages are checked with some of
	// them (a sample of sets is enough, since a listing from a cursor
	// resolves copies as the whole listing does): each state alone and,
	// but under the race detector, every eleventh set.
	var stateSets [][]runstate.State
	paged := map[int]bool{}
	for mask := range 1 << len(every) {
		var set []runstate.State
		for i, st := range every {
			if mask&(1<<i) != 0 {
				set = append(set, st)
			}
		}
		paged[len(stateSets)] = len(set) <= 1 || (!raceEnabled && mask%11 == 0)
		stateSets = append(stateSets, set)
	}
	labelSets := []map[string]string{nil, {"team": "a"}, {"workflow": "w1"}, {"workflow": "w2", "team": "b"}, {"team": "nobody"}}
	list := func(opts runstate.ListOptions) []modelCopy {
		t.Helper()
		got, err := in.ListRuns(ctx, opts)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", opts, err)
		}
		out := make([]modelCopy, len(got))
		for i, st := range got {
			out[i] = modelCopy{id: st.RunID, state: st.State, labels: st.Labels}
		}
		return out
	}
	equal := func(a, b []modelCopy) bool {
		return slices.EqualFunc(a, b, func(x, y modelCopy) bool {
			return x.id == y.id && x.state == y.state && maps.Equal(x.labels, y.labels)
		})
	}
	for n, states := range stateSets {
		want := map[runstate.State]int{}
		for _, c := range modelList(newest, runstate.ListOptions{States: states}) {
			want[c.state]++
		}
		got, err := in.CountRuns(ctx, runstate.ListOptions{States: states})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("CountRuns(%v) = %v, want %v", states, got, want)
		}
		for _, labels := range labelSets {
			for _, desc := range []bool{false, true} {
				opts := runstate.ListOptions{States: states, Labels: labels, Descending: desc}
				want := modelList(newest, opts)
				if got := list(opts); !equal(got, want) {
					t.Errorf("ListRuns(%+v) = %v\nwant %v", opts, got, want)
				}
				if !paged[n] {
					continue
				}
				// From cursors before, between and at listed ids.
				for _, after := range []string{id(9), id(22) + "x", id(47), id(63)} {
					opts.After = after
					if got, want := list(opts), modelList(newest, opts); !equal(got, want) {
						t.Errorf("ListRuns(%+v) = %v\nwant %v", opts, got, want)
					}
				}
				// In pages, each page's last id the next one's cursor.
				opts.After = ""
				for _, page := range []int{1, 4} {
					opts.Limit = page
					var got []modelCopy
					for o := opts; ; {
						p := list(o)
						got = append(got, p...)
						if len(p) < page {
							break
						}
						o.After = p[len(p)-1].id
					}
					if want := modelList(newest, opts); !equal(got, want) {
						t.Errorf("ListRuns(%+v) in pages = %v\nwant %v", opts, got, want)
					}
				}
			}
		}
	}
	if sealed != 58 {
		t.Errorf("sealed %d runs, want 58", sealed)
	}
}
