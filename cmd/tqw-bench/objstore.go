package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
)

// objstore measures the raw store: put (overwrite), create (create-only
// of fresh keys, as WAL writes are), get and list latency, throughput and
// process CPU, one Result per (op, store, concurrency).
var objBench = struct {
	size, keys, listLimit int
	pack                  bool
}{}

func init() {
	register(&bench{
		name:    "objstore",
		summary: "put, get and list latency and throughput of the object store",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&objBench.size, "size", 4096, "object size in bytes for put and get")
			fs.IntVar(&objBench.keys, "keys", 1000, "distinct keys per run; puts overwrite them in turn")
			fs.IntVar(&objBench.listLimit, "list-limit", 100, "page size of each list call")
			fs.BoolVar(&objBench.pack, "pack", false, "pack the benchmark's folder first (objstore.Packer: the file store keeps it in an append-only log, as kv's WAL)")
		},
		run: runObjstore,
	})
}

func runObjstore(ctx context.Context, cfg *config) error {
	if objBench.size < 0 || objBench.keys < 1 || objBench.listLimit < 1 {
		return fmt.Errorf("--size must be >= 0, --keys and --list-limit >= 1")
	}
	return eachStore(ctx, cfg, func(url string, inner objstore.Store) error {
		store := counting.New(inner)
		for _, c := range cfg.concurrency {
			prefix := fmt.Sprintf("bench-objstore/%d-%d/", time.Now().UnixNano(), c)
			packed := false
			if objBench.pack {
				var err error
				if packed, err = objstore.Pack(ctx, store, prefix); err != nil {
					return fmt.Errorf("pack %s on %s: %w", prefix, url, err)
				}
			}
			for _, op := range []string{"put", "create", "get", "list"} {
				r, err := measureObj(ctx, cfg, store, op, prefix, c)
				if err != nil {
					return fmt.Errorf("%s on %s at concurrency %d: %w", op, url, c, err)
				}
				r.Extra["packed"] = packed
				if err := cfg.emitFor(url, r); err != nil {
					return err
				}
			}
			if err := cleanPrefix(ctx, inner, prefix); err != nil {
				return fmt.Errorf("clean up %s under %s: %w", url, prefix, err)
			}
		}
		return nil
	})
}

func objKey(prefix string, i int) string { return prefix + fmt.Sprintf("%06d", i) }

// measureObj runs op from c workers until cfg.done. The put run writes
// every key at least once, so get and list find them all.
func measureObj(ctx context.Context, cfg *config, store *counting.Store, op, prefix string, c int) (Result, error) {
	data := make([]byte, objBench.size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	stop := func(n int64, start time.Time) bool {
		return cfg.done(n, start) && (op != "put" || n >= int64(objBench.keys))
	}
	rngs := make([]*rand.Rand, c)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 99))
	}
	cpuBefore := processCPU()
	m, err := measure(ctx, cfg, c, store, stop, timed(func(ctx context.Context, w int, n int64) error {
		var err error
		switch op {
		case "put":
			_, err = store.Put(ctx, objKey(prefix, int(n)%objBench.keys), data, objstore.PutOptions{})
		case "create":
			_, err = store.Put(ctx, fmt.Sprintf("%sc%09d", prefix, n), data, objstore.CreateOnly())
		case "get":
			_, _, err = store.Get(ctx, objKey(prefix, rngs[w].IntN(objBench.keys)))
		case "list":
			after := ""
			if k := rngs[w].IntN(objBench.keys + 1); k > 0 {
				after = objKey(prefix, k-1)
			}
			_, err = store.List(ctx, prefix, after, objBench.listLimit)
		}
		return err
	}))
	cpuAfter := processCPU()
	if err != nil {
		return Result{}, err
	}
	extra := map[string]any{"op": op, "size": objBench.size, "keys": objBench.keys}
	if cpuBefore >= 0 && cpuAfter >= 0 && m.ops > 0 {
		extra["cpu_us_per_op"] = float64(cpuAfter-cpuBefore) / 1e3 / float64(m.ops)
	}
	switch op {
	case "put", "create":
		extra["mib_per_sec"] = float64(m.counts.BytesWritten) / m.secs / (1 << 20)
	case "get":
		extra["mib_per_sec"] = float64(m.counts.BytesRead) / m.secs / (1 << 20)
	case "list":
		extra["list_limit"] = objBench.listLimit
	}
	return m.result("objstore", c, m.ops, extra), nil
}
