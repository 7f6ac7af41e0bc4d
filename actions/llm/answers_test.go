package llm_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
)

// A paid answer goes into the shared answer store (never the key); a
// call that may reuse answers takes it from there without a request,
// reports it as reused (not paid), and memoizes it as reused, so its
// redelivery replays it unpaid too. A changed prompt asks the model.
func TestAnswerStoreSharesPaidAnswers(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	fake.Enqueue(llmfake.Reply{Content: "first", Usage: llmfake.Usage{PromptTokens: 5, CompletionTokens: 2}})
	answers := newMemo()
	args := map[string]any{"model": "gpt-4o-mini", "prompt": "p"}
	var spent []actions.Spend
	charge := func(s actions.Spend) { spent = append(spent, s) }

	paid := newCall(args, newMemo())
	paid.Answers, paid.Charge = answers, charge
	out, err := a.Execute(context.Background(), paid)
	if err != nil {
		t.Fatal(err)
	}
	if len(answers.m) != 1 || fake.Calls() != 1 {
		t.Fatalf("%d answers shared after %d requests; want 1 and 1", len(answers.m), fake.Calls())
	}
	for _, v := range answers.m {
		if strings.Contains(string(v), "sk-test") {
			t.Fatal("the shared answer holds the API key")
		}
	}

	memo := newMemo()
	fork := newCall(args, memo)
	fork.Answers, fork.ReuseAnswers, fork.Charge = answers, true, charge
	got, err := a.Execute(context.Background(), fork)
	if err != nil {
		t.Fatal(err)
	}
	if fake.Calls() != 1 || !reflect.DeepEqual(got, out) {
		t.Fatalf("reuse made %d requests, output %v; want none and %v", fake.Calls()-1, got, out)
	}
	if len(spent) != 2 || spent[0].Reused || !spent[1].Reused || spent[1].TotalTokens != 7 {
		t.Fatalf("spent %+v; want one paid call, then one reused of 7 tokens", spent)
	}
	// The redelivery of the fork's attempt replays from its memo, reused.
	again := newCall(args, memo)
	again.Answers, again.ReuseAnswers, again.Charge = newMemo(), true, charge
	if _, err := a.Execute(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	if fake.Calls() != 1 || !spent[2].Reused {
		t.Fatalf("redelivery: %d requests, spend %+v", fake.Calls()-1, spent[2])
	}

	// Without ReuseAnswers (a fresh run) the model is asked; a changed
	// prompt too.
	fresh := newCall(args, newMemo())
	fresh.Answers = answers
	changed := newCall(map[string]any{"model": "gpt-4o-mini", "prompt": "q"}, newMemo())
	changed.Answers, changed.ReuseAnswers = answers, true
	for _, c := range []*actions.Call{fresh, changed} {
		if _, err := a.Execute(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	if fake.Calls() != 3 {
		t.Fatalf("%d requests; want 3", fake.Calls())
	}
}
