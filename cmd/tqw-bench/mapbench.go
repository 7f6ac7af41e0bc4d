package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
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
	// Sealing as the engine and the CLI run by default: a finished item
	// run leaves the KV for its sealed segment.
	b, err := openBenchInterpreter(ctx, raw, "map.yaml", fmt.Sprintf(mapWorkflow, mapConcurrency), "bench-map", interpreter.Options{
		Runtime: runtime.Options{Concurrency: max(mapConcurrency, 8), Sealing: &runtime.SealOptions{}}})
	if err != nil {
		return err
	}
	defer b.close()
	store := b.store

	items := make([]any, mapItems)
	for i := range items {
		items[i] = i
	}
	before := store.Counts()
	start := time.Now()
	o, err := b.run(ctx, map[string]any{"items": items}, "map-1")
	if err != nil {
		return fmt.Errorf("map %w", err)
	}
	if want := fmt.Sprintf(`{"done":%d,"total":%d}`, mapItems, mapItems); string(o.Result) != want {
		return fmt.Errorf("map run: result %s; want %s", o.Result, want)
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
