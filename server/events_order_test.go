package server_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/server/client"
)

// waitUntil waits, within the fixture's deadline, until cond holds.
func waitUntil(t *testing.T, f *fixture, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-f.ctx.Done():
			t.Fatalf("%s did not happen within %v", what, deadline)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// readRunStream reads a run's stream to its end.
func readRunStream(t *testing.T, st *client.Stream) []client.Event {
	t.Helper()
	var out []client.Event
	for {
		ev, err := st.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// TestFoldedChainStreamsInOrder: the pure steps after a wait run in the
// wait's delivery and commit with it; the run's stream still sends each
// step's end before the next step's start.
func TestFoldedChainStreamsInOrder(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "chain.yaml", RunID: "ch1"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("ch1", "waiting")
	st, err := f.c.RunEvents(f.ctx, "ch1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if ev, err := st.Next(); err != nil || ev.Name != "state" {
		t.Fatalf("first event %+v %v", ev, err)
	}
	if _, err := f.c.Signal(f.ctx, "go:ch1", []byte(`{}`), true); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range readRunStream(t, st) {
		if ev.Name != "step_start" && ev.Name != "step_end" {
			continue
		}
		var se struct {
			Step  string `json:"step"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(ev.Data, &se); err != nil {
			t.Fatal(err)
		}
		got = append(got, se.Event+":"+se.Step)
	}
	want := "end:ask start:a end:a start:b end:b start:c end:c start:done end:done"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("the stream sent the steps %s; want %s", g, want)
	}
}

// TestEventIDsAreUnique: every event of a run's stream and of the stream
// of every run carries an id of its own (a run's state event used to
// take the id of the step event before it).
func TestEventIDsAreUnique(t *testing.T) {
	f := newFixture(t)
	all, err := f.c.Events(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "uid1", Input: json.RawMessage(`{"request":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("uid1", "waiting")
	st, err := f.c.RunEvents(f.ctx, "uid1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := f.c.Signal(f.ctx, "approve:uid1", []byte(`{"approved":true}`), true); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	note := func(stream string, ev client.Event) {
		if ev.ID == "" {
			t.Fatalf("%s: a %s event without an id: %s", stream, ev.Name, ev.Data)
		}
		if prev, dup := seen[ev.ID]; dup {
			t.Fatalf("%s: the %s event %s has the id %s of an earlier %s", stream, ev.Name, ev.Data, ev.ID, prev)
		}
		seen[ev.ID] = stream + " " + ev.Name
	}
	events := readRunStream(t, st)
	if len(events) < 3 {
		t.Fatalf("the run's stream sent %d events", len(events))
	}
	for _, ev := range events {
		note("run stream", ev)
	}
	for {
		ev, err := all.Next()
		if err != nil {
			t.Fatal(err)
		}
		note("stream of every run", ev)
		var s client.RunSummary
		if json.Unmarshal(ev.Data, &s) == nil && s.RunID == "uid1" && s.State == "succeeded" {
			return
		}
	}
}
