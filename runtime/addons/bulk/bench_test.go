package bulk

import (
	"context"
	"fmt"
	"testing"

	"github.com/tqw-dsl/tqw/internal/queuetest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// BenchmarkBatch runs batches of two-phase no-op items on mem (real clock)
// and reports items per second and object-store requests per item. One op
// is one item; the first Submit of each batch is included.
func BenchmarkBatch(b *testing.B) {
	for _, conc := range []int{8, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			ctx := context.Background()
			store := counting.New(mem.New())
			q, err := queue.Open(ctx, store, queue.Options{Logger: queuetest.Quiet()})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			pipe := Pipeline{Phases: []Phase{
				{Name: "a", Run: func(_ context.Context, pc *PhaseContext, in []byte) ([]byte, error) {
					pc.AddCost("tokens", int64(len(in)))
					return in, nil
				}},
				{Name: "b", Run: func(_ context.Context, pc *PhaseContext, in []byte) ([]byte, error) {
					pc.AddCost("micro_usd", 3)
					return in, nil
				}},
			}}
			r, err := New(q, store, pipe, WithConcurrency(conc), WithLogger(queuetest.Quiet()))
			if err != nil {
				b.Fatal(err)
			}
			w := r.Spawn(ctx)
			defer w.Shutdown(ctx)
			const perBatch = 500
			batches := max(1, (b.N+perBatch-1)/perBatch)
			in := make([][]byte, perBatch)
			for i := range in {
				in[i] = []byte(fmt.Sprintf("item-%04d", i))
			}
			store.Reset()
			b.ResetTimer()
			for n := range batches {
				id := fmt.Sprintf("bench%d", n)
				if _, err := r.Submit(ctx, id, in, Threshold{}); err != nil {
					b.Fatal(err)
				}
				p, err := r.Wait(ctx, id)
				if err != nil || p.Succeeded != perBatch {
					b.Fatalf("%+v %v", p, err)
				}
			}
			b.StopTimer()
			items := float64(batches * perBatch)
			c := store.Counts()
			b.ReportMetric(items/b.Elapsed().Seconds(), "items/s")
			b.ReportMetric(float64(c.Puts)/items, "PUTs/item")
			b.ReportMetric(float64(c.Gets)/items, "GETs/item")
			b.ReportMetric(float64(c.Lists)/items, "LISTs/item")
		})
	}
}
