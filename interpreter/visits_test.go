package interpreter

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// loopYAML polls an HTTP endpoint n times (an action step, then a pure
// one folded into its delivery), each poll's body large enough to be a
// large output of its own object.
const loopYAML = `
tqw: v1
name: poll
input: {type: object, properties: {url: {type: string}, n: {type: integer}}}
vars: {i: 0}
outputs: {polls: "${ vars.i }", size: "${ len(steps.poll.output.body) }"}
steps:
  - id: poll
    action: http
    with: {url: "${ input.url }?i=${ vars.i }"}
    set: {i: "${ vars.i + 1 }"}
  - id: again
    switch:
      - when: vars.i < input.n
        next: poll
`

// drainEvents consumes e's events until the test ends, for a run with
// more steps than the event buffer holds.
func drainEvents(t *testing.T, e *tenv) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-e.events:
			case <-done:
				return
			}
		}
	}()
}

// A loop's history keeps the latest visits of each step: a loop of
// thousands of iterations ends with a window of records per step, the
// count of the visits dropped on the oldest, the large outputs of the
// dropped visits deleted (all but those a last commit left pending),
// and nothing a kept record names missing.
func TestLongLoopKeepsTheLatestVisits(t *testing.T) {
	// 300 windows of 10: enough to show the window holds; the 100,000
	// iteration figures are tqw-bench longloop's (docs/BENCHMARKS.md).
	n := 3_000
	const window, bigEvery = 10, 50
	// Every 50th poll, and the last, answers a large output (an object).
	big := strings.Repeat("x", InlineOutputLimit+1)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		if i%bigEvery == 0 || i == n-1 {
			fmt.Fprint(w, big)
			return
		}
		fmt.Fprintf(w, "small %d", i)
	}))
	defer srv.Close()
	e := newTestEnv(t, withHistoryVisits(window))
	drainEvents(t, e)
	o := e.run(e.write("poll.yaml", loopYAML), map[string]any{"url": srv.URL, "n": n}, "l1")
	wantSucceeded(t, o, fmt.Sprintf(`{"polls":%d,"size":%d}`, n, len(big)))
	if got := calls.Load(); got != int64(n) {
		t.Fatalf("%d polls; want %d", got, n)
	}
	h := e.history("l1")
	if len(h) != 2*window {
		t.Fatalf("%d history records; want %d (%d visits of each step)", len(h), 2*window, window)
	}
	dropped := map[string]int{}
	for i, r := range h {
		if r.DroppedVisits > 0 {
			dropped[r.Step] = r.DroppedVisits
			if i > 1 {
				t.Errorf("record %d (%s) carries the dropped count; want it on the step's oldest", i, r.Step)
			}
		}
	}
	if dropped["poll"] != n-window || dropped["again"] != n-window {
		t.Fatalf("dropped visits %v; want %d of poll and of again", dropped, n-window)
	}
	// The kept records are the latest visits, in order.
	kept := 0
	for i, r := range h {
		step := []string{"poll", "again"}[i%2]
		if r.Step != step {
			t.Fatalf("record %d is of %s; want %s", i, r.Step, step)
		}
		if out, _ := r.Output.(map[string]any); step == "poll" && i < len(h)-2 {
			if want := fmt.Sprintf("small %d", n-window+i/2); out["body"] != want {
				t.Fatalf("poll record %d has body %.20v; want %q (the latest visits)", i, out["body"], want)
			}
		}
		if r.OutputRef != "" {
			kept++
		}
	}
	last := h[len(h)-2]
	if out, ok := last.Output.(map[string]any); !ok || len(fmt.Sprint(out["body"])) != len(big) {
		t.Fatalf("the last poll's record lost its large output: %v", last.OutputRef)
	}
	if keys := e.kvKeys(histPrefix("l1")); len(keys) != 2*window {
		t.Fatalf("%d history keys stored; want %d", len(keys), 2*window)
	}
	// Of the n/bigEvery+1 large outputs, the objects of the kept records
	// stay, and at most one whose record the last commit deleted (its
	// deletion waits for the step's next delivery).
	objs := e.objectKeys(outputsObjectPrefix("l1"))
	if len(objs) < kept || len(objs) > kept+1 {
		t.Fatalf("%d output objects stored; want %d or %d (the kept records')", len(objs), kept, kept+1)
	}
	problems, err := CheckObjects(e.ctx, e.store, e.q, e.rt.Inspector())
	if err != nil || len(problems) > 0 {
		t.Fatalf("store check after the loop: %v %v", problems, err)
	}
}

// A visit is every record of one entry into a step: a wait_signal's
// waiting record and its end count once, so the window keeps both.
func TestLongLoopCountsAWaitAsOneVisit(t *testing.T) {
	const window, n = 3, 8
	e := newTestEnv(t, withHistoryVisits(window))
	const src = `
tqw: v1
name: asks
vars: {i: 0}
steps:
  - id: ask
    action: wait_signal
    with: {key: "ask:${ run.id }", timeout: 1h}
    set: {i: "${ vars.i + 1 }"}
  - id: again
    switch:
      - when: vars.i < 8
        next: ask
`
	ch := e.submit(e.write("asks.yaml", src), map[string]any{}, "w1")
	e.start()
	for i := range n {
		e.waitEvent("ask", OutcomeWaiting)
		if _, err := e.rt.Signal(e.ctx, "ask:w1", []byte(fmt.Sprintf(`%d`, i))); err != nil {
			t.Fatal(err)
		}
	}
	wantSucceeded(t, e.await(ch), "7")
	h := e.history("w1")
	var asks []string
	for _, r := range h {
		if r.Step == "ask" {
			asks = append(asks, r.Outcome)
		}
	}
	want := strings.TrimSpace(strings.Repeat("waiting ok ", window))
	if strings.Join(asks, " ") != want {
		t.Fatalf("ask's records %v; want %s", asks, want)
	}
	if h[0].Step != "ask" || h[0].DroppedVisits != n-window {
		t.Fatalf("oldest record %s dropped %d; want ask with %d", h[0].Step, h[0].DroppedVisits, n-window)
	}
}

// With every visit kept (HistoryVisits < 0) nothing is dropped or
// listed: the history of before.
func TestHistoryVisitsNegativeKeepsEveryVisit(t *testing.T) {
	e := newTestEnv(t, withHistoryVisits(-1))
	const src = `
tqw: v1
name: count
vars: {i: 0}
steps:
  - id: work
    set: {i: "${ vars.i + 1 }"}
    switch:
      - when: vars.i < 250
        next: work
`
	wantSucceeded(t, e.run(e.write("count.yaml", src), map[string]any{}, "c1"), "null")
	if h := e.history("c1"); len(h) != 250 || h[0].DroppedVisits != 0 {
		t.Fatalf("%d records, %d dropped; want all 250 kept", len(h), h[0].DroppedVisits)
	}
	if keys := e.kvKeys(visitsPrefix("c1")); len(keys) != 0 {
		t.Fatalf("visits lists %v written with every visit kept", keys)
	}
}
