package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/server/client"
)

// apiProbeTimeout bounds the check that a live writer's advertised HTTP
// address answers; past it the command uses the store as before.
const apiProbeTimeout = 500 * time.Millisecond

// apiWriter is a live writer reached over its HTTP API.
type apiWriter struct {
	c      *client.Client
	holder lease.Info
}

// liveAPI returns the HTTP API of the store's live writer when it
// advertises one (serve) that answers /healthz, else nil: the command
// then goes through the store (inbox, or reads) as without a server.
// Cost: one GET of the lease object (a lock-file read on file://) and
// one HTTP request.
func liveAPI(ctx context.Context, url string) *apiWriter {
	store, err := openReadOnlyStore(ctx, url)
	if err != nil {
		return nil
	}
	info, live, err := lease.Live(ctx, store, lease.Options{})
	if err != nil || !live || !strings.HasPrefix(info.Endpoint, "http") {
		return nil
	}
	c := client.New(info.Endpoint, client.Options{Token: strings.TrimSpace(os.Getenv(apiTokenEnv))})
	pctx, cancel := context.WithTimeout(ctx, apiProbeTimeout)
	defer cancel()
	if err := c.Healthz(pctx); err != nil {
		logger(os.Stderr).Info("the live writer's HTTP address does not answer; using the store", "endpoint", info.Endpoint, "err", err)
		return nil
	}
	return &apiWriter{c: c, holder: info}
}

// liveReadAPI is liveAPI for the read-only verbs (status, list, history):
// nil, so that they read the store through the durable read path, when
// the writer's API refuses this process's token. Reading the store needs
// only read access to it, which the README promises is enough; the API
// is used when it accepts the token because it answers from the writer's
// live state without replaying the log here. Cost: liveAPI's, plus one
// list request of one run.
func liveReadAPI(ctx context.Context, url string) *apiWriter {
	a := liveAPI(ctx, url)
	if a == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, apiProbeTimeout)
	defer cancel()
	_, err := a.c.ListRuns(pctx, client.ListOptions{Limit: 1})
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == 401 {
		logger(os.Stderr).Info("the live writer's API refused the token; reading the store", "endpoint", a.c.BaseURL())
		return nil
	}
	return a
}

// apiError turns a failed API call into the command's exit error.
func (a *apiWriter) apiError(what string, err error) error {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return failf(exitFailed, "%s (over HTTP to %s): %v", what, a.c.BaseURL(), err)
	}
	switch ce.Status {
	case 400, 422:
		return failf(exitUsage, "%s: %s", what, ce.Message)
	case 401:
		return failf(exitFailed, "%s: %s refused the API token: set %s to the token of its serve", what, a.c.BaseURL(), apiTokenEnv)
	}
	return failf(exitFailed, "%s: %s", what, ce.Message)
}

// statusOf turns a run read over HTTP into the runtime status the
// commands print.
func statusOf(s client.RunSummary) runstate.Status {
	st := runstate.Status{RunID: s.RunID, Step: s.StepNumber, Attempt: s.Attempt, SignalKey: s.SignalKey, LastError: s.LastError,
		SubmittedAt: s.StartedAt, Headers: map[string]string{interpreter.HeaderWorkflow: s.Workflow}, Labels: s.Labels}
	for _, rs := range stateNames {
		if rs.String() == s.State {
			st.State = rs
		}
	}
	if s.Until != nil {
		st.Until = *s.Until
	}
	if s.EndedAt != nil {
		st.FinishedAt = *s.EndedAt
	}
	if s.Error != nil {
		st.Error = *s.Error
	}
	return st
}

// historyOf converts history records read over HTTP.
func historyOf(recs []client.HistoryRecord) []interpreter.HistoryRecord {
	out := make([]interpreter.HistoryRecord, 0, len(recs))
	for _, r := range recs {
		h := interpreter.HistoryRecord{Step: r.Step, Kind: r.Kind, Attempt: r.Attempt, Start: r.StartedAt.UnixMilli(), End: r.EndedAt.UnixMilli(),
			Outcome: r.Status, Output: r.Output, Next: r.Next, WaitKey: r.WaitKey, DroppedVisits: r.DroppedVisits}
		if r.Error != nil {
			h.Error = &dsl.ErrorInfo{Type: r.Error.Type, Message: r.Error.Message, Status: r.Error.Status, Retryable: r.Error.Retryable}
		}
		if r.Until != nil {
			h.Until = r.Until.UnixMilli()
		}
		if r.Rejected != nil {
			h.Rejected = &interpreter.RejectedSignal{Key: r.Rejected.Key, Size: r.Rejected.Size, Reason: r.Rejected.Reason}
		}
		out = append(out, h)
	}
	return out
}

// runResult is a run's result read over HTTP, as RunStatus holds it.
func runResult(r client.Run) []byte {
	if len(r.Result) == 0 || string(r.Result) == "null" {
		return nil
	}
	return []byte(r.Result)
}
