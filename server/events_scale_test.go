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

// A client of the stream of every run that reconnects with Last-Event-ID
// after the broker polled with no such stream open is replayed what it
// missed, from memory: the run that ended meanwhile, not a summary of
// each of 400 sealed runs (which cost 401 events and 40 GETs of segment
// indexes, inside the loop every stream shares).
func TestEventStreamResumeReplaysOnlyWhatWasMissed(t *testing.T) {
	const sealed = 400
	f, store := sealedRunsFixture(t, sealed)
	ctx := f.ctx
	stream, err := f.c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next()
		if err != nil {
			t.Fatal(err)
		}
		var run client.RunSummary
		if json.Unmarshal(ev.Data, &run) == nil && run.RunID == first.RunID && run.State == "succeeded" {
			break
		}
	}
	last := stream.LastEventID()
	stream.Close()
	waitUntil(t, f, "the server noticing the stream closed", func() bool { return f.srv.EventStreamsOfEveryRun() == 0 })
	polls := f.srv.EventPolls()
	waitUntil(t, f, "two polls with no stream of every run", func() bool { return f.srv.EventPolls() >= polls+2 })
	missed, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "greet.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitState(missed.RunID, "succeeded")

	before := store.Counts()
	again, err := f.c.EventsSince(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for n := 1; ; n++ {
		ev, err := again.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Name != "run" {
			t.Fatalf("event %d after resuming: %s %s; want the changes missed, replayed", n, ev.Name, ev.Data)
		}
		var run client.RunSummary
		if err := json.Unmarshal(ev.Data, &run); err != nil {
			t.Fatal(err)
		}
		if run.RunID != missed.RunID {
			t.Fatalf("event %d after resuming is of run %s (%s), which did not change while the client was away", n, run.RunID, run.State)
		}
		if run.State == "succeeded" {
			break
		}
	}
	if gets := store.Counts().Sub(before).Gets; gets > 2 {
		t.Errorf("resuming read %d objects over %d sealed runs; want none of their segment indexes", gets, sealed)
	}
}
