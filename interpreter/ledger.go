package interpreter

import "github.com/tqw-dsl/tqw/actions"

// charge is the run's spend ledger: every paid call an action reports
// (actions.Call.Spend) goes through it, whatever the attempt's outcome.
// It adds the call to the totals written with this delivery's settlement
// (runtime.Step.AddTotal, dropped when the settlement does not commit)
// and to the attempt's end event (metrics), so each paid call is counted
// once, in the settlement of the attempt that paid for it:
//
//   - a failed attempt's settlement (its retry, its catch, the run's
//     failure) carries what it paid;
//   - a redelivery after a crash replays the attempt's paid replies from
//     the memo, with the attempt that paid, and counts them here, since
//     the crashed delivery's settlement never committed;
//   - a reply replayed from an earlier attempt (a retry after a failure
//     in set, a foreach item finished before another failed) is not
//     counted again: that attempt's settlement, which must have committed
//     for this attempt to run, carried it;
//   - a crash after the provider replied and before the reply's memo
//     entry is durable leaves no record of that reply: the redelivery
//     asks again, and only what it pays is counted.
func (x *exec) charge(s actions.Spend) {
	if s.Attempt > 0 && s.Attempt < x.st.Attempt {
		return
	}
	if s.Reused {
		// Paid by another run: saved, not spent (answers.go).
		x.rs.AddTotal(TotalLLMSavedTokens, float64(s.TotalTokens))
		x.rs.AddTotal(TotalLLMSavedUSD, s.CostUSD)
		x.llmMu.Lock()
		defer x.llmMu.Unlock()
		if x.hist.Reused == nil {
			x.hist.Reused = &Reuse{}
		}
		x.hist.Reused.Calls++
		x.hist.Reused.Tokens += s.TotalTokens
		x.hist.Reused.CostUSD += s.CostUSD
		return
	}
	x.rs.AddTotal(TotalLLMTokens, float64(s.TotalTokens))
	x.rs.AddTotal(TotalLLMCostUSD, s.CostUSD)
	x.llmMu.Lock()
	defer x.llmMu.Unlock()
	x.llm = append(x.llm, LLMUsage{Model: s.Model, PromptTokens: s.PromptTokens, CompletionTokens: s.CompletionTokens,
		CostUSD: s.CostUSD, CostKnown: s.CostKnown})
}
