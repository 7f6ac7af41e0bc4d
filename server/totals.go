package server

import (
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/server/wire"
)

// S3 Standard list prices (us-east-1, per request, as published by AWS
// for 2026): PUT, COPY, POST and LIST $0.005 per 1,000; GET and the
// other reads $0.0004 per 1,000; DELETE free. Totals price a run's
// requests at these; other stores and regions differ.
const (
	s3PricePutList = 0.005 / 1000
	s3PriceGet     = 0.0004 / 1000
)

// TotalsOf returns st's totals, its wall time measured to now while it runs.
func TotalsOf(st runstate.Status, now time.Time) wire.Totals {
	t := st.Totals
	if t == nil {
		t = &runstate.Totals{}
	}
	end := now
	if !st.FinishedAt.IsZero() {
		end = st.FinishedAt
	}
	c := t.Counters
	return wire.Totals{
		Steps: c[interpreter.TotalSteps], Attempts: c[interpreter.TotalAttempts], Retries: c[interpreter.TotalRetries],
		LLMTokens: c[interpreter.TotalLLMTokens], LLMCostUSD: c[interpreter.TotalLLMCostUSD],
		WallSeconds:    end.Sub(st.SubmittedAt).Seconds(),
		Requests:       wire.Requests{Put: t.Puts, Get: t.Gets, List: t.Lists, Delete: t.Deletes, Head: t.Heads},
		RequestsUSD:    (t.Puts+t.Lists)*s3PricePutList + (t.Gets+t.Heads)*s3PriceGet,
		LLMSavedTokens: c[interpreter.TotalLLMSavedTokens], LLMSavedUSD: c[interpreter.TotalLLMSavedUSD],
	}
}

// ForkOriginOf is the lineage of a fork (nil for a run that is not one),
// from its run headers.
func ForkOriginOf(st runstate.Status) *wire.ForkOrigin {
	from := st.Headers[interpreter.HeaderForkFrom]
	if from == "" {
		return nil
	}
	return &wire.ForkOrigin{RunID: from, At: st.Headers[interpreter.HeaderForkAt]}
}
