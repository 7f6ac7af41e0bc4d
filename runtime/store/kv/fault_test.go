package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// history is what a crash/fault workload acknowledged: per worker, the
// highest commit index acknowledged durable.
type history struct {
	mu    sync.Mutex
	acked map[int]int
}

func newHistory() *history { return &history{acked: map[int]int{}} }

func (h *history) ack(w, i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i > h.acked[w] {
		h.acked[w] = i
	}
}

// commitWorkload runs workers that each commit, in order, key w/<i> plus
// a non-conflicting add to "total", until ctx ends or n commits are done.
// Worker w resumes after next[w] (commits already present).
func commitWorkload(ctx context.Context, db *DB, workers, n int, next map[int]int, h *history) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next[w] + 1; i <= next[w]+n && ctx.Err() == nil; i++ {
				err := db.Update(ctx, func(tx *Tx) error {
					if err := tx.Put(fmt.Appendf(nil, "w%02d/%08d", w, i), []byte(strconv.Itoa(i))); err != nil {
						return err
					}
					return tx.Add([]byte("total"), 1)
				})
				if err != nil {
					return // crash, fence or cancellation: stop this worker
				}
				h.ack(w, i)
			}
		}()
	}
	wg.Wait()
}

// verifyPrefix checks the state is a prefix of the history: every worker's
// keys are 1..k without holes, k >= its acknowledged commits, and "total"
// equals the number of commits present. It returns k per worker.
func verifyPrefix(t *testing.T, db *DB, h *history) map[int]int {
	t.Helper()
	ctx := context.Background()
	present := map[int][]int{}
	count := 0
	err := db.Scan(ctx, PrefixRange([]byte("w")), func(k, v []byte) (bool, error) {
		w, _ := strconv.Atoi(string(k[1:3]))
		i, _ := strconv.Atoi(string(k[4:]))
		if string(v) != strconv.Itoa(i) {
			return false, fmt.Errorf("key %s holds %q", k, v)
		}
		present[w] = append(present[w], i)
		count++
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	next := map[int]int{}
	for w, is := range present {
		sort.Ints(is)
		for j, i := range is {
			if i != j+1 {
				t.Fatalf("worker %d: commits %v have a hole (not a prefix)", w, is)
			}
		}
		next[w] = len(is)
	}
	h.mu.Lock()
	for w, a := range h.acked {
		if next[w] < a {
			t.Fatalf("worker %d: commit %d was acknowledged durable but only %d are present", w, a, next[w])
		}
	}
	h.mu.Unlock()
	var total int64
	if err := db.View(ctx, func(tx *Tx) error {
		var err error
		total, err = tx.Counter(ctx, []byte("total"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if total != int64(count) {
		t.Fatalf("total counter %d != %d commits present (applied twice or lost)", total, count)
	}
	return next
}

func TestFaultsNothingLostNothingTwice(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 42)
	fs.Set(
		faults.Rule{Ops: faults.OpPut, Rate: 0.15, LoseResponse: true},
		faults.Rule{Ops: faults.OpPut, Rate: 0.15},
		faults.Rule{Ops: faults.OpGet | faults.OpList, Rate: 0.15},
		faults.Rule{Rate: 0.2, Latency: time.Millisecond},
	)
	opts := quietOpts()
	opts.CheckpointWALObjects = 15
	opts.ChunkBytes = 512
	h := newHistory()
	next := map[int]int{}
	for round := range 4 {
		db, err := Open(ctx, fs, opts)
		if err != nil {
			t.Fatalf("round %d: Open under faults: %v", round, err)
		}
		commitWorkload(ctx, db, 6, 15, next, h)
		next = verifyPrefix(t, db, h)
		if err := db.Close(); err != nil {
			t.Fatalf("Close under faults: %v", err)
		}
	}
	fs.Clear()
	db := mustOpen(t, inner, opts)
	defer db.Close()
	got := verifyPrefix(t, db, h)
	for w := range 6 {
		if got[w] != 60 {
			t.Fatalf("worker %d: %d commits present, want 60", w, got[w])
		}
	}
}

// TestCrashMemFaults abandons the DB mid-flight (the in-process SIGKILL)
// while faults inject errors, lost responses and latency, then reopens on
// the same store and checks the state is a prefix holding every
// acknowledged commit. KV_CRASH_MEM_ROUNDS sets the rounds (default 200).
func TestCrashMemFaults(t *testing.T) {
	t.Parallel()
	rounds := envInt("KV_CRASH_MEM_ROUNDS", 200)
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 7)
	fs.Set(
		faults.Rule{Ops: faults.OpPut, Rate: 0.1, LoseResponse: true},
		faults.Rule{Ops: faults.OpPut | faults.OpGet, Rate: 0.1},
		faults.Rule{Rate: 0.3, Latency: 200 * time.Microsecond},
	)
	opts := quietOpts()
	opts.CheckpointWALObjects = 10
	opts.ChunkBytes = 1024
	opts.CloseTimeout = time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHistory()
	next := map[int]int{}
	for round := range rounds {
		db, err := Open(ctx, fs, opts)
		if err != nil {
			t.Fatalf("round %d: Open: %v", round, err)
		}
		next = verifyPrefix(t, db, h)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			commitWorkload(wctx, db, 4, 1000, next, h)
		}()
		// Let a random number of commits through, then crash.
		for range rng.IntN(20) {
			if err := db.Sync(ctx); err != nil {
				break
			}
		}
		db.abandon()
		cancel()
		<-done
	}
	fs.Clear()
	db := mustOpen(t, inner, opts)
	defer db.Close()
	verifyPrefix(t, db, h)
}

func TestLostResponseOnWALIsResolvedByReadBack(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 1)
	db := mustOpen(t, fs, quietOpts())
	defer db.Close()
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "wal/", Nth: 1, LoseResponse: true})
	put(t, db, "a", "1")
	fs.Clear()
	put(t, db, "b", "2")
	if s := db.Stats(); s.DurableCommits != 2 || s.WALPuts != 2 {
		t.Fatalf("stats %+v: want 2 durable commits in 2 WAL objects", s)
	}
	objs, _ := inner.List(ctx, "wal/", "", 0)
	if len(objs) != 3 { // fence + 2
		t.Fatalf("WAL objects %d, want 3 (a lost response must not write twice)", len(objs))
	}
}

func TestOutageReturnsErrorNeverHalfApplied(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 1)
	opts := quietOpts()
	opts.LargeValueThreshold = 10
	db := mustOpen(t, fs, opts)
	defer db.Close()
	fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1})
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := db.Update(cctx, func(tx *Tx) error {
		_ = tx.Put([]byte("small"), []byte("1"))
		return tx.Put([]byte("large"), []byte(strings.Repeat("x", 100)))
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Update during outage = %v, want a deadline error", err)
	}
	// The large value could not be written, so nothing was applied.
	if _, err := db.Get(ctx, []byte("small")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("half-applied transaction: small = %v", err)
	}
	fs.Clear()
	put(t, db, "after", "1")
}

func TestCommitErrorDuringOutageThenDurable(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 1)
	db := mustOpen(t, fs, quietOpts())
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "wal/", Rate: 1})
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	err := db.Update(cctx, func(tx *Tx) error { return tx.Put([]byte("k"), []byte("v")) })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Update = %v, want deadline exceeded", err)
	}
	fs.Clear()
	if err := db.Sync(ctx); err != nil {
		t.Fatalf("Sync after outage: %v", err)
	}
	db.Close()
	db = mustOpen(t, inner, quietOpts())
	defer db.Close()
	if v, ok := get(t, db, "k"); !ok || v != "v" {
		t.Fatal("commit retried after the outage is missing")
	}
}

var _ objstore.Store = (*faults.Store)(nil)

func TestHungWALPutIsRetried(t *testing.T) {
	inner := mem.New()
	fs := faults.New(inner, 1)
	opts := quietOpts()
	opts.RequestTimeout = 20 * time.Millisecond
	db := mustOpen(t, fs, opts)
	defer db.Close()
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "wal/", Nth: 1, Hang: true})
	put(t, db, "k", "v")
	if s := db.Stats(); s.DurableCommits != 1 {
		t.Fatalf("durable commits %d, want 1", s.DurableCommits)
	}
}
