package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
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

// An llm step whose first reply fails response_schema is paid for twice:
// status, the API and the metrics count both replies (issue 23).
func TestTotalsCountAnInvalidReply(t *testing.T) {
	t.Parallel()
	fake := llmfake.New()
	defer fake.Close()
	fake.Enqueue(llmfake.Reply{Content: `not json`, Usage: llmfake.Usage{PromptTokens: 5, CompletionTokens: 2}},
		llmfake.Reply{Content: `{"label": "bug"}`, Usage: llmfake.Usage{PromptTokens: 7, CompletionTokens: 3}})
	c := newCLI(t)
	c.env = append(c.env, "OPENAI_BASE_URL="+fake.URL())
	_, addr := startServe(t, c)
	wf := filepath.Join(c.dir, "wf", "ledger.tqw.yaml")
	if err := os.WriteFile(wf, []byte(`tqw: v1
name: ledger
secrets: [OPENAI_API_KEY]
steps:
  - id: ask
    action: llm
    with:
      model: gpt-4o-mini
      prompt: classify it
      response_schema: {type: object, required: [label], properties: {label: {type: string}}}
    retry: {max_attempts: 3, initial: 10ms, on: [llm.invalid_output]}
  - id: done
    succeed: "${ output.json.label }"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.must(0, "submit", wf, "--run-id", "l1")
	c.awaitState("l1", "succeeded")
	if fake.Calls() != 2 {
		t.Fatalf("the model was called %d times; want 2", fake.Calls())
	}
	out, _ := c.must(0, "status", "l1", "--json")
	var st struct {
		Totals *totalsJSON `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Totals == nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.Totals.LLMTokens != 17 {
		t.Errorf("status: %v llm tokens; want 17 (both replies):\n%s", st.Totals.LLMTokens, out)
	}
	resp, err := http.Get(addr + "/v1/runs/l1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var api struct {
		Totals *totalsJSON `json:"totals"`
	}
	if err := json.Unmarshal(body, &api); err != nil || api.Totals == nil || api.Totals.LLMTokens != 17 || api.Totals.LLMCostUSD != st.Totals.LLMCostUSD {
		t.Errorf("GET /v1/runs/l1: %v; want 17 llm tokens at status's cost $%v:\n%s", err, st.Totals.LLMCostUSD, body)
	}
	text := scrapeMetrics(t, addr+"/metrics")
	for _, want := range []string{
		`tqw_llm_tokens_total{kind="prompt",model="gpt-4o-mini"} 12`,
		`tqw_llm_tokens_total{kind="completion",model="gpt-4o-mini"} 5`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the scrape lacks %q", want)
		}
	}
}
