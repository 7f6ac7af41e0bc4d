package engine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/interpreter/engine"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// sealAll seals until runID is sealed: its end is handled (the terminal
// notification acknowledged) shortly after Await returns.
func sealAll(t *testing.T, ctx context.Context, e *engine.Engine, runID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := e.Runtime().Seal(ctx); err != nil {
			t.Fatalf("Seal: %v", err)
		}
		_, sealed, err := e.Runtime().Inspector().SealedRecords(ctx, runID, "")
		if err != nil {
			t.Fatal(err)
		}
		if sealed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s was not sealed within 30 s", runID)
		}
		time.Sleep(10 * time.Millisecond) // polling: the notification's ack is asynchronous
	}
}

// historyKeys counts the interpreter's records of runID left in the KV.
func historyKeys(t *testing.T, ctx context.Context, e *engine.Engine, runID string) int {
	t.Helper()
	n := 0
	for _, p := range e.Interpreter().RunRecordPrefixes(runID) {
		page, err := e.Runtime().Queue().KVScan(ctx, p, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page)
	}
	return n
}

// The engine seals by default: a finished run's history and outputs
// leave the KV store, and status, history and list read it back from its
// segment, in this process and after a reopen. A store written with
// sealing off (as by a build before it) opens, and its finished run
// stays readable.
func TestEngineSealsFinishedRuns(t *testing.T) {
	ctx := ctxFor(t)
	url := "file://" + filepath.Join(t.TempDir(), "store")
	path := writeFile(t, "greeting.tqw.yaml", greeting)
	run := func(o engine.Options, runID, name string) *engine.Engine {
		t.Helper()
		o.Actions, o.Logger = []actions.Action{shout{}}, quiet()
		e, err := engine.Open(ctx, url, o)
		if err != nil {
			t.Fatal(err)
		}
		w, err := e.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Submit(ctx, w, map[string]any{"name": name}, runID); err != nil {
			t.Fatal(err)
		}
		if o, err := e.Await(ctx, runID); err != nil || o.Status != runstate.Succeeded {
			t.Fatalf("Await %s: %+v %v", runID, o, err)
		}
		return e
	}
	e := run(engine.Options{KeepFinishedInKV: true}, "old", "before")
	if n := historyKeys(t, ctx, e, "old"); n == 0 {
		t.Fatal("with KeepFinishedInKV the finished run has no records in the KV")
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}

	e = run(engine.Options{}, "new", "after")
	sealAll(t, ctx, e, "new")
	if n := historyKeys(t, ctx, e, "new"); n != 0 {
		t.Fatalf("%d interpreter records of the sealed run are still in the KV", n)
	}
	check := func(e *engine.Engine) {
		t.Helper()
		r := interpreter.WithSealed(e.Runtime().Queue(), e.Runtime().Inspector())
		for runID, want := range map[string]string{"old": `"HELLO BEFORE!"`, "new": `"HELLO AFTER!"`} {
			st, err := e.Runtime().Status(ctx, runID)
			if err != nil || st.State != runstate.StateSucceeded || string(st.Result) != want {
				t.Fatalf("Status(%s) = %+v, %v; want succeeded with %s", runID, st, err, want)
			}
			recs, err := interpreter.History(ctx, r, e.Store(), runID)
			if err != nil || len(recs) == 0 {
				t.Fatalf("History(%s) = %d records, %v", runID, len(recs), err)
			}
			if last := recs[len(recs)-1]; last.Step == "" || last.Kind == "" {
				t.Fatalf("History(%s) last record %+v", runID, last)
			}
		}
		list, err := e.Runtime().ListRuns(ctx, runstate.ListOptions{})
		if err != nil || len(list) != 2 || list[0].RunID != "new" || list[1].RunID != "old" {
			t.Fatalf("ListRuns = %+v, %v; want new and old", list, err)
		}
	}
	check(e)
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(ctx, url, engine.Options{Actions: []actions.Action{shout{}}, Logger: quiet()})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer e.Close(ctx)
	check(e)
	// Without WithSealed, the sealed run's history is not in the KV.
	if recs, err := interpreter.History(ctx, e.Runtime().Queue(), e.Store(), "new"); err != nil || len(recs) != 0 {
		t.Fatalf("History of a sealed run from the KV alone = %d records, %v; want none", len(recs), err)
	}
}
