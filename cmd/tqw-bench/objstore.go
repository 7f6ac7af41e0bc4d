package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/objstore"
	"github.com/tqw-dsl/tqw/runtime/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/objstore/storeurl"
)

// objstore measures the raw store: put, get and list latency and
// throughput, one Result per (op, store, concurrency).
var objBench = struct {
	size, keys, listLimit int
}{}

func init() {
	register(&bench{
		name:    "objstore",
		summary: "put, get and list latency and throughput of the object store",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&objBench.size, "size", 4096, "object size in bytes for put and get")
			fs.IntVar(&objBench.keys, "keys", 1000, "distinct keys per run; puts overwrite them in turn")
			fs.IntVar(&objBench.listLimit, "list-limit", 100, "page size of each list call")
		},
		run: runObjstore,
	})
}

func runObjstore(ctx context.Context, cfg *config) error {
	if objBench.size < 0 || objBench.keys < 1 || objBench.listLimit < 1 {
		return fmt.Errorf("--size must be >= 0, --keys and --list-limit >= 1")
	}
	for _, url := range cfg.stores {
		inner, err := storeurl.Open(ctx, url)
		if err != nil {
			return err
		}
		store := counting.New(inner)
		for _, c := range cfg.concurrency {
			prefix := fmt.Sprintf("bench-objstore/%d-%d/", time.Now().UnixNano(), c)
			for _, op := range []string{"put", "get", "list"} {
				r, err := measureObj(ctx, cfg, store, op, prefix, c)
				if err != nil {
					return fmt.Errorf("%s on %s at concurrency %d: %w", op, url, c, err)
				}
				r.Store = url
				if err := cfg.emit(r); err != nil {
					return err
				}
			}
			if err := cleanObj(ctx, inner, prefix, c); err != nil {
				return fmt.Errorf("clean up %s under %s: %w", url, prefix, err)
			}
		}
	}
	return nil
}

func objKey(prefix string, i int) string { return prefix + fmt.Sprintf("%06d", i) }

// measureObj runs op from c workers until cfg.done. The put run writes
// every key at least once, so get and list find them all.
func measureObj(ctx context.Context, cfg *config, store *counting.Store, op, prefix string, c int) (Result, error) {
	data := make([]byte, objBench.size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	before := store.Counts()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	lats := make([]Latencies, c)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for {
				n := next.Add(1) - 1
				if ctx.Err() != nil || (cfg.done(n, start) && (op != "put" || n >= int64(objBench.keys))) {
					return
				}
				t0 := time.Now()
				var err error
				switch op {
				case "put":
					_, err = store.Put(ctx, objKey(prefix, int(n)%objBench.keys), data, objstore.PutOptions{})
				case "get":
					_, _, err = store.Get(ctx, objKey(prefix, rng.IntN(objBench.keys)))
				case "list":
					after := ""
					if k := rng.IntN(objBench.keys + 1); k > 0 {
						after = objKey(prefix, k-1)
					}
					_, err = store.List(ctx, prefix, after, objBench.listLimit)
				}
				lats[w].Add(time.Since(t0))
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return Result{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var all Latencies
	for i := range lats {
		all.Merge(&lats[i])
	}
	ops := int64(all.Len())
	d := store.Counts().Sub(before)
	per := func(n int64) float64 { return float64(n) / float64(max(ops, 1)) }
	extra := map[string]any{"op": op, "size": objBench.size, "keys": objBench.keys}
	switch op {
	case "put":
		extra["mib_per_sec"] = float64(d.BytesWritten) / secs / (1 << 20)
	case "get":
		extra["mib_per_sec"] = float64(d.BytesRead) / secs / (1 << 20)
	case "list":
		extra["list_limit"] = objBench.listLimit
	}
	return Result{
		Bench: "objstore", Concurrency: c, Ops: ops, Seconds: secs,
		OpsPerSec: float64(ops) / secs, P50Ms: all.Percentile(50), P99Ms: all.Percentile(99),
		PutsPerOp: per(d.Puts), GetsPerOp: per(d.Gets), ListsPerOp: per(d.Lists),
		Extra: extra,
	}, nil
}

// cleanObj deletes the run's keys with c workers.
func cleanObj(ctx context.Context, s objstore.Store, prefix string, c int) error {
	keys := make(chan string)
	errs := make(chan error, c)
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if err := s.Delete(ctx, k); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range objBench.keys {
		keys <- objKey(prefix, i)
	}
	close(keys)
	wg.Wait()
	close(errs)
	return <-errs
}
