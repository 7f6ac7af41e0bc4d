package kv

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// BenchmarkDurableCommit measures durable single-key commits from N
// concurrent committers on mem with 1 ms added PUT latency, reporting WAL
// PUTs per commit.
func BenchmarkDurableCommit(b *testing.B) {
	for _, n := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("committers=%d", n), func(b *testing.B) {
			fs := faults.New(mem.New(), 1)
			fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Latency: time.Millisecond})
			cs := counting.New(fs)
			benchCommits(b, cs, n)
		})
	}
}

func benchCommits(b *testing.B, s *counting.Store, n int) {
	ctx := context.Background()
	db, err := Open(ctx, s, quietOpts())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var next atomic.Int64
	before := s.Counts()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := db.Update(ctx, func(tx *Tx) error {
					return tx.Put(fmt.Appendf(nil, "w%03d/%d", w, next.Load()), make([]byte, 100))
				}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	c := s.Counts().Sub(before)
	b.ReportMetric(float64(c.Puts)/float64(b.N), "puts/op")
}

// BenchmarkReopen measures Open of a checkpointed store of 100,000 keys.
func BenchmarkReopen(b *testing.B) {
	ctx := context.Background()
	s := mem.New()
	fillStore(b, s, 100_000)
	b.ResetTimer()
	for range b.N {
		db, err := Open(ctx, s, quietOpts())
		if err != nil {
			b.Fatal(err)
		}
		db.Close()
	}
}

// fillStore writes n keys with 100-byte values and checkpoints.
func fillStore(tb testing.TB, s objstore.Store, n int) {
	ctx := context.Background()
	db, err := Open(ctx, s, quietOpts())
	if err != nil {
		tb.Fatal(err)
	}
	val := make([]byte, 100)
	for i := 0; i < n; i += 1000 {
		tx := db.Begin()
		for j := i; j < min(i+1000, n); j++ {
			_ = tx.Put(fmt.Appendf(nil, "key/%010d", j), val)
		}
		if err := tx.CommitNonDurable(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	if err := db.Checkpoint(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
}
