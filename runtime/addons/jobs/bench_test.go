package jobs

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/internal/queuetest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// BenchmarkSubmitAwait submits Echo jobs from as many clients as worker
// slots, each awaiting its result, on mem (real clock). One op is one job.
func BenchmarkSubmitAwait(b *testing.B) {
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			ctx := context.Background()
			store := counting.New(mem.New())
			q, err := queue.Open(ctx, store, queue.Options{Logger: queuetest.Quiet()})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			r, err := New(q, store, WithConcurrency(conc), WithLogger(queuetest.Quiet()))
			if err != nil {
				b.Fatal(err)
			}
			if err := Register[Echo](r); err != nil {
				b.Fatal(err)
			}
			w := r.Spawn(ctx)
			defer w.Shutdown(ctx)
			store.Reset()
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := c; i < b.N; i += conc {
						h, err := Submit(ctx, r, Echo{Text: fmt.Sprintf("t%d", i)})
						if err == nil {
							_, err = h.Await(ctx)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			c := store.Counts()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(float64(c.Puts)/float64(b.N), "PUTs/job")
			b.ReportMetric(float64(c.Gets)/float64(b.N), "GETs/job")
		})
	}
}
