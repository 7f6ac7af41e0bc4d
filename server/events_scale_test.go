package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/server/client"
)

// The stream of every run follows the runs that can still change, not
// every retained one: while it is open, the broker's polls (one per
// heartbeat, 50 ms here) list the active runs through the index, which
// skips every sealed segment, where a walk of every run read the indexes
// of all 20 segments (the cache holds two) at each poll. A run that ends
// meanwhile is still announced.
func TestEventStreamPollsReadNoSealedRuns(t *testing.T) {
	const sealed = 400
	f, store := sealedRunsFixture(t, sealed)
	ctx := f.ctx

	stream, err := f.c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	before := store.Counts()
	// A window, not a wait for something: twenty of the fixture's 50 ms
	// heartbeats, so twenty polls.
	time.Sleep(time.Second)
	if gets := store.Counts().Sub(before).Gets; gets > 2 {
		t.Errorf("an open stream's polls read %d objects over %d sealed runs, want none of their segment indexes", gets, sealed)
	}
	sub, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatalf("stream ended before run %s was announced succeeded: %v", sub.RunID, err)
		}
		var run client.RunSummary
		if ev.Name == "run" && json.Unmarshal(ev.Data, &run) == nil && run.RunID == sub.RunID && run.State == "succeeded" {
			return
		}
	}
}
