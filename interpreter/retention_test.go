package interpreter

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

const bigYAML = `
tqw: v1
name: big
steps:
  - id: big
    action: shell
    with: {command: "head -c 200000 /dev/zero | tr '\\0' x"}
  - id: done
    succeed: "${ len(steps.big.output.stdout) }"
`

// kvKeys returns the caller-KV keys under prefix.
func (e *tenv) kvKeys(prefix string) []string {
	e.t.Helper()
	var out []string
	page, err := e.q.KVScan(e.ctx, prefix, "", 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, kv := range page {
		out = append(out, kv.Key)
	}
	return out
}

// objectKeys returns the object keys under prefix.
func (e *tenv) objectKeys(prefix string) []string {
	e.t.Helper()
	page, err := e.store.List(e.ctx, prefix, "", 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, o := range page {
		out = append(out, o.Key)
	}
	return out
}

// runRecords returns what the interpreter stores for runID.
func (e *tenv) runRecords(runID string) (kv, objects []string) {
	e.t.Helper()
	for _, p := range runRecordPrefixes(runID) {
		kv = append(kv, e.kvKeys(p)...)
	}
	return kv, e.objectKeys(outputsObjectPrefix(runID))
}

// unknownToHistory checks what `tqw-dsl history RUN` checks to call a
// run unknown: no history record and no runtime status.
func (e *tenv) unknownToHistory(runID string) bool {
	e.t.Helper()
	if len(e.history(runID)) > 0 {
		return false
	}
	_, err := e.rt.Status(e.ctx, runID)
	if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
		e.t.Fatal(err)
	}
	return errors.Is(err, runtime.ErrRunNotFound)
}

// settleNotifications waits until every terminal notification in flight
// is settled: a Watch channel fires inside the hook, before the effects it
// staged commit with the notification's acknowledgement.
func (e *tenv) settleNotifications() {
	e.t.Helper()
	for _, st := range []queue.State{queue.StatePending, queue.StateClaimed} {
		jobs, err := e.q.ListJobs(e.ctx, e.rt.NotifyQueueName(), st, "", 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, j := range jobs {
			if _, err := e.q.WaitForCompletion(e.ctx, j.ID); err != nil && !errors.Is(err, queue.ErrNotFound) {
				e.t.Fatalf("waiting for notification %s: %v", j.ID, err)
			}
		}
	}
}

// waitEnds waits for an end event with status of each of steps, in any
// order, and for the settlement of each.
func (e *tenv) waitEnds(status string, steps ...string) {
	e.t.Helper()
	left := map[string]bool{}
	for _, s := range steps {
		left[s] = true
	}
	for len(left) > 0 {
		select {
		case ev := <-e.events:
			if ev.Kind != "end" || ev.Status != status || !left[ev.Step] {
				continue
			}
			delete(left, ev.Step)
			if _, err := e.q.WaitForCompletion(e.ctx, ev.Job); err != nil && !errors.Is(err, queue.ErrNotFound) {
				e.t.Fatalf("waiting for job %s: %v", ev.Job, err)
			}
		case <-e.ctx.Done():
			e.t.Fatalf("timed out waiting for steps %v to end with %s", left, status)
		}
	}
}

func (e *tenv) sweep() SweepResult {
	e.t.Helper()
	if _, err := e.rt.Sweep(e.ctx); err != nil {
		e.t.Fatalf("runtime sweep: %v", err)
	}
	res, err := e.it.Sweep(e.ctx)
	if err != nil {
		e.t.Fatalf("interpreter sweep: %v", err)
	}
	return res
}

func TestRetentionRemovesRecordsOfExpiredRuns(t *testing.T) {
	e := newTestEnv(t, withRetention(time.Hour, time.Hour))
	p := e.write("big.yaml", bigYAML)
	wantSucceeded(t, e.run(p, map[string]any{}, "r1"), "200000")
	w := e.write("wait.yaml", waitYAML)
	ch := e.submitUntil(w, map[string]any{}, "r2", "ask", OutcomeWaiting)
	if ok, err := e.rt.Cancel(e.ctx, "r2"); err != nil || !ok {
		t.Fatalf("Cancel r2: %v %v", ok, err)
	}
	if o := e.await(ch); o.Status != runstate.Cancelled {
		t.Fatalf("r2 ended %s", o.Status)
	}
	e.settleNotifications()
	// The hook dropped the cancelled run's wait entry at once.
	if ws, err := e.it.Waiting(e.ctx, e.q, "r2:ask"); err != nil || ws != nil {
		t.Fatalf("waiter of a cancelled run: %+v, %v", ws, err)
	}
	defs := e.objectKeys(defsPrefix)
	if len(defs) != 2 {
		t.Fatalf("definitions %v; want 2", defs)
	}

	// Before retention: everything is there.
	e.clock.Advance(59 * time.Minute)
	if res := e.sweep(); res != (SweepResult{}) {
		t.Fatalf("sweep before retention removed %+v", res)
	}
	kv1, obj1 := e.runRecords("r1")
	// Two history records, two visits lists, one output: big's.
	if len(kv1) != 5 || len(obj1) != 1 || len(e.kvKeys(kvExpire)) != 2 {
		t.Fatalf("before retention: kv %v, objects %v, markers %v", kv1, obj1, e.kvKeys(kvExpire))
	}
	if e.unknownToHistory("r1") || e.unknownToHistory("r2") {
		t.Fatal("a run is unknown before its retention ended")
	}

	// After retention: the records, objects and markers are gone.
	e.clock.Advance(2 * time.Minute)
	res := e.sweep()
	// r2: ask's history record and visits list.
	if res.Runs != 2 || res.Objects != 1 || res.Keys != 5+2 {
		t.Fatalf("sweep after retention: %+v; want 2 runs, 1 object, 7 keys", res)
	}
	for _, id := range []string{"r1", "r2"} {
		if kv, obj := e.runRecords(id); len(kv)+len(obj) != 0 {
			t.Fatalf("run %s after retention: kv %v, objects %v", id, kv, obj)
		}
		if !e.unknownToHistory(id) {
			t.Fatalf("run %s is still known after retention", id)
		}
	}
	if m := e.kvKeys(kvExpire); len(m) != 0 {
		t.Fatalf("markers left: %v", m)
	}
	// Definitions are kept (content-addressed, shared by runs).
	if got := e.objectKeys(defsPrefix); len(got) != 2 {
		t.Fatalf("definitions after retention: %v", got)
	}
	if res := e.sweep(); res != (SweepResult{}) {
		t.Fatalf("a second sweep removed %+v", res)
	}
	// The id is free again, and the new run's history is its own.
	wantSucceeded(t, e.run(p, map[string]any{}, "r1"), "200000")
	e.wantHistory("r1", "big:ok done:succeeded")
}

func TestSweepResumesAfterAFailedPass(t *testing.T) {
	var fs *faults.Store
	e := newTestEnv(t, withRetention(time.Hour, time.Hour), withInterpreterStore(func(s objstore.Store) objstore.Store {
		fs = faults.New(s, 1)
		return fs
	}))
	wantSucceeded(t, e.run(e.write("big.yaml", bigYAML), map[string]any{}, "r1"), "200000")
	e.settleNotifications()
	e.clock.Advance(2 * time.Hour)
	// The run's status expired: its records are the interpreter's to remove.
	if _, err := e.rt.Sweep(e.ctx); err != nil {
		t.Fatal(err)
	}
	fs.Set(faults.Rule{Ops: faults.OpDelete, KeyPrefix: outputsPrefix, Nth: 1})
	if _, err := e.it.Sweep(e.ctx); !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("sweep with a failing DELETE: %v; want the injected error", err)
	}
	// Nothing is half gone in a way that loses the marker.
	// Two history records, two visits lists, one output: big's.
	if kv, obj := e.runRecords("r1"); len(kv) != 5 || len(obj) != 1 || len(e.kvKeys(kvExpire)) != 1 {
		t.Fatalf("after a failed pass: kv %v, objects %v, markers %v", kv, obj, e.kvKeys(kvExpire))
	}
	fs.Clear()
	if res := e.sweep(); res.Runs != 1 || res.Objects != 1 {
		t.Fatalf("second pass: %+v", res)
	}
	if kv, obj := e.runRecords("r1"); len(kv)+len(obj) != 0 || len(e.kvKeys(kvExpire)) != 0 {
		t.Fatalf("after the second pass: kv %v, objects %v", kv, obj)
	}
}

func TestNoRetentionKeepsRecords(t *testing.T) {
	e := newTestEnv(t)
	wantSucceeded(t, e.run(e.write("big.yaml", bigYAML), map[string]any{}, "r1"), "200000")
	e.settleNotifications()
	e.clock.Advance(1000 * time.Hour)
	if res, err := e.it.Sweep(e.ctx); err != nil || res != (SweepResult{}) {
		t.Fatalf("sweep without retention: %+v, %v", res, err)
	}
	if kv, obj := e.runRecords("r1"); len(kv) != 5 || len(obj) != 1 || len(e.kvKeys(kvExpire)) != 0 {
		t.Fatalf("records without retention: kv %v, objects %v", kv, obj)
	}
}

func TestCancellingAParentCancelsItsChildren(t *testing.T) {
	e := newTestEnv(t)
	e.write("leaf.yaml", `
tqw: v1
name: leaf
steps:
  - id: ask
    action: wait_signal
    with: {timeout: 1h}
`)
	e.write("mid.yaml", `
tqw: v1
name: mid
steps:
  - id: leaf
    call: {workflow: ./leaf.yaml}
`)
	p := e.write("top.yaml", `
tqw: v1
name: top
steps:
  - id: mid
    call: {workflow: ./mid.yaml}
`)
	const mid, leaf = "p1:mid:0", "p1:mid:0:leaf:0"
	midCh, stopMid := e.it.Watch(mid)
	defer stopMid()
	leafCh, stopLeaf := e.it.Watch(leaf)
	defer stopLeaf()
	ch := e.submit(p, map[string]any{}, "p1")
	e.start()
	// Every run waits, its waiting step settled: a Cancel racing a
	// settlement is the runtime's concern, not this test's.
	e.waitEnds(OutcomeWaiting, "mid", "leaf", "ask")
	if st, err := e.rt.Status(e.ctx, leaf); err != nil || st.State != runstate.StateWaiting {
		t.Fatalf("leaf before the cancel: %+v, %v", st, err)
	}
	if ok, err := e.rt.Cancel(e.ctx, "p1"); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	if o := e.await(ch); o.Status != runstate.Cancelled {
		t.Fatalf("parent ended %s", o.Status)
	}
	for _, c := range []<-chan *runstate.Outcome{midCh, leafCh} {
		if o := e.await(c); o.Status != runstate.Cancelled {
			t.Fatalf("child %s ended %s (%s); want cancelled", o.RunID, o.Status, o.Error)
		}
	}
	e.settleNotifications()
	if ws, err := e.it.Waiting(e.ctx, e.q, leaf+":ask"); err != nil || ws != nil {
		t.Fatalf("waiter of the cancelled leaf: %+v, %v", ws, err)
	}
	// A second notification of the parent's end changes nothing.
	if err := e.it.cancelChildren(e.ctx, "p1"); err != nil {
		t.Fatal(err)
	}
}

func TestReusedRunIDIsRejected(t *testing.T) {
	e := newTestEnv(t, withRetention(2*time.Hour, time.Hour))
	p := e.write("big.yaml", bigYAML)
	wantSucceeded(t, e.run(p, map[string]any{}, "r1"), "200000")
	e.settleNotifications()
	before := e.wantHistory("r1", "big:ok done:succeeded")

	// The result is retained: Submit refuses the id.
	_, err := e.it.Submit(e.ctx, e.load(p), map[string]any{}, "r1")
	if !errors.Is(err, ErrRunIDReused) || !strings.Contains(err.Error(), "fresh run id") {
		t.Fatalf("resubmitting a finished run: %v; want ErrRunIDReused", err)
	}
	// The result expired, the history not yet: still refused.
	e.clock.Advance(time.Hour + time.Minute)
	e.sweep()
	if _, err := e.rt.Status(e.ctx, "r1"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("status after result retention: %v", err)
	}
	if _, err := e.it.Submit(e.ctx, e.load(p), map[string]any{}, "r1"); !errors.Is(err, ErrRunIDReused) {
		t.Fatalf("resubmitting with history retained: %v; want ErrRunIDReused", err)
	}
	// A submission that skips Submit's check (one through a remote
	// client's inbox, built from a stale view) fails at its first step
	// without writing anything.
	payload, err := (&state{V: stateVersion, Def: e.load(p).pin.Hash, Input: map[string]any{}}).encode()
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := e.it.Watch("r1")
	defer stop()
	if _, err := e.rt.Submit(e.ctx, runtime.RunSpec{RunID: "r1", Input: payload}); err != nil {
		t.Fatal(err)
	}
	o := e.await(ch)
	wantFailedWith(t, o, "earlier run r1")
	if got := e.history("r1"); len(got) != len(before) || got[0].End != before[0].End {
		t.Fatalf("history after a rejected reuse: %q", outcomes(got))
	}
	// An active run's id is still idempotent.
	if _, err := e.it.Submit(e.ctx, e.load(e.write("wait.yaml", waitYAML)), map[string]any{}, "w1"); err != nil {
		t.Fatal(err)
	}
	if out, err := e.it.Submit(e.ctx, e.load(e.write("wait.yaml", waitYAML)), map[string]any{}, "w1"); err != nil || out.NewlySubmitted {
		t.Fatalf("resubmitting an active run: %+v, %v", out, err)
	}
}

func TestForeachOfParkingActionRejectedAtLoad(t *testing.T) {
	for action, with := range map[string]string{"sleep": "{duration: 1s}", "wait_signal": "{timeout: 1s}"} {
		t.Run(action, func(t *testing.T) {
			e := newTestEnv(t)
			e.write("child.yaml", `
tqw: v1
name: child
steps:
  - id: first
    succeed: ok
  - id: each
    foreach:
      items: [1, 2]
      action: `+action+`
      with: `+with+`
`)
			p := e.write("parent.yaml", `
tqw: v1
name: parent
steps:
  - id: kid
    call: {workflow: ./child.yaml}
`)
			before := len(allObjects(t, e.ctx, e.store))
			_, err := Load(p, dsl.Options{})
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, dsl.ErrInvalid) {
				t.Fatalf("Load: %v; want a LoadError matching dsl.ErrInvalid", err)
			}
			// The dsl loader refuses it, at the step in the called file.
			re := regexp.MustCompile(`^` + regexp.QuoteMeta(e.dir) + `/child\.yaml:\d+:\d+: error: .*foreach cannot run ` + action)
			if !re.MatchString(err.Error()) {
				t.Fatalf("Load error %q; want file:line:col and %q", err, "foreach cannot run "+action)
			}
			if !strings.Contains(le.Diagnostics.String(), "["+dsl.CodeForeachWait+"]") {
				t.Fatalf("Load diagnostics %q; want code %s", le.Diagnostics.String(), dsl.CodeForeachWait)
			}
			if n := len(allObjects(t, e.ctx, e.store)); n != before {
				t.Fatalf("Load changed the store: %d objects, %d before", n, before)
			}
		})
	}
}

const bigThenWaitYAML = `
tqw: v1
name: bigwait
steps:
  - id: big
    action: shell
    with: {command: "head -c 200000 /dev/zero | tr '\\0' x"}
  - id: ask
    action: wait_signal
    with: {timeout: 1h}
    next: done
  - id: done
    succeed: ok
`

const smallThenWaitYAML = `
tqw: v1
name: smallwait
steps:
  - id: small
    set: {n: 1}
  - id: ask
    action: wait_signal
    with: {timeout: 1h}
    next: done
  - id: done
    succeed: ok
`

// With sealing and retention on, a run this process saw start and that
// stored no large output is known clean: Observes lets it end without a
// terminal notification (no job, no commit for it). A run with a large
// output is observed, so its notification writes the retention marker
// the sweep deletes the output object by. Ended runs leave nothing
// behind in the tracking.
func TestKnownCleanRunsNeedNoNotification(t *testing.T) {
	e := newTestEnv(t, withRetention(time.Hour, time.Hour), withRuntimeOptions(runtime.Options{Sealing: &runtime.SealOptions{Delay: -1}}))
	small := e.submitUntil(e.write("small.yaml", smallThenWaitYAML), map[string]any{}, "small", "ask", OutcomeWaiting)
	big := e.submitUntil(e.write("big.yaml", bigThenWaitYAML), map[string]any{}, "big", "ask", OutcomeWaiting)
	succeeded := func(id string) *runstate.Outcome {
		return &runstate.Outcome{RunID: id, Status: runstate.Succeeded, Headers: map[string]string{}}
	}
	if e.it.Observes(succeeded("small")) {
		t.Error("a clean run's success is observed: it would cost a notification")
	}
	if !e.it.Observes(succeeded("big")) {
		t.Error("a run with a large output is not observed: its retention marker would never be written")
	}
	if !e.it.Observes(succeeded("never-seen")) {
		t.Error("a run this process did not see start is not observed")
	}
	rerun := succeeded("small")
	rerun.Headers[headerRunKey] = "k"
	if !e.it.Observes(rerun) {
		t.Error("a run with a rerun claim is not observed")
	}
	for _, id := range []string{"small", "big"} {
		if _, err := e.rt.Signal(e.ctx, id+":ask", []byte(`{}`)); err != nil {
			t.Fatalf("signal %s: %v", id, err)
		}
	}
	for _, ch := range []<-chan *runstate.Outcome{small, big} {
		if o := e.await(ch); o.Status != runstate.Succeeded {
			t.Fatalf("run %s ended %s: %s", o.RunID, o.Status, o.Error)
		}
	}
	e.settleNotifications()
	if m := e.kvKeys(kvExpire); len(m) != 1 || !strings.HasSuffix(m[0], "/big") {
		t.Errorf("retention markers %v, want one, of big", m)
	}
	e.it.cleanMu.Lock()
	left := len(e.it.clean)
	e.it.cleanMu.Unlock()
	if left != 0 {
		t.Errorf("%d ended runs left in the clean-run tracking", left)
	}
}

// runView is what the CLI shows of a run: whether `status` finds it,
// whether `history` prints steps (sealed ones too), and whether Submit
// refuses its id.
type runView struct{ status, history, refused bool }

func (e *tenv) view(runID string) runView {
	e.t.Helper()
	var v runView
	_, err := e.rt.Status(e.ctx, runID)
	if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
		e.t.Fatal(err)
	}
	v.status = err == nil
	h, err := History(e.ctx, WithSealed(e.q, e.rt.Inspector()), e.store, runID)
	if err != nil {
		e.t.Fatalf("history of %s: %v", runID, err)
	}
	v.history = len(h) > 0
	err = checkReuse(e.ctx, e.rt.Inspector(), e.q, runID)
	if err != nil && !errors.Is(err, ErrRunIDReused) {
		e.t.Fatal(err)
	}
	v.refused = err != nil
	return v
}

// wantWhole checks that runID is entirely present or entirely gone.
func (e *tenv) wantWhole(runID string, present bool) {
	e.t.Helper()
	want := runView{present, present, present}
	if got := e.view(runID); got != want {
		e.t.Fatalf("run %s: status found %v, history found %v, id refused %v; want all %v",
			runID, got.status, got.history, got.refused, present)
	}
}

// stopWorker stops the worker, so only the test's own sweeps run.
func (e *tenv) stopWorker() {
	e.t.Helper()
	if err := e.w.Shutdown(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.w = nil
}

const smallYAML = `
tqw: v1
name: small
steps:
  - id: small
    set: {n: 1}
  - id: done
    succeed: ok
`

// A run whose end is handed to the sealer but which is not sealed before
// its result retention ends (a process stopped within the seal delay and
// restarted later) expires whole: its history goes with its status, and
// its id is free.
func TestUnsealedRunPastRetentionExpiresWhole(t *testing.T) {
	e := newTestEnv(t, withRetention(time.Hour, time.Hour), withRuntimeOptions(runtime.Options{Sealing: &runtime.SealOptions{Delay: -1}}))
	small, big := e.write("small.yaml", smallYAML), e.write("big.yaml", bigYAML)
	wantSucceeded(t, e.run(small, map[string]any{}, "s1"), `"ok"`)
	wantSucceeded(t, e.run(big, map[string]any{}, "b1"), "200000")
	e.settleNotifications()
	e.stopWorker()
	e.wantWhole("s1", true)
	e.wantWhole("b1", true)

	e.clock.Advance(time.Hour + time.Minute)
	e.sweep()
	for _, id := range []string{"s1", "b1"} {
		e.wantWhole(id, false)
		if kv, obj := e.runRecords(id); len(kv)+len(obj) != 0 {
			t.Fatalf("run %s after retention: kv %v, objects %v", id, kv, obj)
		}
	}
	if m := e.kvKeys(kvExpire); len(m) != 0 {
		t.Fatalf("retention markers left: %v", m)
	}
	e.start()
	wantSucceeded(t, e.run(small, map[string]any{}, "s1"), `"ok"`)
	e.wantHistory("s1", "small:ok done:succeeded")
}

// A sealed run stays whole while its segment lists it, also past the
// interpreter's own retention: its large outputs are deleted with the
// segment, not before.
func TestSealedRunKeepsItsLargeOutputsWhileListed(t *testing.T) {
	e := newTestEnv(t, withRetention(time.Hour, 2*time.Hour), withRuntimeOptions(runtime.Options{Sealing: &runtime.SealOptions{Delay: -1}}))
	wantSucceeded(t, e.run(e.write("big.yaml", bigYAML), map[string]any{}, "b1"), "200000")
	e.settleNotifications()
	e.stopWorker()
	if _, err := e.rt.Seal(e.ctx); err != nil {
		t.Fatal(err)
	}
	if kv, _ := e.runRecords("b1"); len(kv) != 0 {
		t.Fatalf("records of the sealed run left in the KV: %v", kv)
	}

	// The interpreter's retention ended, the segment's not.
	e.clock.Advance(time.Hour + time.Minute)
	e.sweep()
	e.wantWhole("b1", true)
	h, err := History(e.ctx, WithSealed(e.q, e.rt.Inspector()), e.store, "b1")
	if err != nil {
		t.Fatalf("history of the listed sealed run: %v", err)
	}
	if out, _ := h[0].Output.(map[string]any); len(fmt.Sprint(out["stdout"])) != 200000 {
		t.Fatalf("the listed sealed run's large output reads %.80v", h[0].Output)
	}

	e.clock.Advance(time.Hour)
	e.sweep()
	e.wantWhole("b1", false)
	if kv, obj := e.runRecords("b1"); len(kv)+len(obj) != 0 {
		t.Fatalf("run b1 after its segment expired: kv %v, objects %v", kv, obj)
	}
	if m := e.kvKeys(kvExpire); len(m) != 0 {
		t.Fatalf("retention markers left: %v", m)
	}
}
