package interpreter_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Example runs a workflow file durably on an in-memory store: the
// interpreter is both the runtime's step runner and its terminal hook.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "greet.yaml")
	_ = os.WriteFile(path, []byte(`
tqw: v1
name: greet
input: {type: object, required: [name], properties: {name: {type: string}}}
steps:
  - id: shout
    set: {loud: "${ upper(input.name) }"}
  - id: done
    succeed: "Hello, ${ vars.loud }!"
`), 0o600)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := mem.New()
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close()
	it, err := interpreter.New(q, store, interpreter.Options{Actions: builtin.New(builtin.Options{}), Logger: quiet, Runtime: runtime.Options{Logger: quiet}})
	if err != nil {
		fmt.Println(err)
		return
	}
	rt := it.Runtime()

	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	done, _ := it.Watch("run-1")
	if _, err := it.Submit(ctx, w, map[string]any{"name": "ada"}, "run-1"); err != nil {
		fmt.Println(err)
		return
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(ctx)
	out := <-done
	fmt.Println(out.Status, string(out.Result))
	// Output: succeeded "Hello, ADA!"
}
