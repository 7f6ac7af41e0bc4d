package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
)

// kvBench measures runtime/store/kv: durable commit throughput and latency with
// group commit, WAL PUTs per commit, and reopen time of a large store.
var kvBench = struct {
	valueSize   int
	putLatency  time.Duration
	reopenKeys  int
	skipCommits bool
}{}

func init() {
	register(&bench{
		name:    "kv",
		summary: "kv store: durable commits/s, latency and WAL PUTs per commit; reopen time",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&kvBench.valueSize, "value-size", 100, "value bytes per committed key")
			fs.DurationVar(&kvBench.putLatency, "put-latency", 0, "latency added to every PUT (fault injector), e.g. 100ms")
			fs.IntVar(&kvBench.reopenKeys, "reopen-keys", 0, "also measure reopening a checkpointed store of this many keys (0 = skip)")
			fs.BoolVar(&kvBench.skipCommits, "skip-commits", false, "skip the commit measurement (with --reopen-keys)")
		},
		run: runKV,
	})
}

func runKV(ctx context.Context, cfg *config) error {
	if kvBench.valueSize < 0 || kvBench.reopenKeys < 0 || kvBench.putLatency < 0 {
		return fmt.Errorf("--value-size, --reopen-keys and --put-latency must not be negative")
	}
	return eachStore(ctx, cfg, func(url string, inner objstore.Store) error {
		if kvBench.putLatency > 0 {
			fs := faults.New(inner, 1)
			fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Latency: kvBench.putLatency})
			inner = fs
		}
		store := counting.New(inner)
		if !kvBench.skipCommits {
			for _, c := range cfg.concurrency {
				prefix := fmt.Sprintf("bench-kv/%d-%d", time.Now().UnixNano(), c)
				r, err := measureKVCommits(ctx, cfg, store, prefix, c)
				if err != nil {
					return fmt.Errorf("kv commits on %s at concurrency %d: %w", url, c, err)
				}
				if err := cfg.emitFor(url, r); err != nil {
					return err
				}
				if err := cleanPrefix(ctx, inner, prefix+"/"); err != nil {
					return fmt.Errorf("clean up %s: %w", prefix, err)
				}
			}
		}
		if kvBench.reopenKeys > 0 {
			for _, checkpoint := range []bool{true, false} {
				prefix := fmt.Sprintf("bench-kv/%d-reopen", time.Now().UnixNano())
				r, err := measureKVReopen(ctx, store, prefix, kvBench.reopenKeys, checkpoint)
				if err != nil {
					return fmt.Errorf("kv reopen on %s: %w", url, err)
				}
				if err := cfg.emitFor(url, r); err != nil {
					return err
				}
				if err := cleanPrefix(ctx, inner, prefix+"/"); err != nil {
					return fmt.Errorf("clean up %s: %w", prefix, err)
				}
			}
		}
		return nil
	})
}

func quietKVOptions(prefix string) kv.Options {
	return kv.Options{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// measureKVCommits runs c committers, each committing one key per durable
// transaction, until cfg.done.
func measureKVCommits(ctx context.Context, cfg *config, store *counting.Store, prefix string, c int) (Result, error) {
	db, err := kv.Open(ctx, store, quietKVOptions(prefix))
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	val := make([]byte, kvBench.valueSize)
	statsBefore := db.Stats()
	m, err := measure(ctx, cfg, c, store, nil, timed(func(ctx context.Context, w int, n int64) error {
		key := fmt.Appendf(nil, "k/%04d/%012d", w, n)
		return db.Update(ctx, func(tx *kv.Tx) error { return tx.Put(key, val) })
	}))
	if err != nil {
		return Result{}, err
	}
	st := db.Stats()
	walPuts := st.WALPuts - statsBefore.WALPuts
	return m.result("kv", c, m.ops, map[string]any{
		"op":                  "durable_commit",
		"value_size":          kvBench.valueSize,
		"put_latency_ms":      float64(kvBench.putLatency) / float64(time.Millisecond),
		"wal_puts":            walPuts,
		"commits_per_wal_put": float64(m.ops) / float64(max(walPuts, 1)),
		"checkpoints":         st.Checkpoints - statsBefore.Checkpoints,
		"flush_p50_ms":        float64(st.FlushLatency.P50()) / float64(time.Millisecond),
	}), nil
}

// measureKVReopen fills a store with n keys (values of --value-size) and
// times one Open: "reopen" from a checkpoint, "reopen_wal" with every key
// still in the WAL (no checkpoint yet).
func measureKVReopen(ctx context.Context, store *counting.Store, prefix string, n int, checkpoint bool) (Result, error) {
	opts := quietKVOptions(prefix)
	opts.DisableAutoCheckpoint = !checkpoint
	db, err := kv.Open(ctx, store, opts)
	if err != nil {
		return Result{}, err
	}
	val := make([]byte, kvBench.valueSize)
	for i := 0; i < n; i += 5000 {
		tx := db.Begin()
		for j := i; j < min(i+5000, n); j++ {
			if err := tx.Put(fmt.Appendf(nil, "key/%012d", j), val); err != nil {
				return Result{}, err
			}
		}
		if err := tx.CommitNonDurable(ctx); err != nil {
			return Result{}, err
		}
	}
	if checkpoint {
		if err := db.Checkpoint(ctx); err != nil {
			return Result{}, err
		}
	}
	if err := db.Close(); err != nil {
		return Result{}, err
	}
	before := store.Counts()
	start := time.Now()
	db, err = kv.Open(ctx, store, opts)
	if err != nil {
		return Result{}, err
	}
	took := time.Since(start)
	st := db.Stats()
	d := store.Counts().Sub(before)
	if err := db.Close(); err != nil {
		return Result{}, err
	}
	if st.Keys != n {
		return Result{}, fmt.Errorf("reopened store has %d keys, want %d", st.Keys, n)
	}
	op := "reopen"
	if !checkpoint {
		op = "reopen_wal"
	}
	return oneOp("kv", 1, took, d, map[string]any{"op": op, "keys": n, "value_size": kvBench.valueSize, "wal_objects_replayed": st.WALObjectsSinceCheckpoint}), nil
}
