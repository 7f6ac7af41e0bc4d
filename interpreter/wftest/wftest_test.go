package wftest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/dsl/testfile"
	"github.com/tqw-dsl/tqw/interpreter"
)

// runFiles writes a workflow and its test file into a temporary folder
// and runs every case.
func runFiles(t *testing.T, workflow, tests string) *FileResult {
	t.Helper()
	dir := t.TempDir()
	wp := filepath.Join(dir, "w.tqw.yaml")
	tp := filepath.Join(dir, "w.test.yaml")
	if err := os.WriteFile(wp, []byte(strings.TrimLeft(workflow, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tp, []byte(strings.TrimLeft(tests, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	f, diags := testfile.Read(tp)
	if f == nil {
		t.Fatalf("test file: %s", diags)
	}
	w, err := interpreter.Load(f.Workflow, dsl.Options{})
	if err != nil {
		t.Fatalf("workflow: %v", err)
	}
	if d := testfile.Check(f, w.Main, w.Tree()[1:]...); len(d) > 0 {
		t.Fatalf("check: %s", d)
	}
	return Run(context.Background(), f, w, Options{})
}

// wantPass fails the test unless every case passed.
func wantPass(t *testing.T, r *FileResult) {
	t.Helper()
	for _, c := range r.Cases {
		for _, f := range c.Failures {
			t.Errorf("case %q: %s: step %s: %s\nwant: %s\ngot:  %s", c.Name, f.Expect, f.Step, f.Message, f.Want, f.Got)
		}
	}
}

func TestAThirtyDaySleepTakesNoRealTime(t *testing.T) {
	r := runFiles(t, `
tqw: v1
name: long
steps:
  - id: wait
    action: sleep
    with: {duration: 30d}
  - id: done
    succeed: "${ now() }"
`, `
tqw: test/v1
cases:
  - name: sleeps a month
    clock: 2026-03-01T00:00:00Z
    expect:
      status: succeeded
      result: "2026-03-31T00:00:00Z"
      path: [wait, done]
`)
	wantPass(t, r)
}

// failures returns "expect/step" for every failure of the named case.
func failures(t *testing.T, r *FileResult, name string) []Failure {
	t.Helper()
	for _, c := range r.Cases {
		if c.Name == name {
			return c.Failures
		}
	}
	t.Fatalf("no case %q", name)
	return nil
}

// order is the workflow most matcher tests run: an http call with
// retries, a switch, a catch, a wait and variables.
const order = `
tqw: v1
name: order
vars: {tries: 0}
steps:
  - id: fetch
    action: http
    with: {url: "https://shop.example/orders/${ input.id }"}
    retry: {max_attempts: 3, initial: 1m, on: [http.status_5xx]}
    catch:
      - on: [http.status_4xx]
        set: {why: "${ error.message }"}
        next: missing
    set: {amount: "${ output.body.amount }", tries: "${ vars.tries + 1 }"}
  - id: decide
    switch:
      - when: vars.amount > 100
        next: big
    next: small
  - id: big
    succeed: {size: big, amount: "${ vars.amount }"}
  - id: small
    succeed: {size: small, amount: "${ vars.amount }"}
  - id: missing
    fail: "no order: ${ vars.why }"
`

func TestEveryMatcherPassesAndFails(t *testing.T) {
	r := runFiles(t, order, `
tqw: test/v1
cases:
  - name: all pass
    input: {id: o1}
    mocks:
      - step: fetch
        sequence:
          - error: {type: http.status_5xx, message: "503 Service Unavailable", status: 503}
          - output: {status: 200, body: {amount: 250}}
    expect:
      status: succeeded
      result: {size: big, amount: 250}
      result_schema: {type: object, required: [size], properties: {size: {const: big}}}
      path: [fetch, decide, big]
      vars: {amount: 250, tries: 1}
      attempts: {fetch: 2, decide: 1}
  - name: error matchers pass
    input: {id: o2}
    mocks:
      - action: http
        error: {type: http.status_4xx, message: "404 Not Found", status: 404}
    expect:
      status: failed
      error: {type: fail, message: "no order: 404 Not Found"}
      path: [fetch, missing]
      attempts: {fetch: 1}
  - name: all fail
    input: {id: o3}
    mocks:
      - step: fetch
        output: {status: 200, body: {amount: 5}}
    expect:
      status: failed
      result: {size: big, amount: 250}
      result_schema: {type: object, properties: {size: {const: big}}}
      path: [fetch, decide, big]
      vars: {amount: 250, unset_var: 1}
      attempts: {fetch: 2}
      error: {type: http.status_4xx, message: nope}
`)
	for _, name := range []string{"all pass", "error matchers pass"} {
		if f := failures(t, r, name); len(f) > 0 {
			t.Errorf("%s: %+v", name, f)
		}
	}
	got := map[string]Failure{}
	for _, f := range failures(t, r, "all fail") {
		key := f.Expect
		if f.Expect == "vars" {
			key += ":" + f.Message
		}
		got[key] = f
	}
	want := map[string]string{ // expectation -> the step it names
		"status":                             "small",
		"result":                             "small",
		"result_schema":                      "small",
		"path":                               "small",
		"vars:variable amount differs":       "",
		"vars:variable unset_var is not set": "",
		"attempts":                           "fetch",
		"error.type":                         "small",
		"error.message":                      "small",
	}
	for k, step := range want {
		f, ok := got[k]
		if !ok {
			t.Errorf("no %s failure; got %+v", k, got)
			continue
		}
		if f.Step != step {
			t.Errorf("%s failure names step %q; want %q (%+v)", k, f.Step, step, f)
		}
		if f.Pos.Line == 0 {
			t.Errorf("%s failure has no position", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d failures; want %d: %+v", len(got), len(want), got)
	}
	if f := got["path"]; !strings.Contains(f.Message, "step 3 is small, want big") || f.Want != "fetch\ndecide\nbig" || f.Got != "fetch\ndecide\nsmall" {
		t.Errorf("path failure: %+v", f)
	}
	if f := got["result"]; !strings.Contains(f.Got, `"small"`) || !strings.Contains(f.Want, `"big"`) {
		t.Errorf("result failure shows no diff: %+v", f)
	}
}

func TestMocksBySequenceAndRetryDelaysOnTheVirtualClock(t *testing.T) {
	r := runFiles(t, `
tqw: v1
name: seq
steps:
  - id: call
    action: http
    with: {url: "https://x.example/"}
    retry: {max_attempts: 5, initial: 1h, multiplier: 2, max_interval: 1d, on: [http.status_5xx, timeout]}
  - id: done
    succeed: {status: "${ output.status }", at: "${ now() }"}
`, `
tqw: test/v1
cases:
  - name: 503, timeout, then 200
    clock: 2026-05-01T00:00:00Z
    mocks:
      - step: call
        sequence:
          - error: {type: http.status_5xx, message: "503", status: 503}
          - error: {type: timeout, message: "attempt timed out"}
          - output: {status: 200}
    expect:
      result: {status: 200, at: "2026-05-01T03:00:00Z"}
      attempts: {call: 3}
  - name: the last reply repeats
    mocks:
      - step: call
        sequence:
          - output: {status: 201}
    expect:
      result_schema: {properties: {status: {const: 201}}}
  - name: a non-retryable error by default
    mocks:
      - step: call
        error: {type: http.status_5xx, message: "501", status: 501, retryable: false}
    expect:
      status: failed
      attempts: {call: 5}
`)
	wantPass(t, r)
}

func TestSignalsAtATimeAndWhenWaiting(t *testing.T) {
	r := runFiles(t, `
tqw: v1
name: sig
steps:
  - id: first
    action: wait_signal
    with: {key: "a:${ run.id }", timeout: 10d}
    set: {a: "${ output.v }", at_a: "${ now() }"}
  - id: second
    action: wait_signal
    with: {key: "b:${ run.id }", timeout: 10d}
    on_timeout: late
    set: {b: "${ output.v }", at_b: "${ now() }"}
  - id: done
    succeed: "${ vars.a + vars.b }"
  - id: late
    fail: late
`, `
tqw: test/v1
cases:
  - name: one when waiting, one at a time
    clock: 2026-01-01T00:00:00Z
    signals:
      - key: "b:test"
        at: 3d
        payload: {v: 2}
      - step: first
        payload: {v: 40}
    expect:
      result: 42
      vars: {at_a: "2026-01-01T00:00:00Z", at_b: "2026-01-04T00:00:00Z"}
  - name: a signal buffered before its wait
    signals:
      - key: "a:test"
        at: 0s
        payload: {v: 1}
      - key: "b:test"
        at: 1h
        payload: {v: 1}
    expect:
      result: 2
  - name: a timeout after ten days
    signals:
      - step: first
        payload: {v: 1}
    expect:
      status: failed
      path: [first, second, late]
  - name: a signal no run waits for
    signals:
      - key: "nobody"
        payload: {}
    expect:
      status: failed
`)
	for _, c := range r.Cases[:3] {
		for _, f := range c.Failures {
			t.Errorf("case %q: %+v", c.Name, f)
		}
	}
	f := failures(t, r, "a signal no run waits for")
	if len(f) == 0 || !strings.Contains(f[0].Message, "never sent") && !strings.Contains(f[0].Message, "no signal") {
		t.Errorf("unsent signal: %+v", f)
	}
}

func TestAnUnmockedActionFailsTheCaseNamingTheStep(t *testing.T) {
	r := runFiles(t, order, `
tqw: test/v1
cases:
  - name: no mock
    input: {id: o1}
    expect: {status: succeeded}
`)
	f := failures(t, r, "no mock")
	if len(f) != 1 || f[0].Expect != "mock" || f[0].Step != "fetch" || !strings.Contains(f[0].Message, "action http has no mock") {
		t.Fatalf("failures: %+v", f)
	}
}

func TestCoverageListsWhatNoCaseReached(t *testing.T) {
	r := runFiles(t, order, `
tqw: test/v1
cases:
  - name: big
    input: {id: o1}
    mocks:
      - step: fetch
        output: {status: 200, body: {amount: 250}}
    expect: {status: succeeded}
`)
	wantPass(t, r)
	if got := strings.Join(r.Coverage.Unreached(), " "); got != "small missing" {
		t.Errorf("unreached %q; want small missing", got)
	}
	var untaken []string
	for _, b := range r.Coverage.Untaken() {
		untaken = append(untaken, b.String())
	}
	want := "fetch: catch http.status_4xx -> missing|decide: switch else -> small"
	if got := strings.Join(untaken, "|"); got != want {
		t.Errorf("untaken %q; want %q", got, want)
	}
	steps, reached, branches, taken := r.Coverage.Counts()
	if steps != 5 || reached != 3 || branches != 3 || taken != 1 {
		t.Errorf("counts %d %d %d %d", steps, reached, branches, taken)
	}
}

// blocks is a workflow whose steps sit in a parallel branch, a map's
// steps and an on_error handler.
const blocks = `
tqw: v1
name: blocks
steps:
  - id: checks
    parallel:
      branches:
        review:
          - id: approve
            action: wait_signal
            with: {key: "approve:${ run.id }", timeout: 1d}
        price:
          - id: quote
            action: http
            with: {url: "https://example.com/quote"}
  - id: each
    map:
      items: "${ input.items }"
      steps:
        - id: charge
          action: http
          with: {url: "https://example.com/charge/${ item }"}
          catch:
            - on: [http.status_4xx]
              next: declined
        - id: charged
          succeed: "${ output.body }"
        - id: declined
          succeed: declined
  - id: done
    succeed: "${ steps.checks.output.review.v }"
on_error:
  - id: alert
    action: http
    with: {url: "https://example.com/alert"}
`

func TestWhenWaitingSignalsAndMocksReachStepsInBlocks(t *testing.T) {
	r := runFiles(t, blocks, `
tqw: test/v1
cases:
  - name: approved
    input: {items: [a, b]}
    signals:
      - step: approve
        payload: {v: 7}
    mocks:
      - step: quote
        output: {status: 200, body: 1}
      - step: charge
        output: {status: 200, body: ok}
    expect:
      status: succeeded
      result: 7
`)
	wantPass(t, r)
	if got := strings.Join(r.Coverage.Unreached(), " "); got != "declined alert" {
		t.Errorf("unreached %q; want the map's declined and the handler's alert", got)
	}
	var untaken []string
	for _, b := range r.Coverage.Untaken() {
		untaken = append(untaken, b.String())
	}
	if got, want := strings.Join(untaken, "|"), "charge: catch http.status_4xx -> declined"; got != want {
		t.Errorf("untaken %q; want %q", got, want)
	}
	steps, reached, _, _ := r.Coverage.Counts()
	if steps != 9 || reached != 7 {
		t.Errorf("steps %d reached %d; want 9 and 7", steps, reached)
	}
}
