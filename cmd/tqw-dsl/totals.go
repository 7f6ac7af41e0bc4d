package main

import (
	"fmt"
	"io"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/server"
	"github.com/tqw-dsl/tqw/server/wire"
)

// totalsJSON is a run's totals as status --json prints them: the HTTP
// API's body, so the CLI and the API print the same document.
type totalsJSON = wire.Totals

func toTotalsJSON(st runstate.Status, now time.Time) *totalsJSON {
	t := server.TotalsOf(st, now)
	return &t
}

// printTotals prints the totals lines of status.
func printTotals(w io.Writer, t *totalsJSON) {
	fmt.Fprintf(w, "totals     %g steps, %g attempts (%g retries), %s wall\n", t.Steps, t.Attempts, t.Retries,
		(time.Duration(t.WallSeconds * float64(time.Second))).Round(time.Millisecond))
	if t.LLMTokens > 0 || t.LLMCostUSD > 0 {
		fmt.Fprintf(w, "llm        %g tokens, $%.6f\n", t.LLMTokens, t.LLMCostUSD)
	}
	if t.LLMSavedTokens > 0 || t.LLMSavedUSD > 0 {
		fmt.Fprintf(w, "saved      answers reused, saved $%.6f / %g tokens\n", t.LLMSavedUSD, t.LLMSavedTokens)
	}
	r := t.Requests
	fmt.Fprintf(w, "store      %.2f requests: %.2f PUT, %.2f GET, %.2f LIST, %.2f DELETE, %.2f HEAD ≈ $%.8f at S3 list prices\n",
		r.Put+r.Get+r.List+r.Delete+r.Head, r.Put, r.Get, r.List, r.Delete, r.Head, t.RequestsUSD)
}
