package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/kv"
	"github.com/tqw-dsl/tqw/runtime/objstore"
	"github.com/tqw-dsl/tqw/runtime/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/objstore/storeurl"
)

// kvBench measures runtime/kv: durable commit throughput and latency with
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
	for _, url := range cfg.stores {
		inner, err := storeurl.Open(ctx, url)
		if err != nil {
			return err
		}
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
				r.Store = url
				if err := cfg.emit(r); err != nil {
					return err
				}
				if err := cleanKV(ctx, inner, prefix); err != nil {
					return err
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
				r.Store = url
				if err := cfg.emit(r); err != nil {
					return err
				}
				if err := cleanKV(ctx, inner, prefix); err != nil {
					return err
				}
			}
		}
	}
	return nil
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
	before := store.Counts()
	statsBefore := db.Stats()
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
			for {
				n := next.Add(1) - 1
				if ctx.Err() != nil || cfg.done(n, start) {
					return
				}
				key := fmt.Appendf(nil, "k/%04d/%012d", w, n)
				t0 := time.Now()
				err := db.Update(ctx, func(tx *kv.Tx) error { return tx.Put(key, val) })
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
	st := db.Stats()
	walPuts := st.WALPuts - statsBefore.WALPuts
	per := func(n int64) float64 { return float64(n) / float64(max(ops, 1)) }
	return Result{
		Bench: "kv", Concurrency: c, Ops: ops, Seconds: secs,
		OpsPerSec: float64(ops) / secs, P50Ms: all.Percentile(50), P99Ms: all.Percentile(99),
		PutsPerOp: per(d.Puts), GetsPerOp: per(d.Gets), ListsPerOp: per(d.Lists),
		Extra: map[string]any{
			"op":                  "durable_commit",
			"value_size":          kvBench.valueSize,
			"put_latency_ms":      float64(kvBench.putLatency) / float64(time.Millisecond),
			"wal_puts":            walPuts,
			"commits_per_wal_put": float64(ops) / float64(max(walPuts, 1)),
			"checkpoints":         st.Checkpoints - statsBefore.Checkpoints,
			"flush_p50_ms":        float64(st.FlushLatency.P50()) / float64(time.Millisecond),
		},
	}, nil
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
	secs := time.Since(start).Seconds()
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
	ms := secs * 1000
	return Result{
		Bench: "kv", Concurrency: 1, Ops: 1, Seconds: secs, OpsPerSec: 1 / secs,
		P50Ms: ms, P99Ms: ms, PutsPerOp: float64(d.Puts), GetsPerOp: float64(d.Gets), ListsPerOp: float64(d.Lists),
		Extra: map[string]any{"op": op, "keys": n, "value_size": kvBench.valueSize, "wal_objects_replayed": st.WALObjectsSinceCheckpoint},
	}, nil
}

// cleanKV deletes every object under the run's prefix.
func cleanKV(ctx context.Context, s objstore.Store, prefix string) error {
	for {
		objs, err := s.List(ctx, prefix+"/", "", 1000)
		if err != nil {
			return fmt.Errorf("clean up %s: %w", prefix, err)
		}
		if len(objs) == 0 {
			return nil
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(objs))
		sem := make(chan struct{}, 16)
		for _, o := range objs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := s.Delete(ctx, o.Key); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return fmt.Errorf("clean up %s: %w", prefix, err)
		}
	}
}
