package interpreter

import (
	"strings"
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
