package runtime

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
)

func TestListRunsByLabelThroughTheIndex(t *testing.T) {
	g := newGate(t)
	e := newEnv(t, statusRunner(g), Options{ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	e.start()
	e.submit(RunSpec{RunID: "a-ok", Input: []byte("ok"), Labels: map[string]string{"team": "billing", "env": "prod"}})
	e.submit(RunSpec{RunID: "b-ok", Input: []byte("ok"), Labels: map[string]string{"team": "billing", "env": "dev"}})
	e.submit(RunSpec{RunID: "c-ok", Input: []byte("ok"), Labels: map[string]string{"team": "search"}})
	for range 3 {
		e.outcome()
	}
	e.clock.Advance(40 * time.Minute)
	e.submit(RunSpec{RunID: "d-wait", Input: []byte("wait"), Labels: map[string]string{"team": "billing", "env": "a b/c"}})
	e.waitRun("d-wait", inState(runstate.StateWaiting))

	in := e.rt.Inspector()
	cases := []struct {
		opts runstate.ListOptions
		want string
	}{
		{runstate.ListOptions{Labels: map[string]string{"team": "billing"}}, "a-ok:succeeded b-ok:succeeded d-wait:waiting"},
		{runstate.ListOptions{Labels: map[string]string{"team": "billing", "env": "prod"}}, "a-ok:succeeded"},
		{runstate.ListOptions{Labels: map[string]string{"env": "a b/c"}}, "d-wait:waiting"},
		{runstate.ListOptions{Labels: map[string]string{"team": "billing"}, States: []runstate.State{runstate.StateWaiting}}, "d-wait:waiting"},
		{runstate.ListOptions{Labels: map[string]string{"team": "billing"}, After: "a-ok", Limit: 1}, "b-ok:succeeded"},
		{runstate.ListOptions{Labels: map[string]string{"team": "nobody"}}, ""},
	}
	for _, c := range cases {
		if got := listString(t, in, c.opts); got != c.want {
			t.Errorf("ListRuns(%+v) = %q, want %q", c.opts, got, c.want)
		}
	}
	if st := e.status("b-ok"); st.Labels["env"] != "dev" {
		t.Fatalf("terminal status labels %v", st.Labels)
	}
	if st := e.status("d-wait"); st.Labels["env"] != "a b/c" {
		t.Fatalf("active status labels %v", st.Labels)
	}

	// The first three expire; their index entries go with their results.
	e.clock.Advance(21 * time.Minute)
	if res, err := e.rt.Sweep(e.ctx); err != nil || res.Results != 3 {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	if got := listString(t, in, runstate.ListOptions{Labels: map[string]string{"team": "billing"}}); got != "d-wait:waiting" {
		t.Fatalf("after expiry: %q", got)
	}
	left, err := e.q.KVScan(e.ctx, kvLabels, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Fatalf("label index after expiry holds %d entries, want d-wait's 2: %v", len(left), left)
	}
}

func TestInvalidLabelsChangeNothing(t *testing.T) {
	e := newEnv(t, echo())
	for _, labels := range []map[string]string{
		{"": "v"}, {".hidden": "v"}, {"a=b": "v"}, {"k": "line\nbreak"}, {strings.Repeat("k", 64): "v"},
	} {
		_, err := e.rt.Submit(e.ctx, RunSpec{RunID: "r", Input: []byte("x"), Labels: labels})
		if !errors.Is(err, runstate.ErrInvalidLabel) {
			t.Fatalf("Submit with labels %q: %v, want runstate.ErrInvalidLabel", labels, err)
		}
	}
	if _, err := e.rt.Status(e.ctx, "r"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("a refused submission left a run: %v", err)
	}
	if _, err := e.rt.ListRuns(e.ctx, runstate.ListOptions{Labels: map[string]string{"bad key": "v"}}); !errors.Is(err, runstate.ErrInvalidLabel) {
		t.Fatalf("ListRuns with a bad label: %v", err)
	}
}
