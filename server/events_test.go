package server_test

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/tqw-dsl/tqw/server/client"
)

// TestRunEventStream follows an approval from its wait to its end: the
// stream opens with the current state, reports the steps and the states,
// and ends after the run ended. Every event's data matches its schema.
func TestRunEventStream(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	all, err := f.c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "approval.tqw.yaml", RunID: "ev1", Input: json.RawMessage(`{"request":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	f.waitState("ev1", "waiting")
	st, err := f.c.RunEvents(ctx, "ev1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Next()
	if err != nil || first.Name != "state" {
		t.Fatalf("first event %+v %v, want the state", first, err)
	}
	var sum client.RunSummary
	if err := json.Unmarshal(first.Data, &sum); err != nil || sum.State != "waiting" || sum.RunID != "ev1" {
		t.Fatalf("first state %s %v", first.Data, err)
	}
	f.conf.checkSchema(t, "RunSummary", first.Data)
	if _, err := f.c.Signal(ctx, "approve:ev1", []byte(`{"approved":true}`), true); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	lastState := ""
	for {
		ev, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[ev.Name]++
		switch ev.Name {
		case "state":
			f.conf.checkSchema(t, "RunSummary", ev.Data)
			var s client.RunSummary
			_ = json.Unmarshal(ev.Data, &s)
			lastState = s.State
		case "step_start", "step_end":
			f.conf.checkSchema(t, "StepEvent", ev.Data)
		default:
			t.Errorf("unexpected event %q", ev.Name)
		}
	}
	if lastState != "succeeded" || names["step_end"] == 0 {
		t.Fatalf("the stream ended with state %q after events %v; want succeeded and step_end events", lastState, names)
	}
	// The stream of every run saw ev1 change state, ending succeeded.
	for {
		ev, err := all.Next()
		if err != nil {
			t.Fatalf("the stream of every run: %v", err)
		}
		if ev.Name != "run" {
			t.Fatalf("event %q on the stream of every run", ev.Name)
		}
		f.conf.checkSchema(t, "RunSummary", ev.Data)
		var s client.RunSummary
		if err := json.Unmarshal(ev.Data, &s); err != nil {
			t.Fatal(err)
		}
		if s.RunID == "ev1" && s.State == "succeeded" {
			break
		}
	}
}

// TestEventStreamOfAFinishedRun answers its state and ends at once.
func TestEventStreamOfAFinishedRun(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{Workflow: "greet.yaml", RunID: "done1"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("done1", "succeeded")
	st, err := f.c.RunEvents(f.ctx, "done1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ev, err := st.Next()
	if err != nil || ev.Name != "state" {
		t.Fatalf("%+v %v", ev, err)
	}
	if _, err := st.Next(); err != io.EOF {
		t.Fatalf("the stream of a finished run goes on: %v", err)
	}
}
