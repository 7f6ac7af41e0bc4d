package interpreter

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// An llm step whose answer was paid but whose set then failed the run is
// redriven on a fixed definition: the request is unchanged, so the
// redrive takes the answer from the store and the model is not asked
// again; the run's totals count it as saved.
func TestRedriveReusesAPaidAnswer(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	fake.Enqueue(validReply, validReply)
	e := newTestEnv(t, withLLM(fake.URL()), withEnv("OPENAI_API_KEY", "sk-test-key"))
	const ask = `
tqw: v1
name: redrive-llm
secrets: [OPENAI_API_KEY]
steps:
  - id: ask
    action: llm
    with: {model: gpt-4o-mini, prompt: "classify it"}
    set: {label: %s}
  - id: done
    succeed: "${ vars.label }"
`
	p := e.write("ask.yaml", strings.Replace(ask, "%s", `"${ vars.boom.x }"`, 1))
	ch := e.submit(p, map[string]any{}, "a1")
	e.start()
	if o := e.await(ch); o.Status != runstate.Failed || !strings.Contains(o.Error, "boom") {
		t.Fatalf("first run: %s %q; want failed at ask's set", o.Status, o.Error)
	}
	if n := fake.Calls(); n != 1 {
		t.Fatalf("the model was called %d times; want 1", n)
	}
	fixed := e.load(e.write("fixed.yaml", strings.Replace(ask, "%s", `"${ output.text }"`, 1)))
	e.settleNotifications()
	ch, _ = e.it.Watch("a1")
	if _, err := e.it.Redrive(e.ctx, "a1", RedriveOptions{Definition: fixed}); err != nil {
		t.Fatal(err)
	}
	wantSucceeded(t, e.await(ch), `"{\"label\": \"bug\"}"`)
	if n := fake.Calls(); n != 1 {
		t.Fatalf("the model was called %d times in all; the redrive should have reused the paid answer", n)
	}
	st, err := e.rt.Inspector().Status(e.ctx, "a1")
	if err != nil || st.Totals == nil || st.Totals.Counters[TotalLLMSavedTokens] != 10 || st.Totals.Counters[TotalLLMTokens] != 10 {
		t.Fatalf("totals %+v, %v; want 10 tokens paid (the first run) and 10 saved (the redrive)", st.Totals, err)
	}
}

// An http step with cache: true is paid once: a fork of its run takes
// the response from the answer store and sends nothing, a fresh run asks
// again, and the secret in the request's header (echoed in the response)
// is in no object of the store.
func TestForkReusesACachedHTTPResponse(t *testing.T) {
	const token = "tok-5ecret-value-77"
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"auth": %q, "n": 7}`, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	e := newTestEnv(t, withEnv("API_TOKEN", token))
	p := e.write("cached.yaml", `
tqw: v1
name: cached
secrets: [API_TOKEN]
steps:
  - id: get
    action: http
    with:
      url: "${ input.url }/items"
      headers: {Authorization: "Bearer ${ secrets.API_TOKEN }"}
      cache: true
  - id: done
    succeed: "${ steps.get.output.body.n }"
`)
	wantSucceeded(t, e.run(p, map[string]any{"url": srv.URL}, "o1"), `7`)
	wantSucceeded(t, e.fork(e.q, "o1", "get", "f1", ForkOptions{}), `7`)
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d requests; the fork should have reused the cached response", n)
	}
	wantSucceeded(t, e.run(p, map[string]any{"url": srv.URL}, "o2"), `7`)
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d requests; a fresh run sends its own", n)
	}
	answers := 0
	for after := ""; ; {
		page, err := e.store.List(e.ctx, "", after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			b, _, err := e.store.Get(e.ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(b, []byte(token)) {
				t.Errorf("the secret is in %s", o.Key)
			}
			if strings.HasPrefix(o.Key, answersPrefix+"http/") {
				answers++
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	if answers != 1 {
		t.Fatalf("%d cached responses in the store; want 1", answers)
	}
}
