package server_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/server/client"
)

const labelledYAML = `tqw: v1
name: labelled
input: {type: object}
labels: {team: payments, order: "${ input.order }"}
vars: {i: 0}
outputs: {loops: "${ vars.i }", team: payments}
steps:
  - id: work
    set: {i: "${ vars.i + 1 }"}
    switch:
      - when: vars.i < 150
        next: work
`

// A workflow's labels reach the run's view and the list (a submission's
// labels win on a key), the list filters by them, the declared outputs
// are the result, and a loop's history says how many visits it dropped
// (the server's interpreter keeps the default 100). Every answer is
// checked against openapi.json.
func TestLabelsOutputsAndDroppedVisitsOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	sub, err := f.c.Submit(ctx, client.SubmitRequest{YAML: labelledYAML, Input: json.RawMessage(`{"order": "o-9"}`), RunID: "lb1",
		Labels: map[string]string{"team": "ops", "env": "test"}})
	if err != nil || !sub.New {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	run := f.waitState("lb1", "succeeded")
	want := map[string]string{"workflow": "labelled", "team": "ops", "order": "o-9", "env": "test"}
	if len(run.Labels) != len(want) {
		t.Fatalf("run labels %v; want %v", run.Labels, want)
	}
	for k, v := range want {
		if run.Labels[k] != v {
			t.Fatalf("run labels %v; want %v", run.Labels, want)
		}
	}
	if string(run.Result) != `{"loops":150,"team":"payments"}` {
		t.Fatalf("result %s; want the declared outputs", run.Result)
	}
	list, err := f.c.ListRuns(ctx, client.ListOptions{Labels: map[string]string{"order": "o-9"}})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].Labels["env"] != "test" {
		t.Fatalf("list by order=o-9: %+v %v", list.Runs, err)
	}
	hist, err := f.c.History(ctx, "lb1")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 100 || hist[0].DroppedVisits != 50 {
		t.Fatalf("%d records, the oldest dropping %d; want 100 and 50", len(hist), hist[0].DroppedVisits)
	}
	for _, h := range hist[1:] {
		if h.DroppedVisits != 0 {
			t.Fatal("a record other than the step's oldest carries dropped_visits")
		}
	}
}

// Labels that evaluate to no label on the input are 422 invalid_labels
// on /labels, and nothing is written.
func TestBadLabelsAre422(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: labelledYAML, Input: json.RawMessage(`{"order": 12}`), RunID: "lb2"})
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrRejected) || ce.Code != "invalid_labels" || ce.Field != "/labels" ||
		!strings.Contains(ce.Message, "label order") {
		t.Fatalf("submit with a numeric order: %v; want 422 invalid_labels naming the label", err)
	}
	if list, err := f.c.ListRuns(f.ctx, client.ListOptions{}); err != nil || len(list.Runs) != 0 {
		t.Fatalf("a refused submission left runs: %+v %v", list.Runs, err)
	}
}
