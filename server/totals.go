package server

import (
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/interpreter"
)

// S3 Standard list prices (us-east-1, per request, as published by AWS
// for 2026): PUT, COPY, POST and LIST $0.005 per 1,000; GET and the
// other reads $0.0004 per 1,000; DELETE free. Totals price a run's
// requests at these; other stores and regions differ.
const (
	s3PricePutList = 0.005 / 1000
	s3PriceGet     = 0.0004 / 1000
)

// Totals is what a run cost so far, as 'tqw-dsl status --json' prints it.
type Totals struct {
	Steps    float64 `json:"steps"`
	Attempts float64 `json:"attempts"`
	Retries  float64 `json:"retries"`
	// LLMTokens and LLMCostUSD sum the llm steps' usage and cost.
	LLMTokens  float64 `json:"llm_tokens"`
	LLMCostUSD float64 `json:"llm_cost_usd"`
	// WallSeconds is from submission to the end (to now while it runs).
	WallSeconds float64 `json:"wall_seconds"`
	// Requests are the object-store requests the run caused; WAL PUTs
	// count as the run's share of each (see runstate.Totals).
	Requests Requests `json:"requests"`
	// RequestsUSD prices them at S3 Standard list prices.
	RequestsUSD float64 `json:"requests_usd_at_s3_list_price"`
}

// Requests counts object-store requests by kind.
type Requests struct {
	Put    float64 `json:"put"`
	Get    float64 `json:"get"`
	List   float64 `json:"list"`
	Delete float64 `json:"delete"`
	Head   float64 `json:"head"`
}

// TotalsOf returns st's totals, its wall time measured to now while it runs.
func TotalsOf(st runstate.Status, now time.Time) Totals {
	t := st.Totals
	if t == nil {
		t = &runstate.Totals{}
	}
	end := now
	if !st.FinishedAt.IsZero() {
		end = st.FinishedAt
	}
	c := t.Counters
	return Totals{
		Steps: c[interpreter.TotalSteps], Attempts: c[interpreter.TotalAttempts], Retries: c[interpreter.TotalRetries],
		LLMTokens: c[interpreter.TotalLLMTokens], LLMCostUSD: c[interpreter.TotalLLMCostUSD],
		WallSeconds: end.Sub(st.SubmittedAt).Seconds(),
		Requests:    Requests{Put: t.Puts, Get: t.Gets, List: t.Lists, Delete: t.Deletes, Head: t.Heads},
		RequestsUSD: (t.Puts+t.Lists)*s3PricePutList + (t.Gets+t.Heads)*s3PriceGet,
	}
}
