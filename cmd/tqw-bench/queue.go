package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// queueBench measures runtime/store/queue: end-to-end throughput and latency of
// enqueue -> claim -> ack, claim latency on a deep queue, and reopen time
// of a large store.
var queueBench = struct {
	modes                  string
	producers, workers     int
	batch, payload         int
	deep                   int
	reopenPending, reopenD int
	backlog                int
}{}

func init() {
	register(&bench{
		name:    "queue",
		summary: "job queue: enqueue->claim->ack throughput and latency, deep-queue claim latency, reopen time",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&queueBench.modes, "modes", "e2e,deep,reopen", "measurements to run: e2e, deep, reopen")
			fs.IntVar(&queueBench.producers, "producers", 0, "e2e producers (default: --concurrency)")
			fs.IntVar(&queueBench.workers, "workers", 0, "e2e workers (default: --concurrency)")
			fs.IntVar(&queueBench.backlog, "backlog", 0, "e2e: most jobs enqueued but not yet acked; producers wait beyond it (default 2 x workers x batch)")
			fs.IntVar(&queueBench.batch, "batch", 1, "jobs per EnqueueBatch call of an e2e producer")
			fs.IntVar(&queueBench.payload, "payload", 256, "payload bytes per job")
			fs.IntVar(&queueBench.deep, "deep", 100_000, "pending jobs before the deep-queue claim measurement")
			fs.IntVar(&queueBench.reopenPending, "reopen-pending", 100_000, "pending jobs in the reopen measurement")
			fs.IntVar(&queueBench.reopenD, "reopen-done", 1_000_000, "retained done jobs in the reopen measurement")
		},
		run: runQueue,
	})
}

func runQueue(ctx context.Context, cfg *config) error {
	if queueBench.payload < 8 || queueBench.batch < 1 || queueBench.backlog < 0 || queueBench.deep < 1 || queueBench.reopenPending < 0 || queueBench.reopenD < 0 {
		return fmt.Errorf("--payload must be >= 8, --batch and --deep >= 1, --backlog and --reopen-* >= 0")
	}
	return eachStore(ctx, cfg, func(url string, inner objstore.Store) error {
		store := counting.New(inner)
		for _, mode := range strings.Split(queueBench.modes, ",") {
			for _, c := range cfg.concurrency {
				prefix := fmt.Sprintf("bench-queue/%s-%d-%d", mode, c, time.Now().UnixNano())
				var r Result
				var err error
				switch strings.TrimSpace(mode) {
				case "e2e":
					r, err = queueE2E(ctx, cfg, store, prefix, c)
				case "deep":
					r, err = queueDeep(ctx, cfg, store, prefix, c)
				case "reopen":
					r, err = queueReopen(ctx, store, prefix, c)
				default:
					return fmt.Errorf("--modes: unknown mode %q (want e2e, deep, reopen)", mode)
				}
				if err != nil {
					return fmt.Errorf("queue %s on %s at concurrency %d: %w", mode, url, c, err)
				}
				if err := cfg.emitFor(url, r); err != nil {
					return err
				}
				if err := cleanPrefix(ctx, inner, prefix+"/"); err != nil {
					return fmt.Errorf("clean up %s under %s: %w", url, prefix, err)
				}
			}
		}
		return nil
	})
}

func benchQueueOptions(prefix string, cfg queue.QueueConfig) queue.Options {
	return queue.Options{
		Prefix:        prefix,
		DefaultConfig: cfg,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func benchPayload(start time.Time) []byte {
	p := make([]byte, queueBench.payload)
	binary.BigEndian.PutUint64(p, uint64(start.UnixNano()))
	return p
}

// queueE2E runs producers that enqueue durably and workers that claim and
// ack durably, and reports acked jobs per second, the enqueue-to-ack
// latency and the PUTs per job state change (3 per job).
func queueE2E(ctx context.Context, cfg *config, store *counting.Store, prefix string, c int) (Result, error) {
	producers, workers := queueBench.producers, queueBench.workers
	if producers <= 0 {
		producers = c
	}
	if workers <= 0 {
		workers = c
	}
	q, err := queue.Open(ctx, store, benchQueueOptions(prefix, queue.QueueConfig{LeaseDuration: time.Minute}))
	if err != nil {
		return Result{}, err
	}
	defer q.Close()
	before := store.Counts()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var enqueued, acked atomic.Int64
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; stop() })
	}
	start := time.Now()
	// The backlog is capped so latency measures the queue, not a pile-up:
	// a producer takes a slot per job, a worker frees it at the ack.
	backlog := queueBench.backlog
	if backlog == 0 {
		backlog = 2 * workers * queueBench.batch
	}
	backlog = max(backlog, queueBench.batch)
	slots := make(chan struct{}, backlog)
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil && !cfg.done(acked.Load(), start) {
				for range queueBench.batch {
					select {
					case slots <- struct{}{}:
					case <-runCtx.Done():
						return
					}
				}
				jobs := make([]queue.NewJob, queueBench.batch)
				for i := range jobs {
					jobs[i] = queue.NewJob{Queue: "bench", Payload: benchPayload(time.Now())}
				}
				if _, err := q.EnqueueBatch(runCtx, jobs); err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					return
				}
				enqueued.Add(int64(len(jobs)))
			}
		}()
	}
	lats := make([]Latencies, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cl, err := q.ClaimWait(runCtx, "bench")
				if err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					return
				}
				if err := q.Ack(runCtx, cl, nil); err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					return
				}
				lats[w].Add(time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(cl.Job.Payload)))))
				<-slots
				if cfg.done(acked.Add(1), start) {
					stop()
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
	n := int64(all.Len())
	d := store.Counts().Sub(before)
	st := q.DB().Stats()
	return newResult("queue-e2e", c, n, secs, &all, d, map[string]any{
		"producers": producers, "workers": workers, "batch": queueBench.batch, "payload": queueBench.payload, "backlog": backlog,
		"puts_per_state_change": float64(d.Puts) / float64(max(3*n, 1)),
		"kv_commits":            st.Commits, "kv_wal_puts": st.WALPuts,
	}), nil
}

// fill enqueues n jobs in batches of 1000.
func fill(ctx context.Context, q *queue.Queue, name string, n int) error {
	for done := 0; done < n; {
		k := min(1000, n-done)
		jobs := make([]queue.NewJob, k)
		for i := range jobs {
			jobs[i] = queue.NewJob{Queue: name, Payload: benchPayload(time.Now())}
		}
		if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// queueDeep fills the queue with --deep pending jobs, then measures Claim
// latency from c concurrent claimers (each claim is followed by its ack,
// outside the measured time).
func queueDeep(ctx context.Context, cfg *config, store *counting.Store, prefix string, c int) (Result, error) {
	q, err := queue.Open(ctx, store, benchQueueOptions(prefix, queue.QueueConfig{LeaseDuration: time.Hour}))
	if err != nil {
		return Result{}, err
	}
	defer q.Close()
	if err := fill(ctx, q, "deep", queueBench.deep); err != nil {
		return Result{}, fmt.Errorf("fill: %w", err)
	}
	limit := int64(queueBench.deep / 2) // stay deep: never drain below half
	stop := func(n int64, start time.Time) bool { return n >= limit || cfg.done(n, start) }
	m, err := measure(ctx, cfg, c, store, stop, func(ctx context.Context, _ int, _ int64) (time.Duration, error) {
		t0 := time.Now()
		cl, err := q.Claim(ctx, "deep")
		took := time.Since(t0)
		if err == nil && cl == nil {
			err = errors.New("deep queue ran empty")
		}
		if err == nil {
			err = q.Ack(ctx, cl, nil)
		}
		return took, err
	})
	if err != nil {
		return Result{}, err
	}
	return m.result("queue-claim-deep", c, m.ops, map[string]any{"depth": queueBench.deep,
		"note": "latency of Claim only; each claim's ack is outside the timer; puts include the acks"}), nil
}

// queueReopen builds a store with --reopen-pending pending and
// --reopen-done retained done jobs, closes it and times Open.
func queueReopen(ctx context.Context, store *counting.Store, prefix string, c int) (Result, error) {
	qc := queue.QueueConfig{LeaseDuration: time.Hour, KeepDoneJobs: 365 * 24 * time.Hour}
	opts := benchQueueOptions(prefix, qc)
	q, err := queue.Open(ctx, store, opts)
	if err != nil {
		return Result{}, err
	}
	buildStart := time.Now()
	if err := fill(ctx, q, "done", queueBench.reopenD); err != nil {
		q.Close()
		return Result{}, fmt.Errorf("fill: %w", err)
	}
	// Complete them with many concurrent ackers so acks share WAL PUTs.
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range max(c*16, 256) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cs, err := q.ClaimBatch(ctx, "done", 16)
				if err == nil && len(cs) == 0 {
					return
				}
				for _, cl := range cs {
					if err == nil {
						err = q.Ack(ctx, cl, nil)
					}
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		q.Close()
		return Result{}, fmt.Errorf("complete: %w", firstErr)
	}
	if err := fill(ctx, q, "pending", queueBench.reopenPending); err != nil {
		q.Close()
		return Result{}, fmt.Errorf("fill pending: %w", err)
	}
	if err := q.DB().Checkpoint(ctx); err != nil {
		q.Close()
		return Result{}, fmt.Errorf("checkpoint: %w", err)
	}
	if err := q.Close(); err != nil {
		return Result{}, err
	}
	build := time.Since(buildStart)
	before := store.Counts()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	t0 := time.Now()
	q, err = queue.Open(ctx, store, opts)
	took := time.Since(t0)
	if err != nil {
		return Result{}, err
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	defer q.Close()
	sp, err := q.Stats(ctx, "pending")
	if err != nil {
		return Result{}, err
	}
	sd, err := q.Stats(ctx, "done")
	if err != nil {
		return Result{}, err
	}
	if sp.Pending != int64(queueBench.reopenPending) || sd.Done != int64(queueBench.reopenD) {
		return Result{}, fmt.Errorf("after reopen: %d pending, %d done; want %d and %d", sp.Pending, sd.Done, queueBench.reopenPending, queueBench.reopenD)
	}
	d := store.Counts().Sub(before)
	return oneOp("queue-reopen", c, took, d, map[string]any{
		"pending": queueBench.reopenPending, "done": queueBench.reopenD, "build_seconds": build.Seconds(),
		"bytes_read": d.BytesRead, "heap_mib_after_open": float64(m1.HeapAlloc) / (1 << 20),
	}), nil
}
