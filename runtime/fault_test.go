package runtime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// Memo and replay objects behind a store that fails a third of their
// requests (and loses some responses): steps retry, every run still ends
// with the right result, and a side effect whose memo write succeeded is
// not repeated.
func TestMemoAndReplayUnderStoreFaults(t *testing.T) {
	fs := faults.New(mem.New(), 42)
	var mu sync.Mutex
	paid := map[string]int{}
	stored := map[string]bool{} // Memoized returned nil: the value is in the memo
	var violations []string
	r := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		key := fmt.Sprintf("%s/%d", s.RunID, s.Number)
		v, err := memo.Memoized(ctx, s.Memo, "call", func(context.Context) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			paid[key]++
			if stored[key] {
				violations = append(violations, key)
			}
			return "v" + key, nil
		})
		if err != nil {
			return StepOutcome{}, err // transient: the step is retried
		}
		mu.Lock()
		stored[key] = true
		mu.Unlock()
		if s.Number == 3 {
			return Succeed([]byte(v)), nil
		}
		return ContinueNow(nil), nil
	})
	cfg := defaultQueueConfig()
	cfg.MaxAttempts = 100
	e := newEnvCfg(t, fs, cfg, r, Options{StepOutputReplay: true, Concurrency: 4})
	fs.Set(
		faults.Rule{Ops: faults.OpGet | faults.OpPut, KeyPrefix: memo.DefaultPrefix + "/", Rate: 0.3},
		faults.Rule{Ops: faults.OpPut, KeyPrefix: memo.DefaultPrefix + "/", Rate: 0.1, LoseResponse: true},
	)
	e.start()
	const runs = 20
	for i := range runs {
		e.submit(RunSpec{RunID: fmt.Sprintf("f%02d", i)})
	}
	got := map[string]string{}
	for len(got) < runs {
		select {
		case o := <-e.outcomes:
			if o.Status != runstate.Succeeded {
				t.Fatalf("outcome %+v", o)
			}
			got[o.RunID] = string(o.Result)
		default:
			// Due retries become claimable, once no attempt runs: a jump
			// while one runs expires its lease (a minute), so a second
			// attempt could start the step's side effect after the first
			// ended the run and its memo was cleared.
			if st, err := e.q.Stats(e.ctx, DefaultQueueName); err == nil && st.Claimed == 0 && st.Pending == 0 {
				e.clock.Advance(time.Minute)
			}
			yield()
		}
		if e.ctx.Err() != nil {
			t.Fatalf("only %d of %d runs finished", len(got), runs)
		}
	}
	for i := range runs {
		id := fmt.Sprintf("f%02d", i)
		if got[id] != "v"+id+"/3" {
			t.Errorf("run %s result %q", id, got[id])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("side effects re-ran after their memo write completed: %v", violations)
	}
	reruns := 0
	for _, n := range paid {
		reruns += n - 1
	}
	if len(paid) != runs*4 {
		t.Fatalf("%d step side effects recorded, want %d", len(paid), runs*4)
	}
	t.Logf("%d side effects re-ran after a failed memo write", reruns)
}
