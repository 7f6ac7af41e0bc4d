package interpreter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

const parallelYAML = `
tqw: v1
name: par
vars: {base: 10}
steps:
  - id: first
    set: {seen: "${ input.order }"}
  - id: both
    parallel:
      fail: %s
      branches:
        quick:
          - id: q_set
            set: {base: "${ vars.base + 1 }"}
          - id: q_fail
            switch:
              - when: input.fail_quick == true
                next: q_bad
          - id: q_done
            succeed: {base: "${ vars.base }", seen: "${ vars.seen }"}
          - id: q_bad
            fail: quick broke
        slow:
          - id: s_wait
            action: wait_signal
            with: {key: "go:${ input.order }", timeout: 1h}
          - id: s_done
            succeed: "${ output.v }"
    catch:
      - on: [parallel.failed]
        set: {why: "${ error.message }"}
        next: caught
  - id: done
    succeed: {out: "${ output }", base: "${ vars.base }"}
  - id: caught
    succeed: "${ vars.why }"
`

// A branch waits on a signal while the other finishes; the parallel step
// ends with both results, each branch having started from a copy of the
// variables (the parent's base is unchanged).
func TestParallelBranchWaitsWhileAnotherFinishes(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("par.yaml", fmt.Sprintf(parallelYAML, "fast"))
	ch := e.submit(p, map[string]any{"order": "o1"}, "p1")
	e.start()
	e.waitEvents("s_wait:"+OutcomeWaiting, "q_done:"+OutcomeSucceeded)
	if _, err := e.rt.Signal(e.ctx, "go:o1", []byte(`{"v": "signalled"}`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `{"base":10,"out":{"quick":{"base":11,"seen":"o1"},"slow":"signalled"}}`)
	h := e.wantHistory("p1", "first:ok both:waiting both:ok done:succeeded")
	if h[1].WaitKey == "" {
		t.Error("the waiting record of the parallel step names no doorbell key")
	}
	e.wantHistory("p1:both:1.1:quick", "q_set:ok q_fail:ok q_done:succeeded")
	e.wantHistory("p1:both:1.1:slow", "s_wait:waiting s_wait:ok s_done:succeeded")
}

// fail: fast fails the step at the first failed branch and cancels the
// branch still waiting; the error is parallel.failed, which catch routes.
func TestParallelFailFastCancelsOthers(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("par.yaml", fmt.Sprintf(parallelYAML, "fast"))
	o := e.run(p, map[string]any{"order": "o2", "fail_quick": true}, "p2")
	wantSucceeded(t, o, `"branch quick: fail: quick broke"`)
	st, err := e.rt.Status(e.ctx, "p2:both:1.1:slow")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runstate.StateCancelled {
		t.Errorf("the waiting branch is %s; want cancelled", st.State)
	}
}

// fail: all waits for every branch, then fails with each failed branch.
func TestParallelFailAllWaitsForEveryBranch(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("par.yaml", fmt.Sprintf(parallelYAML, "all"))
	ch := e.submitUntil(p, map[string]any{"order": "o3", "fail_quick": true}, "p3", "q_bad", OutcomeFailed)
	st, err := e.rt.Status(e.ctx, "p3")
	if err != nil || st.State.Terminal() {
		t.Fatalf("the parent ended (%v, %v) before its other branch did", st.State, err)
	}
	if _, err := e.rt.Signal(e.ctx, "go:o3", []byte(`{"v": 1}`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"branch quick: fail: quick broke"`)
	e.wantHistory("p3:both:1.1:slow", "s_wait:waiting s_wait:ok s_done:succeeded")
}

// Cancelling the parent cancels its waiting branch.
func TestParallelCancelCascades(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("par.yaml", fmt.Sprintf(parallelYAML, "fast"))
	ch := e.submitUntil(p, map[string]any{"order": "o4"}, "p4", "s_wait", OutcomeWaiting)
	if ok, err := e.rt.Cancel(e.ctx, "p4"); err != nil || !ok {
		t.Fatalf("Cancel: %v, %v", ok, err)
	}
	if o := e.await(ch); o.Status != runstate.Cancelled {
		t.Fatalf("parent: %s", o.Status)
	}
	cch, stop := e.it.Watch("p4:both:1.1:slow")
	defer stop()
	if st, err := e.rt.Status(e.ctx, "p4:both:1.1:slow"); err != nil {
		t.Fatal(err)
	} else if !st.State.Terminal() {
		e.await(cch)
	}
	if st, _ := e.rt.Status(e.ctx, "p4:both:1.1:slow"); st.State != runstate.StateCancelled {
		t.Errorf("branch after the parent's cancel: %s; want cancelled", st.State)
	}
}

const mapYAML = `
tqw: v1
name: m
vars: {k: 3}
steps:
  - id: each
    map:
      items: "${ input.items }"
      concurrency: %d
      tolerated_failures: %s
      steps:
        - id: pick
          switch:
            - when: item < 0
              next: bad
            - when: item == 0
              next: hold
        - id: ok
          succeed: "${ item * vars.k + index }"
        - id: hold
          action: wait_signal
          with: {key: "hold:${ input.tag }:${ index }", timeout: 1h}
        - id: held
          succeed: "${ output }"
        - id: bad
          fail: "negative ${ item }"
    catch:
      - on: [map.failed]
        set: {why: "${ error.message }"}
        next: caught
  - id: done
    succeed: "${ output }"
  - id: caught
    succeed: "${ vars.why }"
`

// Failures within the tolerance leave nulls in results and entries in
// errors; results are in item order.
func TestMapToleratesFailures(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("m.yaml", fmt.Sprintf(mapYAML, 2, `"40%"`))
	o := e.run(p, map[string]any{"tag": "t1", "items": []any{1, -2, 3, -4, 5}}, "m1")
	var out struct {
		Results []any
		Errors  []struct {
			Index         int
			Type, Message string
		}
		Done, Failed, Total int
	}
	if o.Status != runstate.Succeeded {
		t.Fatalf("%s: %s", o.Status, o.Error)
	}
	if err := json.Unmarshal(o.Result, &out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out.Results) != "[3 <nil> 11 <nil> 19]" || out.Done != 3 || out.Failed != 2 || out.Total != 5 {
		t.Errorf("output %s", o.Result)
	}
	if len(out.Errors) != 2 || out.Errors[0].Index != 1 || out.Errors[0].Type != "fail" || out.Errors[0].Message != "negative -2" || out.Errors[1].Index != 3 {
		t.Errorf("errors %+v", out.Errors)
	}
	// Past the tolerance the step fails with map.failed.
	o = e.run(p, map[string]any{"tag": "t2", "items": []any{-1, -2, -3, 4, 5}}, "m2")
	if o.Status != runstate.Succeeded || !strings.Contains(string(o.Result), "more than the 2 tolerated") {
		t.Fatalf("%s %s %s", o.Status, o.Result, o.Error)
	}
}

// No more than concurrency items run at once, and items that wait do not
// stop the others from finishing.
func TestMapConcurrencyBound(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("m.yaml", fmt.Sprintf(mapYAML, 3, "0"))
	items := []any{0, 0, 0, 7, 8}
	ch := e.submit(p, map[string]any{"tag": "c", "items": items}, "m3")
	e.start()
	e.waitEvents("hold:" + OutcomeWaiting) // the first of three
	for i := 1; i < 3; i++ {
		e.waitEvent("hold", OutcomeWaiting)
	}
	active := func() []string {
		runs, err := e.rt.ListRuns(e.ctx, runstate.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range runs {
			if strings.HasPrefix(r.RunID, "m3:") && !r.State.Terminal() {
				out = append(out, r.RunID)
			}
		}
		return out
	}
	if a := active(); len(a) != 3 {
		t.Fatalf("with three items waiting, %d item runs are active: %v; want 3", len(a), a)
	}
	st, err := e.rt.Status(e.ctx, "m3")
	if err != nil {
		t.Fatal(err)
	}
	pos, err := e.it.Position(e.ctx, e.q, st.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if pos.Step != "each" || pos.Map == nil || pos.Map.Total != 5 || pos.Map.Failed != 0 || pos.Map.Done > 2 {
		t.Errorf("position while items wait: %+v (map %+v)", pos, pos.Map)
	}
	for i := 0; i < 3; i++ {
		if _, err := e.rt.Signal(e.ctx, fmt.Sprintf("hold:c:%d", i), []byte(fmt.Sprintf(`"h%d"`, i))); err != nil {
			t.Fatal(err)
		}
		if a := active(); len(a) > 3 {
			t.Fatalf("%d item runs active: %v; concurrency is 3", len(a), a)
		}
	}
	wantSucceeded(t, e.await(ch), `{"done":5,"errors":[],"failed":0,"results":["h0","h1","h2",24,28],"total":5}`)
	if a := active(); len(a) != 0 {
		t.Errorf("item runs still active after the map: %v", a)
	}
}

// waitEvents waits for an end event of each "step:status", in any order
// (steps of concurrent child runs end in any order).
func (e *tenv) waitEvents(want ...string) {
	e.t.Helper()
	left := map[string]bool{}
	for _, w := range want {
		left[w] = true
	}
	for len(left) > 0 {
		select {
		case ev := <-e.events:
			k := ev.Step + ":" + ev.Status
			if ev.Kind != "end" || !left[k] {
				continue
			}
			if _, err := e.q.WaitForCompletion(e.ctx, ev.Job); err != nil && !errors.Is(err, queue.ErrNotFound) {
				e.t.Fatalf("waiting for job %s: %v", ev.Job, err)
			}
			delete(left, k)
		case <-e.ctx.Done():
			e.t.Fatalf("timed out waiting for %v", left)
		}
	}
}

// Past the tolerance, the items still running are cancelled and the
// ones not started never start.
func TestMapFailureCancelsRunningItems(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("m.yaml", fmt.Sprintf(mapYAML, 2, "0"))
	o := e.run(p, map[string]any{"tag": "x", "items": []any{0, -1, 0, 0}}, "m4")
	if o.Status != runstate.Succeeded || !strings.Contains(string(o.Result), "item 1: fail: negative -1") {
		t.Fatalf("%s %s %s", o.Status, o.Result, o.Error)
	}
	ch, stop := e.it.Watch("m4:each:0.1:0")
	defer stop()
	if st, err := e.rt.Status(e.ctx, "m4:each:0.1:0"); err != nil {
		t.Fatal(err)
	} else if !st.State.Terminal() {
		e.await(ch)
	}
	if st, _ := e.rt.Status(e.ctx, "m4:each:0.1:0"); st.State != runstate.StateCancelled {
		t.Errorf("the waiting item is %s; want cancelled", st.State)
	}
	for _, id := range []string{"m4:each:0.1:2", "m4:each:0.1:3"} {
		if _, err := e.rt.Status(e.ctx, id); err == nil {
			t.Errorf("item run %s started after the map failed", id)
		}
	}
}

// A map whose run input is over inlineInputLimit runs every item: each
// item run reads the input from the input object (one decoded copy shared
// by the items here) before its steps run, and returns its own result.
func TestMapReadsALargeInput(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("m.yaml", fmt.Sprintf(mapYAML, 8, "0"))
	items := make([]any, 1500)
	for i := range items {
		items[i] = i + 1
	}
	input := map[string]any{"tag": strings.Repeat("t", 100), "items": items}
	if b, _ := encodeMsgpack(input); len(b) <= inlineInputLimit {
		t.Fatalf("the input is %d bytes, not over the inline limit %d", len(b), inlineInputLimit)
	}
	o := e.run(p, input, "big1")
	if o.Status != runstate.Succeeded {
		t.Fatalf("%s: %s", o.Status, o.Error)
	}
	var out struct {
		Results     []int
		Done, Total int
	}
	if err := json.Unmarshal(o.Result, &out); err != nil {
		t.Fatal(err)
	}
	if out.Done != len(items) || out.Total != len(items) || len(out.Results) != len(items) {
		t.Fatalf("done %d, total %d, %d results; want %d each", out.Done, out.Total, len(out.Results), len(items))
	}
	for i, r := range out.Results {
		if want := (i+1)*3 + i; r != want {
			t.Fatalf("result %d is %d, want %d", i, r, want)
		}
	}
}
