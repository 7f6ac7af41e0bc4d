package interpreter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// TestPrepareRunMatchesSubmit checks that a run prepared by PrepareRun and
// submitted through the runtime is the submission Interpreter.Submit makes:
// same pins, same input bytes, and it runs the call tree to the end.
func TestPrepareRunMatchesSubmit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("child.yaml", `tqw: v1
name: remote-child
input: {type: object, required: [n], properties: {n: {type: integer}}}
steps:
  - id: double
    succeed: "${ input.n * 2 }"
`)
	parent := write("parent.yaml", `tqw: v1
name: remote-parent
input: {type: object, required: [n], properties: {n: {type: integer}}}
steps:
  - id: kid
    call: {workflow: ./child.yaml, input: {n: "${ input.n }"}}
  - id: done
    succeed: "got ${ output }"
`)
	w, err := Load(parent, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := mem.New()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Rejected inputs and run ids write nothing.
	for _, c := range []struct {
		input any
		runID string
		want  error
	}{
		{map[string]any{"n": "x"}, "r1", dsl.ErrInputInvalid},
		{map[string]any{"n": 1}, "bad/id", runstate.ErrInvalidRunID},
	} {
		if _, err := PrepareRun(ctx, store, nil, w, c.input, c.runID); !errors.Is(err, c.want) {
			t.Fatalf("PrepareRun(%v, %q) = %v; want %v", c.input, c.runID, err, c.want)
		}
	}
	if objs, err := store.List(ctx, "", "", 10); err != nil || len(objs) != 0 {
		t.Fatalf("a rejected PrepareRun wrote %v (%v)", objs, err)
	}

	spec, err := PrepareRun(ctx, store, nil, w, map[string]any{"n": 21}, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if spec.RunID != "r1" || spec.Headers[HeaderWorkflow] != "remote-parent" {
		t.Fatalf("spec %+v", spec)
	}
	defs, err := store.List(ctx, defsPrefix, "", 10)
	if err != nil || len(defs) != 2 {
		t.Fatalf("pinned %v (%v); want the parent and the child", defs, err)
	}
	for _, wf := range w.all {
		b, _, err := store.Get(ctx, defKey(wf.Hash))
		if err != nil || string(b) != string(wf.Source) {
			t.Fatalf("definition of %s: %v", wf.Name, err)
		}
	}
	// Pinning again is a no-op.
	if _, err := PrepareRun(ctx, store, nil, w, map[string]any{"n": 21}, "r1"); err != nil {
		t.Fatalf("second PrepareRun: %v", err)
	}

	q, err := queue.Open(ctx, store, queue.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	it, err := New(q, store, Options{Actions: builtin.New(builtin.Options{}), Logger: log, Runtime: runtime.Options{Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	rt := it.Runtime()
	done, unwatch := it.Watch("r1")
	defer unwatch()
	sub, err := rt.Submit(ctx, spec)
	if err != nil || !sub.NewlySubmitted {
		t.Fatalf("Submit of the prepared spec: %+v %v", sub, err)
	}
	// Interpreter.Submit of the same run id and input is the same
	// submission; another input is a mismatch.
	again, err := it.Submit(ctx, w, map[string]any{"n": 21}, "r1")
	if err != nil || again.NewlySubmitted {
		t.Fatalf("Interpreter.Submit of the same run: %+v %v; want an existing submission", again, err)
	}
	if _, err := it.Submit(ctx, w, map[string]any{"n": 22}, "r1"); !errors.Is(err, runtime.ErrInputMismatch) {
		t.Fatalf("Interpreter.Submit with another input: %v; want ErrInputMismatch", err)
	}
	worker := rt.Spawn(ctx)
	defer func() {
		if err := worker.Shutdown(ctx); err != nil {
			t.Errorf("worker shutdown: %v", err)
		}
	}()
	select {
	case o := <-done:
		if o.Status != runstate.Succeeded || string(o.Result) != `"got 42"` {
			t.Fatalf("outcome %+v (result %s)", o, o.Result)
		}
	case <-ctx.Done():
		t.Fatal("the prepared run did not finish")
	}
	// The finished, retained run id is refused, as Interpreter.Submit
	// refuses it; an unknown id passes.
	if _, err := PrepareRun(ctx, store, q, w, map[string]any{"n": 21}, "r1"); !errors.Is(err, ErrRunIDReused) {
		t.Fatalf("PrepareRun of a finished run id: %v; want ErrRunIDReused", err)
	}
	if _, err := PrepareRun(ctx, store, q, w, map[string]any{"n": 21}, "r2"); err != nil {
		t.Fatalf("PrepareRun of a fresh run id with a reader: %v", err)
	}
}

// TestPrepareRunStoreError reports a store that refuses the pin.
func TestPrepareRunStoreError(t *testing.T) {
	w, err := Load("testdata/e2e_wait.yaml", dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = PrepareRun(context.Background(), failingPuts{mem.New()}, nil, w, map[string]any{}, "r1")
	if !errors.Is(err, errNoPuts) {
		t.Fatalf("PrepareRun on a store refusing PUTs: %v", err)
	}
}

var errNoPuts = errors.New("puts refused")

type failingPuts struct{ objstore.Store }

func (failingPuts) Put(context.Context, string, []byte, objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, errNoPuts
}

// TestSubmitPinsDefinitionsOnce counts the store requests of pinning: the
// first Submit of a call tree HEADs and PUTs each definition once, a
// second Submit of the same tree makes no request for them, and a process
// that does not know them yet (a new interpreter, PrepareRun) HEADs each
// and PUTs none.
func TestSubmitPinsDefinitionsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"child.yaml": "tqw: v1\nname: pin-child\nsteps:\n  - id: done\n    succeed: 1\n",
		"top.yaml":   "tqw: v1\nname: pin-top\nsteps:\n  - id: kid\n    call: {workflow: ./child.yaml}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w, err := Load(filepath.Join(dir, "top.yaml"), dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	raw := mem.New()
	counted := counting.New(raw)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, raw, queue.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	open := func() *Interpreter {
		it, err := New(q, counted, Options{Actions: builtin.New(builtin.Options{}), Logger: log, Runtime: runtime.Options{Logger: log}})
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	want := func(what string, heads, puts int64) {
		t.Helper()
		c := counted.Counts()
		if c.Heads != heads || c.Puts != puts || c.Gets != 0 || c.Lists != 0 || c.Deletes != 0 {
			t.Fatalf("%s: %+v; want %d HEAD and %d PUT, nothing else", what, c, heads, puts)
		}
		counted.Reset()
	}
	it := open()
	if _, err := it.Submit(ctx, w, map[string]any{}, "a1"); err != nil {
		t.Fatal(err)
	}
	want("first Submit of two definitions", 2, 2)
	for _, id := range []string{"a2", "a3"} {
		if _, err := it.Submit(ctx, w, map[string]any{}, id); err != nil {
			t.Fatal(err)
		}
	}
	want("two more Submits of the same definitions", 0, 0)
	if _, err := open().Submit(ctx, w, map[string]any{}, "b1"); err != nil {
		t.Fatal(err)
	}
	want("Submit by an interpreter that has not pinned them", 2, 0)
	if _, err := PrepareRun(ctx, counted, q, w, map[string]any{}, "c1"); err != nil {
		t.Fatal(err)
	}
	want("PrepareRun of stored definitions", 2, 0)
}
