// Command embed is a Go program that embeds tqw through package
// interpreter/engine: it registers an action of its own (word_count,
// with the schema of its with), opens an engine on a store, starts the
// worker and runs a workflow file that calls the action.
//
//	go run ./examples/embed --text "a durable workflow engine in a few lines"
//
// The workflow is review.tqw.yaml, next to this file (embedded in the
// binary, so the program runs from anywhere). The default store is in
// memory; --store file://DIR keeps the run, and `tqw-dsl status RUN
// --store file://DIR` reads it afterwards.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/interpreter/engine"
)

//go:embed review.tqw.yaml
var review []byte

func main() { exampleenv.Main("embed", run) }

// wordCount is the program's own action: registered once, in
// engine.Options.Actions, its with checked at load by the schema it
// declares.
type wordCount struct{}

func (wordCount) Name() string { return "word_count" }

func (wordCount) WithSchema() json.RawMessage {
	return json.RawMessage(`{"type": "object", "properties": {"text": {"type": "string"}},
		"required": ["text"], "additionalProperties": false}`)
}

func (wordCount) Execute(_ context.Context, c *actions.Call) (any, error) {
	var args struct {
		Text string `arg:"text,required"`
	}
	if err := actions.DecodeArgs(c.Args, &args); err != nil {
		return nil, err
	}
	return map[string]any{"words": int64(len(strings.Fields(args.Text)))}, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	storeURL := fs.String("store", "mem://embed", "store URL (mem://NAME, file://DIR, s3://...)")
	text := fs.String("text", "tqw keeps every completed step durable in object storage", "the text to review")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tqw-embed")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "review.tqw.yaml")
	if err := os.WriteFile(path, review, 0o644); err != nil {
		return err
	}

	e, err := engine.Open(ctx, *storeURL, engine.Options{
		Actions: []actions.Action{wordCount{}},
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer e.Close(context.WithoutCancel(ctx))
	w, err := e.Load(path)
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	o, err := e.Run(ctx, w, map[string]any{"text": *text})
	if err != nil {
		return err
	}
	if o.Status != runstate.Succeeded {
		return fmt.Errorf("run %s %s: %s", o.RunID, o.Status, o.Error)
	}
	var result string
	if err := json.Unmarshal(o.Result, &result); err != nil {
		return fmt.Errorf("run %s: result %s: %w", o.RunID, o.Result, err)
	}
	fmt.Fprintf(out, "run %s succeeded: %s\n", o.RunID, result)
	return nil
}
