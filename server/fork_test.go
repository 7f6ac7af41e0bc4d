package server_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/server/client"
)

// A fork through the API starts at its step with the origin's variables,
// shows its lineage, and compares with its origin; what cannot be forked
// is a 422 and writes no run.
func TestForkAndDiffThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	if _, err := f.c.Submit(ctx, client.SubmitRequest{Workflow: "chain.yaml", RunID: "ch1"}); err != nil {
		t.Fatal(err)
	}
	f.waitState("ch1", "waiting")
	if _, err := f.c.Signal(ctx, "go:ch1", []byte(`{}`), false); err != nil {
		t.Fatal(err)
	}
	f.waitState("ch1", "succeeded")

	// At b, n is 1 (set by a): the fork ends with 2, as its origin did.
	fk, err := f.c.Fork(ctx, "ch1", client.ForkRequest{At: "b", RunID: "ch1-b"})
	if err != nil {
		t.Fatal(err)
	}
	if fk.RunID != "ch1-b" || !fk.New || fk.ForkedFrom != "ch1" || fk.At != "b" {
		t.Fatalf("fork answer %+v", fk)
	}
	run := f.waitState("ch1-b", "succeeded", "failed")
	if run.State != "succeeded" || string(run.Result) != "2" {
		t.Fatalf("fork ended %s with %s; want succeeded with 2", run.State, run.Result)
	}
	if run.ForkedFrom == nil || run.ForkedFrom.RunID != "ch1" || run.ForkedFrom.At != "b" {
		t.Fatalf("lineage %+v", run.ForkedFrom)
	}
	// The fork ended: its id stays taken while it is retained.
	if _, err := f.c.Fork(ctx, "ch1", client.ForkRequest{At: "b", RunID: "ch1-b"}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a fork under a finished run's id: %v", err)
	}
	d, err := f.c.Diff(ctx, "ch1", "ch1-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Differences) != 0 {
		t.Fatalf("a fork that changed nothing differs: %+v", d.Differences)
	}
	// Forked at a, before n was set: the same again. Forked at c with
	// the origin's input replaced by one the workflow accepts too.
	if _, err := f.c.Fork(ctx, "ch1", client.ForkRequest{At: "c", RunID: "ch1-c", Input: json.RawMessage(`{"x": 1}`)}); err != nil {
		t.Fatal(err)
	}
	if run := f.waitState("ch1-c", "succeeded", "failed"); run.State != "succeeded" {
		t.Fatalf("fork at c: %s %v", run.State, run.Error)
	}

	var ce *client.Error
	if _, err := f.c.Fork(ctx, "ch1", client.ForkRequest{At: "nosuch"}); !errors.As(err, &ce) || ce.Status != 422 || ce.Code != "not_forkable" {
		t.Fatalf("fork at an unknown step: %v", err)
	}
	if _, err := f.c.Fork(ctx, "nosuch", client.ForkRequest{At: "b"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("fork of an unknown run: %v", err)
	}
	if _, err := f.c.Diff(ctx, "ch1", "nosuch"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("diff with an unknown run: %v", err)
	}
	if _, err := f.c.Run(ctx, "ch1-x"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused fork left a run: %v", err)
	}
}
