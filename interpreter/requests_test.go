package interpreter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// TestLoneRunRequests counts every request of a run watched to its end,
// one run at a time: its submission and each step's settlement are one
// WAL PUT each, and nothing else is written (the definition is pinned
// once, the end reaches the watcher without a notification job).
func TestLoneRunRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "loop.yaml")
	const src = `tqw: v1
name: lone
vars: {i: 0}
steps:
  - id: work
    set: {i: "${ vars.i + 1 }"}
  - id: check
    switch:
      - when: vars.i < 4
        next: work
    next: done
  - id: done
    succeed: "${ vars.i }"
`
	const steps = 4*2 + 1
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := counting.New(mem.New())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	clock := clock.NewMock(t0)
	// Linger long: a non-durable commit waits for the next durable one
	// however slow the machine, so the count does not hang on timing.
	q, err := queue.Open(ctx, store, queue.Options{Logger: log, Clock: clock, SweepInterval: -1, KV: kv.Options{Linger: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	it, err := New(q, store, Options{Actions: builtin.New(builtin.Options{}), Logger: log, Runtime: runtime.Options{Logger: log, Concurrency: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rt := it.Runtime()
	worker := rt.Spawn(ctx)
	defer func() { _ = worker.Shutdown(context.Background()) }()
	for i := range 3 {
		before := store.Counts()
		id := fmt.Sprintf("lone-%d", i)
		done, stop := it.Watch(id)
		if _, err := it.Submit(ctx, w, map[string]any{}, id); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-done:
			if o.Status != runstate.Succeeded || string(o.Result) != "4" {
				t.Fatalf("run %s: %+v", id, o)
			}
		case <-ctx.Done():
			t.Fatalf("run %s did not end", id)
		}
		stop()
		if err := q.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		c := store.Counts().Sub(before)
		wantPuts, wantHeads := int64(steps+1), int64(0)
		if i == 0 {
			// The definition, pinned by the first Submit; the kv's
			// collection of a crashed writer's leftovers LISTs in the
			// background after the open.
			wantPuts, wantHeads, c.Lists = wantPuts+1, 1, 0
		}
		// At most one PUT per commit: group commit may put two commits
		// that meet (a settlement and a trailing commit of the run
		// before) in one PUT, never split one.
		if c.Puts > wantPuts || c.Puts < wantPuts/2 || c.Heads != wantHeads || c.Gets+c.Deletes+c.Lists != 0 {
			t.Errorf("run %d of a %d-step workflow: %+v; want at most %d PUTs (its submission and %d settlements), %d HEAD and no other request",
				i, steps, c, wantPuts, steps, wantHeads)
		}
	}
	if s, err := q.Stats(ctx, rt.NotifyQueueName()); err != nil || s != (queue.Stats{}) {
		t.Fatalf("notification queue %+v, %v; want unused", s, err)
	}
}
