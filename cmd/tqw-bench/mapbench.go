package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

var (
	mapItems, mapConcurrency int
	mapMemProf               string
)

func init() {
	register(&bench{
		name:    "map",
		summary: "one map step over N cheap items (each a durable child run: a set and a succeed step), at a concurrency: wall time, peak RSS and object-store requests per item",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&mapItems, "items", 10000, "items of the map")
			fs.IntVar(&mapConcurrency, "map-concurrency", 32, "the map step's concurrency")
			fs.StringVar(&mapMemProf, "memprofile", "", "write a heap profile once the map run ended, to PREFIX-<items>.pprof")
		},
		run: func(ctx context.Context, cfg *config) error {
			return eachStore(ctx, cfg, func(url string, raw objstore.Store) error { return benchMap(ctx, cfg, url, raw) })
		},
	})
}

const mapWorkflow = `tqw: v1
name: bench-map
steps:
  - id: each
    map:
      items: "${ input.items }"
      concurrency: %d
      steps:
        - id: double
          set: {v: "${ item * 2 }"}
        - id: item_done
          succeed: "${ vars.v }"
  - id: done
    succeed: {done: "${ output.done }", total: "${ output.total }"}
`

func benchMap(ctx context.Context, cfg *config, url string, raw objstore.Store) error {
	path, cleanup, err := workflowFile("map.yaml", fmt.Sprintf(mapWorkflow, mapConcurrency))
	if err != nil {
		return err
	}
	defer cleanup()
	w, err := interpreter.Load(path, dsl.Options{})
	if err != nil {
		return err
	}
	store := counting.New(raw)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	q, err := queue.Open(ctx, store, queue.Options{Logger: quiet, Prefix: fmt.Sprintf("bench-map-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	defer q.Close()
	it, err := interpreter.New(q, store, interpreter.Options{Actions: builtin.New(builtin.Options{}), Logger: quiet,
		// Sealing as the engine and the CLI run by default: a finished
		// item run leaves the KV for its sealed segment.
		Runtime: runtime.Options{Logger: quiet, Concurrency: max(mapConcurrency, 8), Sealing: &runtime.SealOptions{}}})
	if err != nil {
		return err
	}
	worker := it.Runtime().Spawn(ctx)
	defer func() { _ = worker.Shutdown(context.Background()) }()

	items := make([]any, mapItems)
	for i := range items {
		items[i] = i
	}
	before := store.Counts()
	start := time.Now()
	done, unwatch := it.Watch("map-1")
	defer unwatch()
	if _, err := it.Submit(ctx, w, map[string]any{"items": items}, "map-1"); err != nil {
		return err
	}
	select {
	case o := <-done:
		if o.Status != runstate.Succeeded {
			return fmt.Errorf("map run: %s: %s", o.Status, o.Error)
		}
		if want := fmt.Sprintf(`{"done":%d,"total":%d}`, mapItems, mapItems); string(o.Result) != want {
			return fmt.Errorf("map run: result %s; want %s", o.Result, want)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	took := time.Since(start)
	if err := heapProfile(mapMemProf, fmt.Sprint(mapItems)); err != nil {
		return err
	}
	d := store.Counts().Sub(before)
	r := oneOp("map", mapConcurrency, took, d, map[string]any{
		"items": mapItems, "peak_rss_mb": procStatusMB("VmHWM"),
		"items_per_sec":     float64(mapItems) / took.Seconds(),
		"puts_per_item":     float64(d.Puts) / float64(mapItems),
		"gets_per_item":     float64(d.Gets) / float64(mapItems),
		"requests_per_item": float64(d.Total()) / float64(mapItems),
	})
	return cfg.emitFor(url, r)
}
