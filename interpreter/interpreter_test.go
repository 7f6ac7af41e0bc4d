package interpreter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/allocbound"
	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime"
)

func TestRoutingSetSwitchNextSucceed(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("route.yaml", `
tqw: v1
name: route
input: {type: object, properties: {n: {type: integer}}}
vars: {count: 0, route: big}
steps:
  - id: start
    set: {count: "${ vars.count + input.n }", doubled: "${ (vars.count + input.n) * 2 }"}
  - id: decide
    switch:
      - when: vars.count > 10
        next: "${ vars.route }"
    next: small
  - id: small
    set: {size: small}
    next: done
  - id: big
    set: {size: big}
  - id: done
    succeed: {size: "${ vars.size }", count: "${ vars.count }", doubled: "${ vars.doubled }"}
`)
	wantSucceeded(t, e.run(p, map[string]any{"n": 3}, "r-small"), `{"count":3,"doubled":6,"size":"small"}`)
	wantSucceeded(t, e.run(p, map[string]any{"n": 30}, "r-big"), `{"count":30,"doubled":60,"size":"big"}`)
	e.wantHistory("r-big", "start:ok decide:ok big:ok done:succeeded")
	e.wantHistory("r-small", "start:ok decide:ok small:ok done:succeeded")
}

// TestRunOutcomes runs one-file workflows to their end and checks the
// result of those that succeed and the error of those that fail.
func TestRunOutcomes(t *testing.T) {
	for _, c := range []struct {
		name, file, src string
		input           any
		// result is the wanted result; failure, when set, a part of the
		// wanted error instead.
		result, failure string
	}{
		{name: "last step succeeds with last output", file: "last.yaml", src: `
tqw: v1
name: last
steps:
  - id: say
    action: shell
    with: {command: "printf hi"}
  - id: tail
    set: {x: 1}
`, input: map[string]any{}, result: `{"exit_code":0,"stderr":"","stderr_truncated":false,"stdout":"hi","stdout_truncated":false}`},
		{name: "zero values survive", file: "zero.yaml", src: `
tqw: v1
name: zero
steps:
  - id: a
    action: shell
    with: {command: "printf ''"}
    set: {code: "${ output.exit_code }"}
  - id: b
    succeed: "${ [input, vars.code, steps.a.output.stdout, steps.a.output.stdout_truncated] }"
`, input: int64(0), result: `[0,0,"",false]`},
		{name: "expression error fails run", file: "expr.yaml", src: `
tqw: v1
name: expr
steps:
  - id: bad
    set: {x: "${ input.a.b.c }"}
  - id: done
    succeed: ok
`, input: map[string]any{}, failure: "step bad: expression:"},
		{name: "missing secret is a validation error", file: "secret.yaml", src: `
tqw: v1
name: secret
secrets: [TOKEN]
steps:
  - id: echo
    action: http
    with: {url: "http://127.0.0.1:1/", headers: {Authorization: "${ secrets.TOKEN }"}}
`, input: map[string]any{}, failure: "validation: secret TOKEN is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t)
			o := e.run(e.write(c.file, c.src), c.input, "r1")
			if c.failure != "" {
				wantFailedWith(t, o, c.failure)
				return
			}
			wantSucceeded(t, o, c.result)
		})
	}
}

func TestFailStep(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("fail.yaml", `
tqw: v1
name: fail
steps:
  - id: no
    fail: "refused ${ input.who }"
`)
	o := e.run(p, map[string]any{"who": "bob"}, "r1")
	wantFailed(t, o, "refused bob")
	h := e.history("r1")
	if len(h) != 1 || h[0].Outcome != OutcomeFailed || h[0].Error == nil || h[0].Error.Message != "refused bob" {
		t.Fatalf("history %+v", h)
	}
}

// flaky answers 500 to the first fails requests, then 200 with the count.
type flaky struct {
	mu    sync.Mutex
	fails int
	hits  map[string]int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hits == nil {
		f.hits = map[string]int{}
	}
	f.hits[r.URL.Path]++
	if strings.HasSuffix(r.URL.Path, "/404") {
		http.Error(w, "no such thing", http.StatusNotFound)
		return
	}
	if f.fails > 0 && (strings.HasSuffix(r.URL.Path, "/flaky") || f.hits[r.URL.Path] == 1 && strings.HasSuffix(r.URL.Path, "/once")) {
		if strings.HasSuffix(r.URL.Path, "/flaky") {
			f.fails--
		}
		http.Error(w, "try again", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"path": %q, "hit": %d, "key": %q}`, r.URL.Path, f.hits[r.URL.Path], r.Header.Get("Idempotency-Key"))
}

func (f *flaky) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// serveFlaky serves a flaky handler that fails fails requests, until the
// test ends, and returns it with its URL.
func serveFlaky(t *testing.T, fails int) (*flaky, string) {
	srv := &flaky{fails: fails}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

func TestRetryIsADurableDelay(t *testing.T) {
	_, url := serveFlaky(t, 2)
	e := newTestEnv(t)
	p := e.write("retry.yaml", `
tqw: v1
name: retry
steps:
  - id: call
    action: http
    with: {url: "${ input.url }/flaky"}
    retry: {max_attempts: 3, initial: 10s, multiplier: 3, on: [http.status_5xx]}
  - id: done
    succeed: "${ output.body.hit }"
`)
	ch := e.submitUntil(p, map[string]any{"url": url}, "r1", "call", OutcomeRetry)
	st, err := e.rt.Status(e.ctx, "r1")
	if err != nil || st.State != runstate.StateScheduled || !st.Until.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("after the first failure: %+v, %v; want scheduled until +10s", st, err)
	}
	e.clock.Advance(10 * time.Second)
	e.waitEvent("call", OutcomeRetry)
	st, _ = e.rt.Status(e.ctx, "r1")
	if !st.Until.Equal(t0.Add(40 * time.Second)) {
		t.Fatalf("second delay: until %v; want +40s (10s × 3)", st.Until.Sub(t0))
	}
	e.clock.Advance(30 * time.Second)
	wantSucceeded(t, e.await(ch), "3")
	h := e.wantHistory("r1", "call:retry call:retry call:ok done:succeeded")
	if h[0].Attempt != 1 || h[1].Attempt != 2 || h[2].Attempt != 3 || h[0].Error.Type != "http.status_5xx" || h[0].Error.Status != 500 {
		t.Fatalf("history attempts/errors: %+v", h)
	}
}

func TestRetrySpentFailsRunAndWhenFilters(t *testing.T) {
	srv, url := serveFlaky(t, 100)
	e := newTestEnv(t)
	p := e.write("retry.yaml", `
tqw: v1
name: retry
steps:
  - id: call
    action: http
    with: {url: "${ input.url }/flaky"}
    retry: {max_attempts: 5, initial: 1s, when: error.status != 500}
`)
	o := e.run(p, map[string]any{"url": url}, "r1")
	wantFailedWith(t, o, "step call: http.status_5xx")
	if n := srv.count("/flaky"); n != 1 {
		t.Fatalf("%d requests; retry.when excluded status 500, want 1", n)
	}
}

func TestCatchRoutesWithError(t *testing.T) {
	_, url := serveFlaky(t, 0)
	e := newTestEnv(t)
	p := e.write("catch.yaml", `
tqw: v1
name: catch
steps:
  - id: call
    action: http
    with: {url: "${ input.url }/404"}
    catch:
      - on: [http.status_5xx]
        next: wrong
      - on: [http.status_4xx]
        when: error.status == 404
        set: {reason: "${ error.type }/${ error.status }"}
        next: handled
  - id: wrong
    fail: wrong rule
  - id: handled
    succeed: "${ vars.reason } ${ output.status }"
`)
	o := e.run(p, map[string]any{"url": url}, "r1")
	wantSucceeded(t, o, `"http.status_4xx/404 404"`)
	e.wantHistory("r1", "call:caught handled:succeeded")
}

func TestTimeoutGoesToOnTimeout(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer ts.Close()
	defer close(release)
	e := newTestEnv(t)
	p := e.write("timeout.yaml", `
tqw: v1
name: timeout
steps:
  - id: slow
    action: http
    with: {url: "${ input.url }"}
    timeout: 50ms
    on_timeout: late
    catch:
      - next: wrong
  - id: wrong
    fail: catch ran before on_timeout
  - id: late
    succeed: "late"
`)
	wantSucceeded(t, e.run(p, map[string]any{"url": ts.URL}, "r1"), `"late"`)
	h := e.history("r1")
	if h[0].Error == nil || h[0].Error.Type != TypeTimeout {
		t.Fatalf("first record %+v; want a timeout error", h[0])
	}
}

func TestSleepParksTheRun(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("sleep.yaml", `
tqw: v1
name: sleep
steps:
  - id: nap
    action: sleep
    with: {duration: 2h}
  - id: done
    succeed: "${ string(now()) }"
`)
	ch := e.submitUntil(p, map[string]any{}, "r1", "nap", OutcomeWaiting)
	st, _ := e.rt.Status(e.ctx, "r1")
	if st.State != runstate.StateScheduled || !st.Until.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("status %+v; want scheduled for +2h", st)
	}
	e.clock.Advance(2 * time.Hour)
	o := e.await(ch)
	if o.Status != runstate.Succeeded || !strings.Contains(string(o.Result), "2026-03-04 07:06:07") {
		t.Fatalf("outcome %s %s; want the time after the sleep", o.Status, o.Result)
	}
}

const waitYAML = `
tqw: v1
name: wait
steps:
  - id: ask
    action: wait_signal
    with:
      timeout: 1h
      schema: {type: object, required: [approved], properties: {approved: {type: boolean}}}
    on_timeout: late
    switch:
      - when: output.approved
        next: yes
    next: no
  - id: "yes"
    succeed: approved
  - id: "no"
    succeed: rejected
  - id: late
    fail: nobody answered
`

func TestWaitSignal(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("wait.yaml", waitYAML)
	ch := e.submitUntil(p, map[string]any{}, "r1", "ask", OutcomeWaiting)
	if err := e.it.CheckSignal(e.ctx, e.q, "r1:ask", []byte(`{"approved": "yes"}`)); err == nil {
		t.Fatal("CheckSignal accepted a payload that breaks the schema")
	}
	if err := e.it.CheckSignal(e.ctx, e.q, "r1:ask", []byte(`{"approved"`)); err == nil {
		t.Fatal("CheckSignal accepted malformed JSON")
	}
	if err := e.it.CheckSignal(e.ctx, e.q, "r1:ask", []byte(`{"approved": true}`)); err != nil {
		t.Fatalf("CheckSignal: %v", err)
	}
	// Delivered or Buffered: the runtime may under-report a delivery that
	// races with the waiter's registration, and never loses the signal.
	if _, err := e.rt.Signal(e.ctx, "r1:ask", []byte(`{"approved": true}`)); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	wantSucceeded(t, e.await(ch), `"approved"`)
	if w, err := e.it.Waiting(e.ctx, e.q, "r1:ask"); err != nil || w != nil {
		t.Fatalf("waiter index after the run: %+v, %v; want none", w, err)
	}

	ch = e.submitUntil(p, map[string]any{}, "r2", "ask", OutcomeWaiting)
	e.clock.Advance(time.Hour)
	o := e.await(ch)
	wantFailed(t, o, "nobody answered")
}

func TestSignalBeforeWaitIsBuffered(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("wait.yaml", waitYAML)
	if _, err := e.rt.Signal(e.ctx, "r1:ask", []byte(`{"approved": false}`)); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.run(p, map[string]any{}, "r1"), `"rejected"`)
}

func TestForeachMemoizesFinishedItems(t *testing.T) {
	srv, url := serveFlaky(t, 1)
	e := newTestEnv(t)
	p := e.write("fe.yaml", `
tqw: v1
name: fe
steps:
  - id: all
    foreach:
      items: "${ input.paths }"
      concurrency: 2
      action: http
      with: {url: "${ input.url }/${ item }", headers: {X-Index: "i${ index }"}}
    retry: {max_attempts: 2, initial: 5s}
    set: {hits: "${ map(output, .body.hit) }"}
  - id: done
    succeed: "${ vars.hits }"
`)
	ch := e.submitUntil(p, map[string]any{"url": url, "paths": []any{"a", "b", "once", "c"}}, "r1", "all", OutcomeRetry)
	e.clock.Advance(5 * time.Second)
	wantSucceeded(t, e.await(ch), "[1,1,2,1]")
	for path, want := range map[string]int{"/a": 1, "/b": 1, "/once": 2, "/c": 1} {
		if n := srv.count(path); n != want {
			t.Errorf("%s requested %d times; want %d (finished items are not redone)", path, n, want)
		}
	}
}

func TestCallRunsChildWorkflow(t *testing.T) {
	e := newTestEnv(t)
	e.write("child.yaml", `
tqw: v1
name: child
input: {type: object, required: [n], properties: {n: {type: integer}}}
steps:
  - id: check
    switch:
      - when: input.n < 0
        next: bad
  - id: ok
    succeed: {twice: "${ input.n * 2 }"}
  - id: bad
    fail: "negative ${ input.n }"
`)
	p := e.write("parent.yaml", `
tqw: v1
name: parent
steps:
  - id: kid
    call: {workflow: ./child.yaml, input: {n: "${ input.n }"}}
    catch:
      - on: [call.failed]
        set: {why: "${ error.message }"}
        next: failed
  - id: done
    succeed: "${ output.twice }"
  - id: failed
    succeed: "${ vars.why }"
`)
	wantSucceeded(t, e.run(p, map[string]any{"n": 21}, "p1"), "42")
	o := e.run(p, map[string]any{"n": -1}, "p2")
	if o.Status != runstate.Succeeded || !strings.Contains(string(o.Result), "failed: negative -1") {
		t.Fatalf("child failure: %s %s", o.Status, o.Result)
	}
	e.wantHistory("p1:kid:0", "check:ok ok:succeeded")
	// An input the child's schema rejects is a validation error of the call.
	o = e.run(p, map[string]any{"n": "x"}, "p3")
	wantFailedWith(t, o, "validation")
}

func TestRecursiveCallRejectedAtLoad(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("self.yaml", `
tqw: v1
name: self
steps:
  - id: again
    call: {workflow: ./self.yaml}
`)
	if _, err := Load(p, dsl.Options{}); !errors.Is(err, ErrRecursiveCall) {
		t.Fatalf("Load: %v; want ErrRecursiveCall", err)
	}
}

func TestSecretsAreRedactedEverywhere(t *testing.T) {
	const secret = "s3cr3t-t0ken-value"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "bad token "+r.Header.Get("Authorization"), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"echo": %q}`, r.Header.Get("Authorization"))
	}))
	defer ts.Close()
	e := newTestEnv(t, withEnv("TOKEN", secret))
	p := e.write("secret.yaml", `
tqw: v1
name: secret
secrets: [TOKEN]
steps:
  - id: echo
    action: http
    with: {url: "${ input.url }/echo", headers: {Authorization: "Bearer ${ secrets.TOKEN }"}}
    set: {seen: "${ output.body.echo }"}
  - id: fail
    action: http
    with: {url: "${ input.url }/fail", headers: {Authorization: "Bearer ${ secrets.TOKEN }"}}
`)
	o := e.run(p, map[string]any{"url": ts.URL}, "r1")
	if o.Status != runstate.Failed {
		t.Fatalf("status %s", o.Status)
	}
	if strings.Contains(o.Error, secret) {
		t.Fatalf("error %q leaks the secret", o.Error)
	}
	h := e.history("r1")
	if len(h) != 2 || !strings.Contains(fmt.Sprint(h[1].Output), "bad token Bearer ***") {
		t.Fatalf("history %+v; want the failed step's partial output, redacted", h)
	}
	if fmt.Sprint(h[0].Output) == "" || !strings.Contains(fmt.Sprint(h[0].Output), "Bearer ***") {
		t.Fatalf("echo output %v; want Bearer ***", h[0].Output)
	}
	for key, b := range allObjects(t, e.ctx, e.store) {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("object %s holds the secret", key)
		}
	}
	e.close()
	for key, b := range allObjects(t, context.Background(), e.store) {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("after close: object %s holds the secret", key)
		}
	}
}

func TestLLMIsNotPaidTwice(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	fake.Enqueue(llmfake.Reply{Content: `{"label": "bug"}`, Usage: llmfake.Usage{PromptTokens: 7, CompletionTokens: 3}})
	e := newTestEnv(t, withLLM(fake.URL()), withEnv("OPENAI_API_KEY", "sk-test-key"))
	// The set fails on the first attempt (vars.boom is absent), and the
	// retry re-runs the step: the llm answer must come from the memo.
	p := e.write("llm.yaml", `
tqw: v1
name: llm
secrets: [OPENAI_API_KEY]
steps:
  - id: ask
    action: llm
    with:
      model: gpt-4o-mini
      prompt: "classify ${ input.msg }"
      response_schema: {type: object, required: [label], properties: {label: {type: string}}}
    retry: {max_attempts: 2, initial: 1s, on: [expression]}
    set: {label: "${ run.attempt == 1 ? vars.boom.x : output.json.label }", tokens: "${ output.usage.prompt_tokens }"}
  - id: done
    succeed: "${ vars.label }/${ vars.tokens }"
`)
	ch := e.submitUntil(p, map[string]any{"msg": "it crashes"}, "r1", "ask", OutcomeRetry)
	e.clock.Advance(time.Second)
	wantSucceeded(t, e.await(ch), `"bug/7"`)
	if n := fake.Calls(); n != 1 {
		t.Fatalf("the model was called %d times; want 1 (memoized)", n)
	}
}

func TestDefinitionIsPinnedAtSubmit(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("pin.yaml", `
tqw: v1
name: pin
steps:
  - id: done
    succeed: first
`)
	ch := e.submit(p, map[string]any{}, "r1")
	e.write("pin.yaml", `
tqw: v1
name: pin
steps:
  - id: done
    succeed: second
`)
	e.it.defMu.Lock()
	e.it.defs = newDefCache(DefinitionCacheSize, DefinitionCacheBytes) // as in another process
	e.it.defMu.Unlock()
	e.start()
	wantSucceeded(t, e.await(ch), `"first"`)
}

func TestRejectedInputWritesNothing(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("in.yaml", `
tqw: v1
name: in
input: {type: object, required: [n], properties: {n: {type: integer}}}
steps:
  - id: done
    succeed: ok
`)
	before := allObjects(t, e.ctx, e.store)
	_, err := e.it.Submit(e.ctx, e.load(p), map[string]any{"n": "not a number"}, "r1")
	if !errors.Is(err, dsl.ErrInputInvalid) {
		t.Fatalf("Submit: %v; want ErrInputInvalid", err)
	}
	after := allObjects(t, e.ctx, e.store)
	if len(after) != len(before) {
		t.Fatalf("%d objects before, %d after a rejected submit", len(before), len(after))
	}
	if _, err := e.rt.Status(e.ctx, "r1"); !errors.Is(err, runtime.ErrRunNotFound) {
		t.Fatalf("Status: %v; want not found", err)
	}
}

// An input over MaxInputSize is refused by Submit, for every door (the
// API and embedders as well as the CLI), and writes nothing.
func TestInputOverTheLimitWritesNothing(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("in.yaml", `
tqw: v1
name: in
steps:
  - id: done
    succeed: ok
`)
	before := allObjects(t, e.ctx, e.store)
	_, err := e.it.Submit(e.ctx, e.load(p), map[string]any{"blob": strings.Repeat("x", MaxInputSize)}, "r1")
	if !errors.Is(err, ErrInputTooLarge) || !errors.Is(err, dsl.ErrInputInvalid) {
		t.Fatalf("Submit: %v; want ErrInputTooLarge, an ErrInputInvalid", err)
	}
	if after := allObjects(t, e.ctx, e.store); len(after) != len(before) {
		t.Fatalf("%d objects before, %d after a refused submit", len(before), len(after))
	}
	if err := CheckInputJSON([]byte(`{"a": 1` + strings.Repeat(" ", MaxInputSize) + `}`)); err != nil {
		t.Errorf("whitespace counted against the limit: %v", err)
	}
}

func TestLargeOutputGoesToAnObject(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("big.yaml", `
tqw: v1
name: big
steps:
  - id: big
    action: shell
    with: {command: "head -c 200000 /dev/zero | tr '\\0' x"}
  - id: done
    succeed: "${ len(steps.big.output.stdout) }"
`)
	wantSucceeded(t, e.run(p, map[string]any{}, "r1"), "200000")
	h := e.history("r1")
	if h[0].OutputRef == "" {
		t.Fatal("a 200 kB output was kept inline")
	}
	out, _ := h[0].Output.(map[string]any)
	if s, _ := out["stdout"].(string); len(s) != 200000 {
		t.Fatalf("history output read back with %d bytes of stdout", len(s))
	}
}

func TestStateRoundTrip(t *testing.T) {
	s := &state{V: stateVersion, Def: "abc", Input: map[string]any{"a": int64(1), "b": []any{"x", 2.5}},
		Vars: map[string]any{"n": int64(3)}, Init: true, Step: 2, Attempt: 3, Visit: 7, Prev: "p",
		Pin: &pin{Hash: "abc", Calls: map[string]*pin{"c": {Hash: "def"}}}}
	b, err := s.encode()
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := s.encode()
	if !bytes.Equal(b, b2) {
		t.Fatal("encoding is not deterministic")
	}
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Input) != fmt.Sprint(s.Input) || got.Step != 2 || got.Pin.Calls["c"].Hash != "def" || got.Vars["n"] != int64(3) {
		t.Fatalf("round trip: %+v", got)
	}
	if _, err := decodeState([]byte{0xc1}); !errors.Is(err, ErrCorruptState) {
		t.Fatalf("garbage: %v", err)
	}
}

func FuzzDecodeState(f *testing.F) {
	for _, s := range []*state{
		{V: stateVersion, Def: "abc", Input: map[string]any{"a": int64(1)}, Step: 1},
		{V: stateVersion, Def: strings.Repeat("d", 64), Input: map[string]any{"url": "http://x", "items": []any{int64(1), 2.5, "s", nil, true}},
			Vars: map[string]any{"n": int64(3), "m": map[string]any{"k": []any{"v"}}}, Init: true, Step: 2, Attempt: 3, Visit: 7,
			Prev: "p", Phase: phaseSignal, WaitKey: "approve", Child: "run-2", Started: 1_700_000_000_000,
			Pin: &pin{Hash: "abc", Calls: map[string]*pin{"c": {Hash: "def", Calls: map[string]*pin{"d": {Hash: "ghi"}}}}}},
	} {
		b, err := s.encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range hostileStates {
		if len(b) < 1024 {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x80})
	golden.AddCorpus(f, "testdata/golden/state.v*.bin")
	f.Fuzz(func(t *testing.T, b []byte) {
		var st *state
		var err error
		allocbound.Check(t, len(b), func() { st, err = decodeState(b) })
		if err != nil {
			if !errors.Is(err, ErrCorruptState) {
				t.Fatalf("error %v does not match ErrCorruptState", err)
			}
			return
		}
		if _, err := st.encode(); err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
	})
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, "x", null, true]}`, `1e400`, `"x" "y"`, ``, `12345678901234567890`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeJSON(b)
		if err != nil {
			return
		}
		if _, err := toJSON(v); err != nil {
			t.Fatalf("decoded %q to %#v, which does not encode: %v", b, v, err)
		}
	})
}

func TestRetryJitterStaysInRange(t *testing.T) {
	_, url := serveFlaky(t, 100)
	e := newTestEnv(t)
	p := e.write("jitter.yaml", `
tqw: v1
name: jitter
steps:
  - id: call
    action: http
    with: {url: "${ input.url }/flaky"}
    retry: {max_attempts: 2, initial: 100s, jitter: 0.5}
`)
	seen := map[time.Duration]bool{}
	for i := range 4 {
		id := fmt.Sprintf("r%d", i)
		e.submitUntil(p, map[string]any{"url": url}, id, "call", OutcomeRetry)
		st, err := e.rt.Status(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		d := st.Until.Sub(t0)
		if d < 50*time.Second || d > 150*time.Second {
			t.Fatalf("delay %v outside 100s ± 50%%", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Fatalf("four jittered delays were all %v", seen)
	}
}

func TestLongActionExtendsItsLease(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	started, release := make(chan struct{}, 10), make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		started <- struct{}{}
		<-release
		fmt.Fprint(w, "done")
	}))
	defer ts.Close()
	e := newTestEnv(t, withLease(5*time.Second))
	p := e.write("long.yaml", `
tqw: v1
name: long
steps:
  - id: slow
    action: http
    with: {url: "${ input.url }"}
    timeout: 1h
`)
	ch := e.submit(p, map[string]any{"url": ts.URL}, "r1")
	e.start()
	<-started
	// Far past the queue's 5s lease: the step's lease was extended to its
	// timeout plus the margin before the call, so the reaper leaves it.
	e.clock.Advance(10 * time.Minute)
	if n, err := e.q.Reap(e.ctx); err != nil || n != 0 {
		t.Fatalf("Reap: %d jobs reaped, %v; want none", n, err)
	}
	close(release)
	o := e.await(ch)
	if o.Status != runstate.Succeeded || !strings.Contains(string(o.Result), `"body":"done"`) {
		t.Fatalf("outcome %s %s %s", o.Status, o.Result, o.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 1 {
		t.Fatalf("%d requests; want 1", requests)
	}
}

func TestDurationsFromExpressions(t *testing.T) {
	e := newTestEnv(t)
	p := e.write("dur.yaml", `
tqw: v1
name: dur
vars: {wait: 90m}
steps:
  - id: nap
    action: sleep
    with: {duration: "${ duration(vars.wait) + duration('30m') }"}
  - id: done
    succeed: "${ string(now()) }"
`)
	ch := e.submitUntil(p, map[string]any{}, "r1", "nap", OutcomeWaiting)
	st, _ := e.rt.Status(e.ctx, "r1")
	if !st.Until.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("sleep until %v; want +2h", st.Until.Sub(t0))
	}
	e.clock.Advance(2 * time.Hour)
	if o := e.await(ch); o.Status != runstate.Succeeded {
		t.Fatalf("%s %s", o.Status, o.Error)
	}
}
