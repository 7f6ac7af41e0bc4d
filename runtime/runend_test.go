package runtime

import (
	"context"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// endRunner ends each run at its second step (Succeed or Fail by run id)
// and records the ends the runtime reports to it.
type endRunner struct {
	mu   sync.Mutex
	ends []*runstate.Outcome
	seen chan string
}

func (r *endRunner) RunStep(_ context.Context, s *Step) (StepOutcome, error) {
	if s.Number == 0 {
		return ContinueNow(s.Payload), nil
	}
	if s.RunID == "fails" {
		return Fail("no"), nil
	}
	return Succeed([]byte(`"ok"`)), nil
}

func (r *endRunner) RunEnded(o *runstate.Outcome) {
	r.mu.Lock()
	r.ends = append(r.ends, o)
	r.mu.Unlock()
	r.seen <- o.RunID
}

// TestRunEndObserverSeesEachEndOnce: a runner that is a RunEndObserver
// learns of every end once, with the outcome the hook gets, and no
// notification job is needed for it.
func TestRunEndObserverSeesEachEndOnce(t *testing.T) {
	r := &endRunner{seen: make(chan string, 10)}
	e := newEnv(t, r, Options{TerminalHook: noopTerminalHook{}})
	e.start()
	for _, id := range []string{"works", "fails"} {
		e.submit(RunSpec{RunID: id, Input: []byte("x"), Headers: map[string]string{"who": id}})
	}
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case id := <-r.seen:
			got[id] = true
		case <-e.ctx.Done():
			t.Fatalf("ends seen: %v", got)
		}
	}
	e.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ends) != 2 {
		t.Fatalf("%d ends reported; want 2", len(r.ends))
	}
	for _, o := range r.ends {
		st, err := e.rt.Status(e.ctx, o.RunID)
		if err != nil {
			t.Fatal(err)
		}
		// Reported only once durable: the status a reader gets agrees.
		if st.State != o.Status.State() || st.Step != o.Step || string(st.Result) != string(o.Result) || st.Error != o.Error ||
			o.Headers["who"] != o.RunID || !st.FinishedAt.Equal(o.FinishedAt) {
			t.Errorf("end %+v; status %+v", o, st)
		}
	}
	if s, err := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); err != nil || s.Pending+s.Claimed+s.Done+s.Dead != 0 {
		t.Fatalf("notification queue %+v, %v; want untouched", s, err)
	}
}
