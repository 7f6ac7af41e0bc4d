package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// BenchmarkTenStepRuns measures 10-step no-op runs on mem and on the file
// store, with as many clients (each one run in flight) as worker slots. One
// op is one step.
func BenchmarkTenStepRuns(b *testing.B) {
	for _, sc := range []struct {
		name string
		conc int
	}{{"mem", 1}, {"mem", 32}, {"file", 32}} {
		conc := sc.conc
		b.Run(fmt.Sprintf("store=%s/concurrency=%d", sc.name, conc), func(b *testing.B) {
			ctx := context.Background()
			var store objstore.Store = mem.New()
			if sc.name == "file" {
				fs, err := file.Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				store = fs
			}
			q, err := queue.Open(ctx, store, queue.Options{Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			var mu sync.Mutex
			waiters := map[string]chan struct{}{}
			r := StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
				if s.Number < 9 {
					return ContinueNow(s.Payload), nil
				}
				mu.Lock()
				if ch := waiters[s.RunID]; ch != nil { // nil on a redelivery
					close(ch)
					delete(waiters, s.RunID)
				}
				mu.Unlock()
				return Succeed(nil), nil
			})
			rt, err := New(q, store, r, Options{Concurrency: conc, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			w := rt.Spawn(ctx)
			defer w.Shutdown(ctx)
			runs := max(b.N/10, conc)
			cpu0 := processCPU()
			b.ResetTimer()
			var wg sync.WaitGroup
			for c := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := c; i < runs; i += conc {
						id := fmt.Sprintf("r%d", i)
						ch := make(chan struct{})
						mu.Lock()
						waiters[id] = ch
						mu.Unlock()
						if _, err := rt.Submit(ctx, RunSpec{RunID: id}); err != nil {
							b.Error(err)
							return
						}
						<-ch
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(runs*10)/b.Elapsed().Seconds(), "steps/s")
			// Process CPU per step does not depend on how loaded the
			// machine is, unlike steps/s.
			b.ReportMetric(float64(processCPU()-cpu0)/1e3/float64(runs*10), "cpu-µs/step")
		})
	}
}
