package main

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// eachStore opens every --store URL in turn and calls f with it.
func eachStore(ctx context.Context, cfg *config, f func(url string, inner objstore.Store) error) error {
	for _, url := range cfg.stores {
		inner, err := storeurl.Open(ctx, url)
		if err != nil {
			return err
		}
		if err := f(url, inner); err != nil {
			return err
		}
	}
	return nil
}

// emitFor labels r with the store URL it ran on and emits it.
func (c *config) emitFor(url string, r Result) error {
	r.Store = url
	return c.emit(r)
}

// workerOp is one operation of worker w, the n-th (0-based) of the whole
// measurement. It returns the latency to record.
type workerOp func(ctx context.Context, w int, n int64) (time.Duration, error)

// timed turns f into a workerOp that records f's whole duration.
func timed(f func(ctx context.Context, w int, n int64) error) workerOp {
	return func(ctx context.Context, w int, n int64) (time.Duration, error) {
		t0 := time.Now()
		err := f(ctx, w, n)
		return time.Since(t0), err
	}
}

// measurement is what measure observed.
type measurement struct {
	ops    int64
	secs   float64
	lats   Latencies
	counts counting.Counts // requests made during the measurement
}

// measure runs workers goroutines, each taking the next operation number
// from a shared counter and calling op, until stop(n) (cfg.done when nil)
// or ctx ends. The first error cancels the other workers' ctx and is
// returned. store, when not nil, counts the requests made meanwhile. Only
// successful operations count and are recorded.
func measure(ctx context.Context, cfg *config, workers int, store *counting.Store, stop func(n int64, start time.Time) bool, op workerOp) (measurement, error) {
	if stop == nil {
		stop = cfg.done
	}
	var before counting.Counts
	if store != nil {
		before = store.Counts()
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	lats := make([]Latencies, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1) - 1
				if runCtx.Err() != nil || stop(n, start) {
					return
				}
				d, err := op(runCtx, w, n)
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				lats[w].Add(d)
			}
		}()
	}
	wg.Wait()
	m := measurement{secs: time.Since(start).Seconds()}
	if firstErr != nil {
		return m, firstErr
	}
	if err := ctx.Err(); err != nil {
		return m, err
	}
	for i := range lats {
		m.lats.Merge(&lats[i])
	}
	m.ops = int64(m.lats.Len())
	if store != nil {
		m.counts = store.Counts().Sub(before)
	}
	return m, nil
}

// result builds the Result of a measurement of ops operations (which may
// differ from m.ops when one measured operation stands for several).
func (m *measurement) result(bench string, c int, ops int64, extra map[string]any) Result {
	return newResult(bench, c, ops, m.secs, &m.lats, m.counts, extra)
}

// newResult builds a Result of ops operations in secs seconds with the
// latencies lats and the requests d; requests per op are 0 without ops.
func newResult(bench string, c int, ops int64, secs float64, lats *Latencies, d counting.Counts, extra map[string]any) Result {
	per := func(x int64) float64 {
		if ops == 0 {
			return 0
		}
		return float64(x) / float64(ops)
	}
	return Result{
		Bench: bench, Concurrency: c, Ops: ops, Seconds: secs, OpsPerSec: float64(ops) / secs,
		P50Ms: lats.Percentile(50), P99Ms: lats.Percentile(99),
		PutsPerOp: per(d.Puts), GetsPerOp: per(d.Gets), ListsPerOp: per(d.Lists),
		Extra: extra,
	}
}

// oneOp builds the Result of a single timed operation (a reopen), whose
// requests per op are its requests.
func oneOp(bench string, c int, took time.Duration, d counting.Counts, extra map[string]any) Result {
	var l Latencies
	l.Add(took)
	return newResult(bench, c, 1, took.Seconds(), &l, d, extra)
}

// cleanPrefix deletes every object under prefix, 32 at a time.
func cleanPrefix(ctx context.Context, s objstore.Store, prefix string) error {
	for {
		l, err := s.List(ctx, prefix, "", 1000)
		if err != nil {
			return err
		}
		if len(l) == 0 {
			return nil
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(l))
		sem := make(chan struct{}, 32)
		for _, o := range l {
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
			return fmt.Errorf("delete under %s: %w", prefix, err)
		}
	}
}

// cpuProfile writes a CPU profile to prefix-name.pprof until the returned
// stop is called; with an empty prefix (no --cpuprofile) it does nothing.
func cpuProfile(prefix, name string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", f.Name(), err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// heapProfile writes the live heap to prefix-name.pprof; with an empty
// prefix it does nothing.
func heapProfile(prefix, name string) error {
	if prefix == "" {
		return nil
	}
	// The heap profile lags up to two collections behind.
	goruntime.GC()
	goruntime.GC()
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile %s: %w", f.Name(), err)
	}
	return f.Close()
}
