package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Item 14: Status and ListRuns from durable state, also from a Reader.

// statusRunner drives runs by payload: "wait" waits for a signal, "sleep"
// continues after an hour, "block" holds until released, "ok" succeeds,
// "fail" fails.
func statusRunner(g *gate) StepRunner {
	return StepRunnerFunc(func(_ context.Context, s *Step) (StepOutcome, error) {
		if s.Number > 0 {
			return Succeed([]byte("done")), nil
		}
		switch string(s.Payload) {
		case "wait":
			return ContinueOnSignal(nil, "sig-"+s.RunID, 2*time.Hour), nil
		case "sleep":
			return ContinueAfter(nil, time.Hour), nil
		case "block":
			g.entered <- s
			<-g.release
			return Succeed(nil), nil
		case "fail":
			return Fail("bad"), nil
		}
		return Succeed([]byte("result-" + s.RunID)), nil
	})
}

func TestStatusAndListRunsEveryState(t *testing.T) {
	g := newGate(t)
	e := newEnv(t, statusRunner(g), Options{Concurrency: 4})
	// pending: submitted before the worker starts, and cancelled later to
	// keep it from running.
	e.submit(RunSpec{RunID: "p-pending", Input: []byte("ok"), Headers: map[string]string{"h": "v"}})
	st := e.expectState("p-pending", runstate.StatePending)
	if st.Step != 0 || st.JobID == "" || st.Headers["h"] != "v" || !st.SubmittedAt.Equal(t0) {
		t.Fatalf("pending status %+v", st)
	}
	if _, err := e.rt.Cancel(e.ctx, "p-pending"); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.submit(RunSpec{RunID: "r-running", Input: []byte("block")})
	<-g.entered
	e.submit(RunSpec{RunID: "w-waiting", Input: []byte("wait")})
	e.submit(RunSpec{RunID: "s-scheduled", Input: []byte("sleep")})
	e.submit(RunSpec{RunID: "o-ok", Input: []byte("ok")})
	e.submit(RunSpec{RunID: "f-fail", Input: []byte("fail")})
	for range 3 { // p-pending (cancelled), o-ok, f-fail
		e.outcome()
	}
	e.waitRun("w-waiting", inState(runstate.StateWaiting))
	e.waitRun("s-scheduled", inState(runstate.StateScheduled))
	e.expectState("r-running", runstate.StateRunning)

	if st := e.expectState("w-waiting", runstate.StateWaiting); st.SignalKey != "sig-w-waiting" || !st.Until.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("waiting %+v", st)
	}
	if st := e.expectState("s-scheduled", runstate.StateScheduled); !st.Until.Equal(t0.Add(time.Hour)) {
		t.Fatalf("scheduled %+v", st)
	}
	if st := e.expectState("o-ok", runstate.StateSucceeded); string(st.Result) != "result-o-ok" {
		t.Fatalf("succeeded %+v", st)
	}
	if st := e.expectState("f-fail", runstate.StateFailed); st.Error != "bad" {
		t.Fatalf("failed %+v", st)
	}
	e.expectState("p-pending", runstate.StateCancelled)
	if _, err := e.rt.Status(e.ctx, "unknown"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("unknown run: %v", err)
	}

	want := "f-fail:failed o-ok:succeeded p-pending:cancelled r-running:running s-scheduled:scheduled w-waiting:waiting"
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{}); got != want {
		t.Fatalf("ListRuns:\n got %s\nwant %s", got, want)
	}
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{After: "o-ok", Limit: 2}); got != "p-pending:cancelled r-running:running" {
		t.Fatalf("ListRuns page: %s", got)
	}
	if got := listString(t, e.rt.Inspector(), runstate.ListOptions{States: []runstate.State{runstate.StateWaiting, runstate.StateFailed}}); got != "f-fail:failed w-waiting:waiting" {
		t.Fatalf("ListRuns filter: %s", got)
	}

	// Another process: a Reader on the same store sees the same.
	rd, err := queue.OpenReader(e.ctx, e.store, queue.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := e.q.DB().Sync(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := rd.Refresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := listString(t, NewInspector(rd), runstate.ListOptions{}); got != want {
		t.Fatalf("Reader ListRuns:\n got %s\nwant %s", got, want)
	}
	if st, err := NewInspector(rd).Status(e.ctx, "w-waiting"); err != nil || st.State != runstate.StateWaiting || st.SignalKey != "sig-w-waiting" {
		t.Fatalf("Reader Status %+v %v", st, err)
	}
	g.open()
	e.outcome()
}

func TestResultRetentionExpiresStatus(t *testing.T) {
	e := newEnv(t, echo(), Options{ResultRetention: time.Hour, SweepInterval: 24 * time.Hour})
	e.start()
	e.submit(RunSpec{RunID: "old", Input: []byte("1")})
	e.outcome()
	e.clock.Advance(30 * time.Minute)
	e.submit(RunSpec{RunID: "new", Input: []byte("2")})
	e.outcome()
	e.clock.Advance(31 * time.Minute)
	res, err := e.rt.Sweep(e.ctx)
	if err != nil || res.Results != 1 {
		t.Fatalf("Sweep: %+v %v", res, err)
	}
	if _, err := e.rt.Status(e.ctx, "old"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("expired run still reported: %v", err)
	}
	e.expectState("new", runstate.StateSucceeded)
}

func listString(t *testing.T, in *Inspector, opts runstate.ListOptions) string {
	t.Helper()
	runs, err := in.ListRuns(context.Background(), opts)
	if err != nil {
		t.Fatalf("ListRuns: %v", err)
	}
	s := ""
	for i, r := range runs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s:%s", r.RunID, r.State)
	}
	return s
}
