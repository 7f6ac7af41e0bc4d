package interpreter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// TestNewRefusesAnotherTerminalHook: the interpreter is its runtime's
// terminal hook, so a hook in Options.Runtime is an error, not replaced
// silently.
func TestNewRefusesAnotherTerminalHook(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	hook := runtime.TerminalHookFunc(func(context.Context, *runstate.Outcome, *runtime.TerminalEffects) error { return nil })
	it, err := New(q, store, Options{Actions: builtin.New(builtin.Options{}), Runtime: runtime.Options{TerminalHook: hook}})
	if err == nil || !strings.Contains(err.Error(), "TerminalHook") || it != nil {
		t.Fatalf("New with a terminal hook: %v, %v; want an error naming TerminalHook", it, err)
	}
	if _, err := New(nil, store, Options{Actions: builtin.New(builtin.Options{})}); err == nil {
		t.Fatal("New without a queue: no error")
	}
}

// TestNewStepDurationsAndView: a run goes from New to its end with no
// other wiring; Options.StepDurations sees each DSL step (two, folded in
// one runtime step), and
// a View on the same store reads the definition the run is pinned to.
func TestNewStepDurationsAndView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "two.yaml")
	const src = `tqw: v1
name: two
steps:
  - id: first
    set: {x: 1}
  - id: done
    succeed: "${ vars.x }"
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := mem.New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var mu sync.Mutex
	var steps int
	it, err := New(q, store, Options{Actions: builtin.New(builtin.Options{}), Logger: log,
		Runtime: runtime.Options{Logger: log},
		StepDurations: func(d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if d < 0 {
				t.Errorf("step duration %v", d)
			}
			steps++
		}})
	if err != nil {
		t.Fatal(err)
	}
	worker := it.Runtime().Spawn(ctx)
	defer func() { _ = worker.Shutdown(context.Background()) }()
	done, unwatch := it.Watch("r1")
	defer unwatch()
	if _, err := it.Submit(ctx, w, map[string]any{}, "r1"); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.Status != runstate.Succeeded || string(o.Result) != "1" {
			t.Fatalf("run r1: %+v", o)
		}
	case <-ctx.Done():
		t.Fatal("run r1 did not end")
	}
	mu.Lock()
	if steps != 2 {
		t.Errorf("StepDurations was called %d times; want 2, one per DSL step", steps)
	}
	mu.Unlock()

	v, err := NewView(store, builtin.New(builtin.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Definition(ctx, w.Main.Hash)
	if err != nil || got.Name != "two" {
		t.Fatalf("View.Definition(%s) = %v, %v; want the workflow two", w.Main.Hash, got, err)
	}
	if _, err := v.Definition(ctx, "nosuchhash"); !errors.Is(err, ErrDefinitionMissing) {
		t.Fatalf("View.Definition of an unknown hash: %v; want ErrDefinitionMissing", err)
	}
	if _, err := NewView(nil, builtin.New(builtin.Options{})); err == nil {
		t.Fatal("NewView without a store: no error")
	}
}
