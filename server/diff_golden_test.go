package server_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/interpreter"
	"github.com/tqw-dsl/tqw/server"
)

// The JSON of a run diff (GET /v1/runs/{id}/diff/{other}, tqw-dsl diff
// --json) is fixed by a fixture: clients parse it.
func TestGoldenRunDiff(t *testing.T) {
	a := []interpreter.HistoryRecord{
		{Step: "fetch", Attempt: 1, Outcome: interpreter.OutcomeOK, Output: map[string]any{"n": int64(1)}, Next: "decide"},
		{Step: "decide", Attempt: 1, Outcome: interpreter.OutcomeOK, Next: "ship"},
		{Step: "ship", Attempt: 2, Outcome: interpreter.OutcomeSucceeded, Output: "done"},
	}
	b := []interpreter.HistoryRecord{
		{Step: "fetch", Attempt: 1, Outcome: interpreter.OutcomeOK, Output: map[string]any{"n": int64(2)}, Next: "decide"},
		{Step: "decide", Attempt: 1, Outcome: interpreter.OutcomeOK, Next: "refund"},
		{Step: "refund", Attempt: 1, Outcome: interpreter.OutcomeFailed, Error: &dsl.ErrorInfo{Type: "http.status_5xx", Message: "503"}},
	}
	got, err := json.MarshalIndent(server.RunDiffOf("order-7", "order-7-fork", interpreter.DiffHistories(a, b)), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "golden", "run-diff.v1.json"), append(got, '\n'))
}
