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

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// TestLoneRunRequests counts every request of a run watched to its end,
// one run at a time: its submission is one WAL PUT, each runtime step's
// settlement one more, and nothing else is written (the definition is
// pinned once, the end reaches the watcher without a notification job).
// Pure steps fold into the runtime step before them: the 101 set, switch
// and succeed steps of the bench's loop make one settlement, and two
// actions with a set and a switch between them make two.
func TestLoneRunRequests(t *testing.T) {
	for _, tc := range []struct {
		name, src   string
		steps       int
		settlements int64
	}{
		{"loop", `tqw: v1
name: lone
vars: {i: 0}
steps:
  - id: work
    set: {i: "${ vars.i + 1 }"}
  - id: check
    switch:
      - when: vars.i < 50
        next: work
    next: done
  - id: done
    succeed: "${ vars.i }"
`, 50*2 + 1, 1},
		{"actions", `tqw: v1
name: lone
vars: {i: 0}
steps:
  - id: first
    action: noop
  - id: work
    set: {i: "${ vars.i + 50 }"}
  - id: check
    switch:
      - when: vars.i < 50
        next: first
    next: last
  - id: last
    action: noop
`, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) { testLoneRunRequests(t, tc.src, tc.steps, tc.settlements) })
	}
}

func testLoneRunRequests(t *testing.T, src string, steps int, settlements int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "lone.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	acts := builtin.New(builtin.Options{})
	if err := acts.Register(funcAction{name: "noop", fn: func(context.Context, *actions.Call) (any, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path, LoadOptions(acts, dsl.Options{}))
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
	it, err := New(q, store, Options{Actions: acts, Logger: log, Runtime: runtime.Options{Logger: log, Concurrency: 1}})
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
			if o.Status != runstate.Succeeded {
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
		wantPuts, wantHeads := 1+settlements, int64(0)
		if i == 0 {
			// The definition, pinned by the first Submit; the kv's
			// collection of a crashed writer's leftovers LISTs in the
			// background after the open.
			wantPuts, wantHeads, c.Lists = wantPuts+1, 1, 0
		}
		if c.Puts != wantPuts || c.Heads != wantHeads || c.Gets+c.Deletes+c.Lists != 0 {
			t.Errorf("run %d of a %d-step workflow: %+v; want %d PUTs (its submission and %d settlements), %d HEAD and no other request",
				i, steps, c, wantPuts, settlements, wantHeads)
		}
		if h, err := History(ctx, q, store, id); err != nil || len(h) != steps {
			t.Errorf("run %d: %d history records, %v; want %d", i, len(h), err, steps)
		}
	}
	if s, err := q.Stats(ctx, rt.NotifyQueueName()); err != nil || s != (queue.Stats{}) {
		t.Fatalf("notification queue %+v, %v; want unused", s, err)
	}
}
