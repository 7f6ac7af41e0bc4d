package interpreter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Outcomes a history record reports.
const (
	OutcomeOK        = "ok"        // the step finished; the run moved on
	OutcomeWaiting   = "waiting"   // the step parked the run (sleep, wait_signal, call)
	OutcomeRetry     = "retry"     // the attempt failed; the step runs again later
	OutcomeCaught    = "caught"    // the step failed; catch or on_timeout routed the run
	OutcomeFailed    = "failed"    // the step failed the run
	OutcomeSucceeded = "succeeded" // the step ended the run successfully
)

// HistoryRecord is one attempt of one step, written in the settlement of
// the runtime step that ran it.
type HistoryRecord struct {
	// N is the runtime step number (orders the records of a run).
	N       int    `msgpack:"n" json:"n"`
	Step    string `msgpack:"s" json:"step"`
	Kind    string `msgpack:"k" json:"kind"` // action name, or the step kind
	Attempt int    `msgpack:"a" json:"attempt"`
	// Start and End are Unix milliseconds.
	Start   int64          `msgpack:"t0" json:"-"`
	End     int64          `msgpack:"t1" json:"-"`
	Outcome string         `msgpack:"o" json:"outcome"`
	Error   *dsl.ErrorInfo `msgpack:"e,omitempty" json:"error,omitempty"`
	// Output is the step's output (secrets redacted) when it was small;
	// OutputRef names the object holding a large one.
	Output    any    `msgpack:"out" json:"output,omitempty"`
	OutputRef string `msgpack:"ref,omitempty" json:"output_ref,omitempty"`
	Next      string `msgpack:"nx,omitempty" json:"next,omitempty"`
	// Until is when a waiting step resumes at the latest (Unix ms).
	Until int64 `msgpack:"u,omitempty" json:"-"`
	// WaitKey is the signal key a waiting step listens on.
	WaitKey string `msgpack:"wk,omitempty" json:"wait_key,omitempty"`
}

// StartTime returns Start as a time.
func (h *HistoryRecord) StartTime() time.Time { return time.UnixMilli(h.Start) }

// EndTime returns End as a time.
func (h *HistoryRecord) EndTime() time.Time { return time.UnixMilli(h.End) }

// outputRecord is what tqw/out/<run>/<step> holds.
type outputRecord struct {
	N      int    `msgpack:"n"`
	Output any    `msgpack:"o"`
	Ref    string `msgpack:"r,omitempty"`
}

// waitRecord is what tqw/wait/<key> holds while a step waits on key.
type waitRecord struct {
	RunID string `msgpack:"r"`
	Def   string `msgpack:"d"`
	Step  int    `msgpack:"s"`
	// Schema is the evaluated with.schema, nil when none.
	Schema any `msgpack:"sc"`
}

func outKey(runID, stepID string) string { return kvOut + runID + "/" + stepID }
func histPrefix(runID string) string     { return kvHist + runID + "/" }
func histKey(runID string, n int) string { return fmt.Sprintf("%s%010d", histPrefix(runID), n) }
func waitKey(key string) string          { return kvWait + key }
func outputObject(runID string, n int) string {
	return fmt.Sprintf("%s%s/%010d", outputsPrefix, runID, n)
}

// Reader is the read surface history and signal checks need;
// *queue.Queue and *queue.Reader implement it.
type Reader interface {
	KVGet(ctx context.Context, key string) ([]byte, error)
	KVScan(ctx context.Context, prefix, startAfter string, limit int) ([]queue.KVEntry, error)
}

var (
	_ Reader = (*queue.Queue)(nil)
	_ Reader = (*queue.Reader)(nil)
)

// History returns the history records of runID in order, with large
// outputs read back from their objects. A run never run has none.
func History(ctx context.Context, r Reader, store objstore.Store, runID string) ([]HistoryRecord, error) {
	var out []HistoryRecord
	after := ""
	for {
		page, err := r.KVScan(ctx, histPrefix(runID), after, 256)
		if err != nil {
			return nil, fmt.Errorf("interpreter: history of run %s: %w", runID, err)
		}
		for _, e := range page {
			var h HistoryRecord
			if err := decodeMsgpack(e.Value, &h); err != nil {
				return nil, fmt.Errorf("history record %s: %w", e.Key, err)
			}
			if h.OutputRef != "" && store != nil {
				v, err := readOutputObject(ctx, store, h.OutputRef)
				if err != nil {
					return nil, err
				}
				h.Output = v
			}
			out = append(out, h)
		}
		if len(page) < 256 {
			return out, nil
		}
		after = page[len(page)-1].Key
	}
}

func readOutputObject(ctx context.Context, store objstore.Store, key string) (any, error) {
	b, _, err := store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, fmt.Errorf("%w: output object %s is missing", ErrCorruptState, key)
	}
	if err != nil {
		return nil, fmt.Errorf("interpreter: read output %s: %w", key, err)
	}
	var v any
	if err := decodeMsgpack(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// WaitingStep is what Waiting reports about the step waiting on a key.
type WaitingStep struct {
	RunID string
	// Workflow is the waiting run's definition; Step the waiting step.
	Workflow *dsl.Workflow
	Step     *dsl.Step
	// Schema is the JSON Schema the payload must satisfy; nil when none.
	Schema any
}

// Waiting returns the step waiting on signal key, or nil when none is.
func (it *Interpreter) Waiting(ctx context.Context, r Reader, key string) (*WaitingStep, error) {
	b, err := r.KVGet(ctx, waitKey(key))
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("interpreter: read waiter of %q: %w", key, err)
	}
	var w waitRecord
	if err := decodeMsgpack(b, &w); err != nil {
		return nil, err
	}
	d, err := it.definition(ctx, w.Def)
	if err != nil {
		return nil, err
	}
	if w.Step < 0 || w.Step >= len(d.wf.Steps) {
		return nil, fmt.Errorf("%w: waiter of %q names step %d", ErrCorruptState, key, w.Step)
	}
	return &WaitingStep{RunID: w.RunID, Workflow: d.wf, Step: d.wf.Steps[w.Step], Schema: w.Schema}, nil
}

// ValidateSignal checks payload (JSON; empty means null) against the
// schema of the wait_signal step waiting on key, when one waits and its
// schema is literal. It returns nil when nothing can be checked.
func (it *Interpreter) ValidateSignal(ctx context.Context, r Reader, key string, payload []byte) error {
	v, err := decodeSignalPayload(payload)
	if err != nil {
		return err
	}
	w, err := it.Waiting(ctx, r, key)
	if err != nil || w == nil {
		return err
	}
	return w.check(v)
}

// Check validates a signal payload (JSON; empty means null) against the
// waiting step's schema.
func (w *WaitingStep) Check(payload []byte) error {
	v, err := decodeSignalPayload(payload)
	if err != nil {
		return err
	}
	return w.check(v)
}

func (w *WaitingStep) check(v any) error {
	if w.Schema == nil {
		return nil
	}
	if err := validateAgainst(w.Schema, v); err != nil {
		return fmt.Errorf("the payload does not match the schema of step %q of run %s: %w", w.Step.ID, w.RunID, err)
	}
	return nil
}

func decodeSignalPayload(payload []byte) (any, error) {
	if len(strings.TrimSpace(string(payload))) == 0 {
		return nil, nil
	}
	v, err := DecodeJSON(payload)
	if err != nil {
		return nil, fmt.Errorf("signal payload is not JSON: %w", err)
	}
	return v, nil
}
