package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/interpreter/engine"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// The action's with schema, declared once with the action, is checked at
// load: a workflow that misuses it does not load.
func TestRegisteredActionSchemaCheckedAtLoad(t *testing.T) {
	ctx := ctxFor(t)
	e, err := engine.Open(ctx, "mem://engine-schema", engine.Options{Actions: []actions.Action{shout{}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	bad := writeFile(t, "bad.tqw.yaml", strings.Replace(greeting, "text:", "txt:", 1))
	_, err = e.Load(bad)
	if err == nil || !strings.Contains(err.Error(), "txt") {
		t.Fatalf("Load of a workflow with an unknown with field of shout: %v; want an error naming txt", err)
	}
	if _, err := e.Load(writeFile(t, "good.tqw.yaml", greeting)); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

// A second engine on a store the first holds is refused, naming the holder.
func TestSecondEngineRefused(t *testing.T) {
	ctx := ctxFor(t)
	store := mem.New()
	first, err := engine.OpenStore(ctx, store, engine.Options{Owner: "first", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close(ctx)
	_, err = engine.OpenStore(ctx, store, engine.Options{Owner: "second", Logger: quiet()})
	var active *lease.ActiveError
	if !errors.As(err, &active) || !strings.Contains(err.Error(), "first") {
		t.Fatalf("second engine: %v; want an *lease.ActiveError naming first", err)
	}
}

// A run's outcome survives the engine: reopened on the same folder, Await
// returns it at once, without starting the worker.
func TestOutcomeSurvivesReopen(t *testing.T) {
	ctx := ctxFor(t)
	url := "file://" + filepath.Join(t.TempDir(), "store")
	path := writeFile(t, "greeting.tqw.yaml", greeting)
	e, err := engine.Open(ctx, url, engine.Options{Actions: []actions.Action{shout{}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Await(ctx, "not-submitted"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("Await of an unknown run: %v; want ErrRunNotFound", err)
	}
	sub, err := e.Submit(ctx, w, map[string]any{"name": "again"}, "r1")
	if err != nil || !sub.NewlySubmitted {
		t.Fatalf("Submit: %+v %v", sub, err)
	}
	if _, err := e.Await(ctx, "r1"); !errors.Is(err, engine.ErrNotStarted) {
		t.Fatalf("Await before Start: %v; want ErrNotStarted", err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err == nil {
		t.Fatal("a second Start succeeded")
	}
	o, err := e.Await(ctx, "r1")
	if err != nil || o.Status != runstate.Succeeded || string(o.Result) != `"HELLO AGAIN!"` {
		t.Fatalf("Await: %+v %v", o, err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	e2, err := engine.Open(ctx, url, engine.Options{Actions: []actions.Action{shout{}}, Logger: quiet()})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer e2.Close(ctx)
	o2, err := e2.Await(ctx, "r1")
	if err != nil || o2.Status != runstate.Succeeded || string(o2.Result) != string(o.Result) {
		t.Fatalf("Await after reopening: %+v %v", o2, err)
	}
	// The same id and input again is a no-op.
	if sub, err := e2.Submit(ctx, w, map[string]any{"name": "again"}, "r1"); err == nil && sub.NewlySubmitted {
		t.Fatalf("resubmitting r1 started it again: %+v", sub)
	}
}

// Run needs the worker; it says so rather than wait forever.
func TestRunBeforeStart(t *testing.T) {
	ctx := ctxFor(t)
	e, err := engine.Open(ctx, "mem://engine-unstarted", engine.Options{Actions: []actions.Action{shout{}}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	w, err := e.Load(writeFile(t, "greeting.tqw.yaml", greeting))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(ctx, w, map[string]any{"name": "x"}); !errors.Is(err, engine.ErrNotStarted) {
		t.Fatalf("Run before Start: %v; want ErrNotStarted", err)
	}
}

// A name taken by a built-in action cannot be registered again.
func TestDuplicateActionRefused(t *testing.T) {
	ctx := ctxFor(t)
	_, err := engine.Open(ctx, "mem://engine-dup", engine.Options{Actions: []actions.Action{named("http")}, Logger: quiet()})
	if !errors.Is(err, actions.ErrDuplicate) {
		t.Fatalf("registering http again: %v; want ErrDuplicate", err)
	}
	// Nothing was left holding the store.
	e, err := engine.Open(ctx, "mem://engine-dup", engine.Options{Logger: quiet()})
	if err != nil {
		t.Fatalf("open after a refused Open: %v", err)
	}
	_ = e.Close(ctx)
}

type named string

func (n named) Name() string                                      { return string(n) }
func (named) Execute(context.Context, *actions.Call) (any, error) { return nil, nil }
