package runtime

import (
	"context"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// A run's totals add up what its steps reported and the requests it
// caused: its memo traffic counted exactly, and its commits' shares of
// the WAL PUTs that made them durable, the terminating one included.
func TestRunTotals(t *testing.T) {
	runner := StepRunnerFunc(func(ctx context.Context, s *Step) (StepOutcome, error) {
		s.AddTotal("steps", 1)
		s.AddTotal("llm_tokens", 10)
		if s.Number == 1 {
			if err := s.Memo.Put(ctx, "paid", []byte("answer")); err != nil {
				return StepOutcome{}, err
			}
			if _, _, err := s.Memo.Get(ctx, "paid"); err != nil {
				return StepOutcome{}, err
			}
		}
		if s.Number < 2 {
			return ContinueNow(nil), nil
		}
		return Succeed(nil), nil
	})
	e := newEnv(t, runner)
	e.submit(RunSpec{RunID: "r1"})
	e.start()
	e.outcome()
	// The notification's acknowledgement writes the last share; the hook
	// has run once outcome returned, its acknowledgement may still be on
	// its way.
	var st runstate.Status
	for {
		st = e.status("r1")
		if st.Totals != nil && st.Totals.Puts > 1+3*0.01 && st.Totals.Counters["steps"] == 3 {
			break
		}
		yield()
		if e.ctx.Err() != nil {
			t.Fatalf("totals never complete: %+v", st.Totals)
		}
	}
	tot := st.Totals
	if tot.Counters["steps"] != 3 || tot.Counters["llm_tokens"] != 30 {
		t.Fatalf("counters %v; want 3 steps, 30 tokens", tot.Counters)
	}
	// One memo PUT plus the WAL shares of 4 commits (submission and three
	// settlements), each share in (0, 1].
	if tot.Puts <= 1 || tot.Puts > 5 {
		t.Fatalf("puts %v; want the memo PUT plus four shares of WAL PUTs", tot.Puts)
	}
	if tot.Gets != 1 {
		t.Fatalf("gets %v; want the one memo GET", tot.Gets)
	}
}
