package webhook

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/golden"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// The callback body and its signature as today's hook sends them, from
// fixed outcomes: receivers parse and verify them, so a change fails
// TestGoldenPayload (docs/STORE-LAYOUT.md, "Fixtures").
func TestGoldenPayload(t *testing.T) {
	submitted := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	finished := submitted.Add(61500 * time.Millisecond)
	for _, tc := range []struct {
		name string
		o    runstate.Outcome
		want Payload
	}{
		{"payload-succeeded.v1.json", runstate.Outcome{RunID: "order-7", Status: runstate.Succeeded, Result: []byte(`{"ok":true}`), Step: 4,
			SubmittedAt: submitted, FinishedAt: finished},
			Payload{RunID: "order-7", Status: "succeeded", Result: json.RawMessage(`{"ok":true}`), Step: 4}},
		{"payload-binary.v1.json", runstate.Outcome{RunID: "order-8", Status: runstate.Succeeded, Result: []byte{0xff, 0x00}, Step: 1,
			SubmittedAt: submitted, FinishedAt: finished},
			Payload{RunID: "order-8", Status: "succeeded", ResultBase64: "/wA=", Step: 1}},
		{"payload-failed.v1.json", runstate.Outcome{RunID: "order-9", Status: runstate.Failed, ResultOmitted: true, Error: "step 2: boom", Step: 2,
			SubmittedAt: submitted, FinishedAt: finished},
			Payload{RunID: "order-9", Status: "failed", ResultOmitted: true, Reason: "step 2: boom", Step: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(NewPayload(&tc.o))
			if err != nil {
				t.Fatal(err)
			}
			body = golden.Check(t, filepath.Join("testdata", "golden", tc.name), body)
			var got Payload
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if !got.SubmittedAt.Equal(submitted) || !got.FinishedAt.Equal(finished) {
				t.Fatalf("times %v, %v", got.SubmittedAt, got.FinishedAt)
			}
			got.SubmittedAt, got.FinishedAt = time.Time{}, time.Time{}
			if string(got.Result) != string(tc.want.Result) || got.RunID != tc.want.RunID || got.Status != tc.want.Status ||
				got.ResultBase64 != tc.want.ResultBase64 || got.ResultOmitted != tc.want.ResultOmitted || got.Reason != tc.want.Reason || got.Step != tc.want.Step {
				t.Fatalf("decoded %+v, want %+v", got, tc.want)
			}
		})
	}
	body := golden.Read(t, filepath.Join("testdata", "golden", "payload-succeeded.v1.json"))
	sig := Sign([]byte("secret"), 1767323045, body)
	golden.Check(t, filepath.Join("testdata", "golden", "signature.v1.txt"), []byte(sig+"\n"))
}
