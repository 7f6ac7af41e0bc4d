package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kill SIGKILLs a background tqw-dsl and waits for it to be gone.
func (p *bg) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
}

// lines counts the lines of a file each process appends to (0 when it
// does not exist yet).
func countLines(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out[l]++
		}
	}
	return out
}

// TestParallelSurvivesSIGKILL kills the worker while a parallel step has
// one branch finished and the other waiting on a signal; a new worker
// takes the run over, the signal ends the waiting branch, and the run
// completes with both results, the finished branch not run again.
func TestParallelSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	c := newCLI(t)
	log := filepath.Join(c.dir, "effects.log")
	wf := c.writeWorkflow("par.yaml", `tqw: v1
name: par-crash
input: {type: object, required: [log, order], properties: {log: {type: string}, order: {type: string}}}
steps:
  - id: both
    parallel:
      branches:
        quick:
          - id: mark
            action: shell
            with: {command: 'echo quick >> ${ input.log }'}
          - id: quick_done
            succeed: quick-done
        slow:
          - id: hold
            action: wait_signal
            with: {key: "go:${ input.order }", timeout: 1h}
          - id: slow_done
            succeed: "${ output.v }"
  - id: done
    succeed: "${ output }"
`)
	in, _ := json.Marshal(map[string]any{"log": log, "order": "o1"})
	c.must(0, "submit", wf, "--input", string(in), "--run-id", "par1")
	w := c.start("worker", "--inbox-poll", "200ms")
	c.awaitState("par1:both:0.1:quick", "succeeded")
	c.awaitState("par1:both:0.1:slow", "waiting")
	w.kill()

	w = c.start("worker", "--inbox-poll", "200ms")
	c.must(0, "signal", "go:o1", `{"v": "slow-done"}`)
	st := c.awaitState("par1", "succeeded", "failed", "cancelled")
	w.kill()
	if st.State != "succeeded" || string(st.Result) != `{"quick":"quick-done","slow":"slow-done"}` {
		t.Fatalf("par1 ended %s with %s", st.State, st.Result)
	}
	if n := countLines(t, log)["quick"]; n != 1 {
		t.Errorf("the finished branch ran its shell step %d times; want once", n)
	}
	out, _ := c.must(0, "history", "par1")
	if !strings.Contains(out, "children  tqw-dsl history par1:both:0.1:") {
		t.Errorf("history of the parent does not point at its branches:\n%s", out)
	}
}

// TestMapSurvivesSIGKILL kills the worker when about half of a
// 1,000-item map has run, starts another, and checks that every item ran
// and that no item that had finished before the kill ran again: each
// item appends its index to a file, so a finished item's index appears
// exactly once, and an item that was running at the kill at most twice.
func TestMapSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	const total, concurrency = 1000, 16
	c := newCLI(t)
	log := filepath.Join(c.dir, "items.log")
	wf := c.writeWorkflow("map.yaml", fmt.Sprintf(`tqw: v1
name: map-crash
input: {type: object, required: [log, items], properties: {log: {type: string}, items: {type: array}}}
steps:
  - id: each
    map:
      items: "${ input.items }"
      concurrency: %d
      steps:
        - id: mark
          action: shell
          with: {command: 'echo ${ index } >> ${ input.log }'}
        - id: item_done
          succeed: "${ item * 2 }"
  - id: done
    succeed: {done: "${ output.done }", total: "${ output.total }", last: "${ output.results[%d] }"}
`, concurrency, total-1))
	items := make([]int, total)
	for i := range items {
		items[i] = i
	}
	in, _ := json.Marshal(map[string]any{"log": log, "items": items})
	c.must(0, "submit", wf, "--input", string(in), "--run-id", "map1")
	w := c.start("worker", "--inbox-poll", "200ms", "--concurrency", "16")
	deadline := time.Now().Add(waitDeadline)
	tick := time.NewTicker(20 * time.Millisecond)
	for len(countLines(t, log)) < total/2 {
		if time.Now().After(deadline) {
			t.Fatalf("the map did not reach item %d in %v: %d items ran", total/2, waitDeadline, len(countLines(t, log)))
		}
		<-tick.C
	}
	tick.Stop()
	w.kill()

	// The items whose runs had ended when the worker died.
	out, _ := c.must(0, "list", "--json", "--status", "succeeded", "--limit", "100000")
	finished := map[int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			Run string `json:"run"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("list line %q: %v", l, err)
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(r.Run, "map1:each:0.1:")); err == nil && strings.HasPrefix(r.Run, "map1:each:0.1:") {
			finished[i] = true
		}
	}
	if len(finished) == 0 || len(finished) >= total {
		t.Fatalf("%d items had finished at the kill; the kill was not mid-map", len(finished))
	}

	w = c.start("worker", "--inbox-poll", "200ms", "--concurrency", "16")
	st := c.awaitState("map1", "succeeded", "failed", "cancelled")
	w.kill()
	if st.State != "succeeded" || string(st.Result) != fmt.Sprintf(`{"done":%d,"last":%d,"total":%d}`, total, 2*(total-1), total) {
		t.Fatalf("map1 ended %s with %s", st.State, st.Result)
	}
	ran := countLines(t, log)
	twice := 0
	for i := 0; i < total; i++ {
		n := ran[strconv.Itoa(i)]
		switch {
		case n == 0:
			t.Errorf("item %d never ran", i)
		case finished[i] && n != 1:
			t.Errorf("item %d had finished before the kill and ran %d times", i, n)
		case n > 2:
			t.Errorf("item %d ran %d times", i, n)
		case n == 2:
			twice++
		}
	}
	if twice > concurrency {
		t.Errorf("%d items ran twice; at most the %d running at the kill may", twice, concurrency)
	}
}
