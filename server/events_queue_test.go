package server

import (
	"fmt"
	"testing"

	"github.com/tqw-dsl/tqw/interpreter"
)

// TestStepQueueMarksWhatItDrops: past maxQueuedSteps a step event is not
// dropped silently: a gap in its place names its run (and the run that
// owns it), so the broker tells their streams to reload; past maxGapRuns
// runs the gap names every run.
func TestStepQueueMarksWhatItDrops(t *testing.T) {
	q := newStepQueue()
	for i := range maxQueuedSteps {
		q.push(interpreter.Event{RunID: fmt.Sprint("r", i), Kind: "start"})
	}
	q.push(interpreter.Event{RunID: "late:child", Kind: "end"})
	q.push(interpreter.Event{RunID: "later", Kind: "end"})
	items := q.take()
	if len(items) != maxQueuedSteps+1 {
		t.Fatalf("%d items; want the %d events and one gap", len(items), maxQueuedSteps)
	}
	g := items[maxQueuedSteps].gap
	if g == nil || g.all || !g.runs["late:child"] || !g.runs["late"] || !g.runs["later"] {
		t.Fatalf("the gap %+v does not name the dropped events' runs", g)
	}
	for i := range maxQueuedSteps {
		q.push(interpreter.Event{RunID: fmt.Sprint("s", i)})
	}
	for i := range maxGapRuns + 1 {
		q.push(interpreter.Event{RunID: fmt.Sprint("d", i)})
	}
	items = q.take()
	if g := items[len(items)-1].gap; g == nil || !g.all {
		t.Fatalf("a gap of more than %d runs: %+v; want it to name every run", maxGapRuns, g)
	}
	if len(q.take()) != 0 {
		t.Fatal("take left items queued")
	}
}
