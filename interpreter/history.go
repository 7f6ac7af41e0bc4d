package interpreter

import (
	"context"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Outcomes a history record reports.
const (
	OutcomeOK        = "ok"        // the step finished; the run moved on
	OutcomeWaiting   = "waiting"   // the step parked the run (sleep, wait_signal, call)
	OutcomeRetry     = "retry"     // the attempt failed; the step runs again later
	OutcomeCaught    = "caught"    // the step failed; catch or on_timeout routed the run
	OutcomeFailed    = "failed"    // the step failed the run
	OutcomeSucceeded = "succeeded" // the step ended the run successfully
	// OutcomeCancelled is the record of the step a cancel discarded, in
	// a run with handlers.
	OutcomeCancelled = "cancelled"
	// OutcomeRedriven marks where a run ended and was continued
	// (Interpreter.Redrive): its Step is the step it resumed at.
	OutcomeRedriven = "redriven"
	// OutcomeSkipped is a step recorded as done with a given output
	// instead of run (RedriveOptions.Skip).
	OutcomeSkipped = "skipped"
)

// Counters the interpreter adds to a run's totals (runstate.Totals).
const (
	TotalSteps      = "steps"        // steps finished (not counting retried attempts)
	TotalAttempts   = "attempts"     // step attempts, retries included
	TotalRetries    = "retries"      // attempts that failed and were retried
	TotalLLMTokens  = "llm_tokens"   // tokens the llm steps reported
	TotalLLMCostUSD = "llm_cost_usd" // their cost in USD from the price table
	// OutcomeSignalRejected: a waiting step set aside a signal its schema
	// refuses (HistoryRecord.Rejected) and waits on.
	OutcomeSignalRejected = "signal_rejected"
)

// HistoryRecord is one attempt of one step, written in the settlement of
// the runtime step that ran it.
type HistoryRecord struct {
	// N is the runtime step number. Pure steps that ran in one delivery
	// after its first DSL step share it; Seq is their place in it (0:
	// the first). N then Seq order the records of a run.
	N       int    `msgpack:"n" json:"n"`
	Seq     int    `msgpack:"q,omitempty" json:"seq,omitempty"`
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
	// Rejected describes the signal a record with OutcomeSignalRejected
	// set aside; its reason is also the record's Error.
	Rejected *RejectedSignal `msgpack:"rj,omitempty" json:"rejected_signal,omitempty"`
	// DroppedVisits, on the oldest record History returns of a step, is
	// how many earlier visits of the step the history no longer holds
	// (Options.HistoryVisits); it is not stored in the record.
	DroppedVisits int `msgpack:"-" json:"dropped_visits,omitempty"`
	// What a fork (fork.go) rebuilds a run's state from, written by
	// builds that can fork (Forkable): Set holds the variables the step
	// assigned, Prev the step whose output the next step's `output`
	// names, Put tells that the attempt wrote the step's output record,
	// and RunStart, on a run's first record, what the run started from.
	Set      map[string]any `msgpack:"set,omitempty" json:"-"`
	Prev     string         `msgpack:"pv,omitempty" json:"-"`
	Put      bool           `msgpack:"po,omitempty" json:"-"`
	RunStart *runStart      `msgpack:"s0,omitempty" json:"-"`
	Forkable bool           `msgpack:"fk,omitempty" json:"-"`
	// Reused is what the step did not pay because a fork reused answers
	// its origin paid for (answers.go).
	Reused *Reuse `msgpack:"ru,omitempty" json:"reused,omitempty"`
}

// RejectedSignal is a signal a waiting step consumed and set aside because
// its payload is not JSON or does not match the step's schema. The payload
// itself is not kept: it may carry what a history must not (a sender's
// secret, or anything an untrusted sender chose); the reason is the
// validator's message with the workflow's secrets redacted.
type RejectedSignal struct {
	Key string `msgpack:"k" json:"key"`
	// Size is the payload's length in bytes.
	Size   int    `msgpack:"z" json:"size"`
	Reason string `msgpack:"r" json:"reason"`
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

// waitRecord is what tqw/wait/<key> holds while a step waits on key, or,
// with Expected, from the run's submission on for a step the run will
// wait in (see predictWaits).
type waitRecord struct {
	RunID string `msgpack:"r"`
	Def   string `msgpack:"d"`
	Step  int    `msgpack:"s"`
	// Schema is the evaluated with.schema, nil when none.
	Schema any `msgpack:"sc"`
	// Expected marks a prediction written at submission: the run has not
	// reached the step yet.
	Expected bool `msgpack:"x,omitempty"`
	// Block is the path of the block Step indexes ("" the top level).
	Block string `msgpack:"b,omitempty"`
}

func outKey(runID, stepID string) string { return kvOut + runID + "/" + stepID }
func histPrefix(runID string) string     { return kvHist + runID + "/" }

// histKey is the key of the history record of the seq-th DSL step (from
// 0) of runtime step n: the first has no suffix, the others sort after it
// and before step n+1's ("…0000000007" < "…0000000007.001" < "…0000000008").
func histKey(runID string, n, seq int) string {
	if seq == 0 {
		return fmt.Sprintf("%s%010d", histPrefix(runID), n)
	}
	return fmt.Sprintf("%s%010d.%03d", histPrefix(runID), n, seq)
}
func waitKey(key string) string { return kvWait + key }
func outputObject(runID string, n int) string {
	return fmt.Sprintf("%s%s/%010d", outputsPrefix, runID, n)
}

// Reader is the read surface history and signal checks need;
// *storage.Queue and *storage.Reader implement it.
type Reader interface {
	KVGet(ctx context.Context, key string) ([]byte, error)
	KVScan(ctx context.Context, prefix, startAfter string, limit int) ([]storage.KVEntry, error)
}

var (
	_ Reader = (*storage.Queue)(nil)
	_ Reader = (*storage.Reader)(nil)
)

// SealedRecordReader reads the records a sealed run's segment holds;
// *runtime.Inspector implements it (Runtime.Inspector on the writer,
// runtime.NewArchiveInspector elsewhere).
type SealedRecordReader interface {
	SealedRecords(ctx context.Context, runID, prefix string) ([]storage.KVEntry, bool, error)
}

// WithSealed returns r reading also the records of runs sealed into
// segments (the interpreter is a runtime.RunRecordOwner: a sealed run's
// history and outputs leave the KV store with it): History on it finds a
// sealed run's history in its segment.
func WithSealed(r Reader, sealed SealedRecordReader) Reader {
	return sealedReader{Reader: r, sealed: sealed}
}

type sealedReader struct {
	Reader
	sealed SealedRecordReader
}

// RunRecordPrefixes implements runtime.RunRecordOwner: a run's history,
// its step outputs and its children's index are sealed with the run,
// so a finished run leaves nothing of the interpreter's in the KV store
// but its retention marker. Its wait entries are gone by then (removed
// in its terminal notification's commit).
func (it *Interpreter) RunRecordPrefixes(runID string) []string {
	return runRecordPrefixes(runID)
}

// runRecordPrefixes are the KV prefixes of runID's records: its history,
// its steps' visits lists, its step outputs and its children's index.
func runRecordPrefixes(runID string) []string {
	return []string{histPrefix(runID), visitsPrefix(runID), outPrefix(runID), childPrefix(runID), joinRunPrefix(runID)}
}

// History returns the history records of runID in order, with large
// outputs read back from their objects. A run never run has none. On a
// Reader from WithSealed it reads a sealed run's history from its
// segment (one GET of the segment's data object, plus its index unless
// cached); otherwise from the KV store (memory reads on the writer).
//
// It reports durable records only: on the writer's queue (directly or
// under WithSealed) it returns once every commit its reads may have seen
// is durable (runtime.AwaitDurable, after the last read: a step whose
// settlement is still on its way to the store may wait for that WAL PUT,
// bounded by the kv's commit delay more). The barrier covers every read
// the caller made of r before, too, so a report that reads the history
// last needs no other.
func History(ctx context.Context, r Reader, store objstore.Store, runID string) ([]HistoryRecord, error) {
	recs, err := history(ctx, r, store, runID)
	if err != nil {
		return nil, err
	}
	base := r
	if s, ok := r.(sealedReader); ok {
		base = s.Reader
	}
	if err := runtime.AwaitDurable(ctx, base); err != nil {
		return nil, fmt.Errorf("interpreter: history of run %s: %w", runID, err)
	}
	return recs, nil
}

// history is History without the read barrier.
func history(ctx context.Context, r Reader, store objstore.Store, runID string) ([]HistoryRecord, error) {
	sealed, _ := r.(sealedReader)
	// Sealed first, then the KV, then sealed again: a run sealed between
	// the two reads is found either way.
	if sealed.sealed != nil {
		if recs, ok, err := sealedHistory(ctx, sealed, store, runID); ok || err != nil {
			return recs, err
		}
	}
	var out []HistoryRecord
	err := scanKeys(ctx, r, histPrefix(runID), func(e storage.KVEntry) error {
		h, err := decodeHistory(ctx, store, e)
		if err == nil {
			out = append(out, h)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("interpreter: history of run %s: %w", runID, err)
	}
	if len(out) == 0 && sealed.sealed != nil {
		if recs, ok, err := sealedHistory(ctx, sealed, store, runID); ok || err != nil {
			return recs, err
		}
	}
	var visits []storage.KVEntry
	if err := scanKeys(ctx, r, visitsPrefix(runID), func(e storage.KVEntry) error { visits = append(visits, e); return nil }); err != nil {
		return nil, fmt.Errorf("interpreter: history of run %s: %w", runID, err)
	}
	noteDropped(out, visits, visitsPrefix(runID))
	return out, nil
}

// noteDropped sets DroppedVisits on the oldest record of each step of
// recs whose earlier visits the visits lists say were dropped.
func noteDropped(recs []HistoryRecord, visits []storage.KVEntry, prefix string) {
	dropped, _ := droppedVisits(visits, prefix)
	for i := range recs {
		if n := dropped[recs[i].Step]; n > 0 {
			recs[i].DroppedVisits = n
			delete(dropped, recs[i].Step)
		}
	}
}

// sealedHistory returns runID's history from its segment, or false when
// the run is not sealed.
func sealedHistory(ctx context.Context, r sealedReader, store objstore.Store, runID string) ([]HistoryRecord, bool, error) {
	entries, ok, err := r.sealed.SealedRecords(ctx, runID, histPrefix(runID))
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("interpreter: history of sealed run %s: %w", runID, err)
		}
		return nil, false, err
	}
	out := make([]HistoryRecord, 0, len(entries))
	for _, e := range entries {
		h, err := decodeHistory(ctx, store, e)
		if err != nil {
			return nil, true, err
		}
		out = append(out, h)
	}
	visits, _, err := r.sealed.SealedRecords(ctx, runID, visitsPrefix(runID))
	if err != nil {
		return nil, true, fmt.Errorf("interpreter: history of sealed run %s: %w", runID, err)
	}
	noteDropped(out, visits, visitsPrefix(runID))
	return out, true, nil
}

func decodeHistory(ctx context.Context, store objstore.Store, e storage.KVEntry) (HistoryRecord, error) {
	var h HistoryRecord
	if err := decodeMsgpack(e.Value, &h); err != nil {
		return h, fmt.Errorf("history record %s: %w", e.Key, err)
	}
	if h.OutputRef != "" && store != nil {
		v, err := readOutputObject(ctx, store, h.OutputRef)
		if err != nil {
			return h, err
		}
		h.Output = v
	}
	return h, nil
}
