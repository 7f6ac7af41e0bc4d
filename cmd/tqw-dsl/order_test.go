package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRunJSONStepEventsInOrder: `run --json` prints each step's end
// before the next step's start, also for the pure steps folded into one
// runtime step (hello.yaml folds route into pick's step and done into
// greet's), whose starts were printed as they ran, ahead of the end of
// the step before them.
func TestRunJSONStepEventsInOrder(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out, _ := c.must(0, "run", abs(t, "../../workflows/hello.yaml"), "--input", `{"name": "Ann"}`, "--json")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Event string `json:"event"`
			Step  string `json:"step"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("run --json line %q: %v", line, err)
		}
		if ev.Event == "start" || ev.Event == "end" {
			got = append(got, ev.Event+":"+ev.Step)
		}
	}
	want := "start:pick end:pick start:route end:route start:greet end:greet start:done end:done"
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("run --json step events %s; want %s\n%s", g, want, out)
	}
}
