package interpreter

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

const redriveWorkflow = `
tqw: v1
name: redrive
vars: {n: 1}
steps:
  - id: first
    action: http
    with: {url: "${ input.url }/first"}
    set: {n: "${ vars.n + 1 }"}
  - id: second
    action: http
    with: {url: "${ input.url }/second"}
    retry: {max_attempts: 2, initial: 1s}
  - id: done
    succeed: "${ steps.first.output.body } ${ steps.second.output.body } ${ vars.n }"
`

// flakyServer answers /first always and /second with 503 until fixed;
// it counts the requests to each path.
type flakyServer struct {
	*httptest.Server
	fixed         atomic.Bool
	first, second atomic.Int32
}

func newFlakyServer(t *testing.T) *flakyServer {
	f := &flakyServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/first":
			f.first.Add(1)
			_, _ = w.Write([]byte("one"))
		case "/second":
			f.second.Add(1)
			if !f.fixed.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("two"))
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// failSecond runs the workflow at p until it failed at step second.
func failSecond(t *testing.T, e *tenv, p string, srv *flakyServer) {
	t.Helper()
	ch := e.submitUntil(p, map[string]any{"url": srv.URL}, "r1", "second", OutcomeRetry)
	e.clock.Advance(time.Second)
	o := e.await(ch)
	if o.Status != runstate.Failed || !strings.Contains(o.Error, "second") {
		t.Fatalf("first run: %s %q; want failed at second", o.Status, o.Error)
	}
	if got := srv.second.Load(); got != 2 {
		t.Fatalf("second was called %d times; want its 2 attempts", got)
	}
}

func TestRedriveAfterAFailedHTTPStep(t *testing.T) {
	srv := newFlakyServer(t)
	e := newTestEnv(t)
	p := e.write("redrive.yaml", redriveWorkflow)
	failSecond(t, e, p, srv)
	srv.fixed.Store(true)
	e.settleNotifications()
	ch, _ := e.it.Watch("r1")
	out, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out.RunID != "r1" || !out.NewlySubmitted {
		t.Fatalf("Redrive = %+v", out)
	}
	wantSucceeded(t, e.await(ch), `"one two 2"`)
	if got := srv.first.Load(); got != 1 {
		t.Fatalf("first ran %d times; a redrive must not run a completed step again", got)
	}
	// A fresh budget: two failed attempts, then one that succeeded.
	if got := srv.second.Load(); got != 3 {
		t.Fatalf("second was called %d times; want 3", got)
	}
	e.wantHistory("r1", "first:ok second:retry second:failed second:redriven second:ok done:succeeded")
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{}); !errors.Is(err, runtime.ErrNotRedrivable) {
		t.Fatalf("redrive of a succeeded run: %v; want ErrNotRedrivable", err)
	}
}

func TestRedriveOnADefinition(t *testing.T) {
	srv := newFlakyServer(t)
	e := newTestEnv(t)
	p := e.write("redrive.yaml", redriveWorkflow)
	failSecond(t, e, p, srv)

	// Incompatible: first changed its kind, second is gone.
	bad := e.load(e.write("bad.yaml", `
tqw: v1
name: redrive
steps:
  - id: first
    action: sleep
    with: {duration: 1s}
  - id: done
    succeed: "no"
`))
	_, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Definition: bad})
	var ie *IncompatibleError
	if !errors.As(err, &ie) || len(ie.Differences) != 2 ||
		!strings.Contains(ie.Differences[0], `"second" is missing`) || !strings.Contains(ie.Differences[1], `"first" is http in the run, sleep`) {
		t.Fatalf("incompatible redrive: %v; want both differences", err)
	}
	if st, err := e.rt.Status(e.ctx, "r1"); err != nil || st.State != runstate.StateFailed {
		t.Fatalf("after a refused redrive: %v %v; want the run still failed", st.State, err)
	}

	// Compatible: a new step before second, second now asks elsewhere.
	good := e.load(e.write("good.yaml", `
tqw: v1
name: redrive
steps:
  - id: first
    action: http
    with: {url: "${ input.url }/first"}
  - id: extra
    succeed: "not reached"
  - id: second
    action: http
    with: {url: "${ input.url }/second?v=2"}
    next: done
  - id: done
    succeed: "${ steps.second.output.body } v2 ${ vars.n }"
`))
	srv.fixed.Store(true)
	e.settleNotifications()
	ch, _ := e.it.Watch("r1")
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Definition: good}); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"two v2 2"`)
	st, err := e.rt.Status(e.ctx, "r1")
	if err != nil || st.Headers[HeaderDefinition] != good.pin.Hash {
		t.Fatalf("status %+v %v; want the new definition's hash", st.Headers, err)
	}
}

func TestSkipTheFailedStep(t *testing.T) {
	srv := newFlakyServer(t)
	e := newTestEnv(t)
	p := e.write("redrive.yaml", redriveWorkflow)
	failSecond(t, e, p, srv)
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Skip: "first", Output: map[string]any{"body": "x"}}); !errors.Is(err, runtime.ErrNotRedrivable) ||
		!strings.Contains(err.Error(), `at step "second", not "first"`) {
		t.Fatalf("skip of a step the run is not at: %v", err)
	}
	e.settleNotifications()
	ch, _ := e.it.Watch("r1")
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{Skip: "second", Output: map[string]any{"body": "given"}}); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"one given 2"`)
	if got := srv.second.Load(); got != 2 {
		t.Fatalf("second was called %d times after the skip; want no more than its 2 failed attempts", got)
	}
	e.wantHistory("r1", "first:ok second:retry second:failed second:redriven second:skipped done:succeeded")
}

func TestRedriveACancelledWaitingRun(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("wait.yaml", `
tqw: v1
name: wait
steps:
  - id: hello
    set: {greeting: "hi"}
  - id: wait
    action: wait_signal
    with: {key: "go-${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ vars.greeting } ${ steps.wait.output }"
`)
	ch := e.submitUntil(p, map[string]any{}, "r1", "wait", OutcomeWaiting)
	if ok, err := e.rt.Cancel(e.ctx, "r1"); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	if o := e.await(ch); o.Status != runstate.Cancelled {
		t.Fatalf("status %s; want cancelled", o.Status)
	}
	e.settleNotifications()
	ch, _ = e.it.Watch("r1")
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitEvent("wait", OutcomeWaiting)
	if _, err := e.rt.Signal(e.ctx, "go-r1", []byte(`"now"`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"hi now"`)
}

func TestRedriveRefusesAChildRun(t *testing.T) {
	e := newTestEnv(t)
	e.write("child.yaml", `
tqw: v1
name: child
steps:
  - id: boom
    fail: "child failed"
`)
	p := e.write("parent.yaml", `
tqw: v1
name: parent
steps:
  - id: call
    call: {workflow: child.yaml}
`)
	o := e.run(p, map[string]any{}, "p1")
	if o.Status != runstate.Failed {
		t.Fatalf("parent %s; want failed", o.Status)
	}
	child := childRunID("p1", "call", 0)
	if _, err := e.it.Redrive(e.ctx, child, RedriveOptions{}); !errors.Is(err, runtime.ErrNotRedrivable) || !strings.Contains(err.Error(), "redrive the parent") {
		t.Fatalf("redrive of a child run: %v; want a refusal naming the parent", err)
	}
}

// A sealed run is redriven too: its records come back from its segment,
// the live copy supersedes the segment's for every reader, and the new
// end is sealed again, with the whole history.
func TestRedriveASealedRun(t *testing.T) {
	srv := newFlakyServer(t)
	e := newTestEnv(t, withRetention(time.Hour, time.Hour), withRuntimeOptions(runtime.Options{Sealing: &runtime.SealOptions{Delay: -1}}))
	p := e.write("redrive.yaml", redriveWorkflow)
	failSecond(t, e, p, srv)
	e.settleNotifications()
	seal := func() {
		t.Helper()
		if _, err := e.rt.Seal(e.ctx); err != nil {
			t.Fatal(err)
		}
		if left := e.kvKeys(histPrefix("r1")); len(left) != 0 {
			t.Fatalf("history left in the KV after sealing: %v", left)
		}
	}
	seal()
	sealed := WithSealed(e.q, e.rt.Inspector())
	if h, err := History(e.ctx, sealed, e.store, "r1"); err != nil || outcomes(h) != "first:ok second:retry second:failed" {
		t.Fatalf("sealed history %q %v", outcomes(h), err)
	}
	srv.fixed.Store(true)
	ch, _ := e.it.Watch("r1")
	if _, err := e.it.Redrive(e.ctx, "r1", RedriveOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every reader takes the live copy over the segment's.
	if st, err := e.rt.Status(e.ctx, "r1"); err != nil || st.State.Terminal() {
		t.Fatalf("status after the redrive: %v %v; want active", st.State, err)
	}
	wantSucceeded(t, e.await(ch), `"one two 2"`)
	if got := srv.first.Load(); got != 1 {
		t.Fatalf("first ran %d times", got)
	}
	e.settleNotifications()
	seal()
	h, err := History(e.ctx, sealed, e.store, "r1")
	if err != nil || outcomes(h) != "first:ok second:retry second:failed second:redriven second:ok done:succeeded" {
		t.Fatalf("history sealed again %q %v", outcomes(h), err)
	}
	st, err := e.rt.Status(e.ctx, "r1")
	if err != nil || st.State != runstate.StateSucceeded {
		t.Fatalf("status sealed again: %v %v", st.State, err)
	}
	if st.Totals == nil || st.Totals.Counters[TotalSteps] < 3 {
		t.Fatalf("totals %+v; want the steps of both incarnations", st.Totals)
	}
	runs, err := e.rt.Inspector().ListRuns(e.ctx, runstate.ListOptions{Limit: 10})
	if err != nil || len(runs) != 1 || runs[0].State != runstate.StateSucceeded {
		t.Fatalf("list %+v %v; want r1 once, succeeded", runs, err)
	}
}
