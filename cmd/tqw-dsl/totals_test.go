package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
)

// status shows a run's totals: steps, attempts and retries, the llm
// tokens and cost, wall time and the store requests the run caused with
// their S3 price (issue 12 item 10).
func TestStatusShowsRunTotals(t *testing.T) {
	t.Parallel()
	fake := llmfake.New()
	defer fake.Close()
	c := newCLI(t)
	c.env = append(c.env, "OPENAI_BASE_URL="+fake.URL())
	fake.Enqueue(llmfake.Reply{Status: 500, Content: "overloaded"},
		llmfake.Reply{Content: `{"label": "bug"}`, Usage: llmfake.Usage{PromptTokens: 11, CompletionTokens: 4}})
	c.must(0, "run", abs(t, testdata+"e2e_llm.yaml"), "--input", `{"message": "it crashes"}`, "--run-id", "t1")
	out, _ := c.must(0, "status", "t1", "--json")
	var st struct {
		Totals *totalsJSON `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	tot := st.Totals
	if tot == nil {
		t.Fatalf("status --json has no totals:\n%s", out)
	}
	// The llm step retried once (the 500) and then answered; then done.
	if tot.Steps != 2 || tot.Attempts != 3 || tot.Retries != 1 {
		t.Fatalf("steps/attempts/retries %v/%v/%v; want 2/3/1:\n%s", tot.Steps, tot.Attempts, tot.Retries, out)
	}
	if tot.LLMTokens != 15 || tot.LLMCostUSD <= 0 {
		t.Fatalf("llm tokens %v, cost %v; want 15 tokens at a price:\n%s", tot.LLMTokens, tot.LLMCostUSD, out)
	}
	// At least one WAL PUT per commit's share, the llm memo PUT among them.
	if tot.Requests.Put < 2 || tot.RequestsUSD <= 0 || tot.WallSeconds <= 0 {
		t.Fatalf("requests %+v, $%v, wall %vs:\n%s", tot.Requests, tot.RequestsUSD, tot.WallSeconds, out)
	}
	text, _ := c.must(0, "status", "t1")
	for _, want := range []string{"totals     2 steps, 3 attempts (1 retries)", "llm        15 tokens", "at S3 list prices"} {
		if !strings.Contains(text, want) {
			t.Fatalf("status lacks %q:\n%s", want, text)
		}
	}
}
