package queue

import (
	"context"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// BenchmarkEnqueueClaimAck measures one job's full life on the memory store
// with parallel goroutines (CPU cost per job; see cmd/tqw-bench for the
// store-level figures).
func BenchmarkEnqueueClaimAck(b *testing.B) {
	ctx := context.Background()
	q, err := Open(ctx, mem.New(), Options{Logger: quietLogger(), DefaultConfig: QueueConfig{LeaseDuration: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	payload := make([]byte, 256)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := q.Enqueue(ctx, "b", payload, EnqueueOptions{}); err != nil {
				b.Error(err)
				return
			}
			c, err := q.Claim(ctx, "b")
			if err != nil || c == nil {
				b.Error("claim", err)
				return
			}
			if err := q.Ack(ctx, c, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
