package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
	"github.com/vmihailenco/msgpack/v5"
)

// Bulk actions: one action (cancel, redrive, signal) on every run a
// listing filter selects, each run acted on exactly once per request id
// even when the request is interrupted and repeated. A done-record per
// (request, run), workflow/bulk/<request>/<run> in the caller KV (a
// ControlKVPrefix), is written in the commit of the action where the
// action takes a record (Redrive, BufferSignal, DeliverSignal), and
// before (the incarnation it means) and after a Cancel, which is
// idempotent on an ended run: a repeat that finds the record does not
// act again, and one that finds the run's incarnation changed since
// leaves the newer one alone. Records are dropped BulkRetention after
// they were written, by the next bulk request.

// BulkRetention is how long a bulk request's done-records are kept: a
// repeat of the request within it acts on no run twice.
const BulkRetention = 7 * 24 * time.Hour

var kvBulk = func() string {
	p, err := runtime.ControlKVPrefix("bulk")
	if err != nil {
		panic(err)
	}
	return p
}()

// BulkRequest is one bulk action. Action is "cancel", "redrive" (Arg is
// the runner's redrive argument: interpreter.RedriveArg) or "signal"
// (Payload goes to the key each selected run waits on; a run that waits
// on none is skipped). Filter selects the runs as ListRuns does (its
// Limit is ignored: every run it selects). DryRun lists them and acts on
// none. Match, when set, selects further among them (what the index
// cannot serve: times). ID names the request (1 to 64 letters, digits,
// '-', '_', '.'). OnRun, when set, is called with each item as it is
// done.
type BulkRequest struct {
	ID      string
	Action  string
	Filter  runstate.ListOptions
	Match   func(runstate.Status) bool
	Arg     []byte
	Payload []byte
	DryRun  bool
	OnRun   func(BulkItem)
}

// BulkItem is what a bulk request did to one run: Outcome is
// "selected" (a dry run), "cancelled", "redriven", "delivered",
// "buffered", "done" (by an earlier attempt of the request), or
// "skipped", with Detail saying why.
type BulkItem struct {
	RunID   string `json:"run"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// bulkRecord is a done-record (MessagePack).
type bulkRecord struct {
	Action string `msgpack:"a"`
	// Active is the incarnation a cancel meant; Outcome is empty until
	// the action is done.
	Active  string `msgpack:"ac,omitempty"`
	Outcome string `msgpack:"o,omitempty"`
	Detail  string `msgpack:"d,omitempty"`
	// Key and Buf are a signal's key and buffered value.
	Key  string `msgpack:"k,omitempty"`
	Buf  []byte `msgpack:"b,omitempty"`
	AtMs int64  `msgpack:"t"`
}

func bulkKey(req, runID string) string { return kvBulk + req + "/" + runID }

// ValidateBulkID checks a bulk request id.
func ValidateBulkID(id string) error {
	if id == "" || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		return fmt.Errorf("%w: request id %q: want 1 to 64 letters, digits, '-', '_' and '.'", runtime.ErrInvalidKey, id)
	}
	return nil
}

// Bulk applies req on rt, the store's writer, and returns what it did to
// each selected run, in id order. A run whose action fails is reported
// ("skipped" with the error) and the others go on; an error of the store
// ends the request, which can be repeated. Cost: the listing's (memory
// reads on the writer, sealed segments as ListRuns reads them), one scan
// of the done-records, and per run one memory read plus the action's
// commits (Cancel: three durable commits, the records' two included;
// Redrive: one; a signal: two).
func Bulk(ctx context.Context, rt *runtime.Runtime, req BulkRequest) ([]BulkItem, error) {
	if err := ValidateBulkID(req.ID); err != nil {
		return nil, err
	}
	switch req.Action {
	case "cancel", "redrive":
	case "signal":
		if len(req.Payload) > signal.MaxPayload {
			return nil, fmt.Errorf("remote: bulk signal: %w: payload of %d bytes, the limit is %d", runtime.ErrValueTooLarge, len(req.Payload), signal.MaxPayload)
		}
	default:
		return nil, fmt.Errorf("%w: bulk action %q: want cancel, redrive or signal", runtime.ErrInvalidKey, req.Action)
	}
	if !req.DryRun {
		if err := sweepBulk(ctx, rt); err != nil {
			return nil, err
		}
	}
	var out []BulkItem
	opts := req.Filter
	opts.Limit = 500
	for {
		page, err := rt.Inspector().ListRuns(ctx, opts)
		if err != nil {
			return out, fmt.Errorf("remote: bulk %s: list runs: %w", req.Action, err)
		}
		for _, st := range page {
			if req.Match != nil && !req.Match(st) {
				continue
			}
			item := BulkItem{RunID: st.RunID, Outcome: "selected"}
			if !req.DryRun {
				if item, err = bulkOne(ctx, rt, &req, st); err != nil {
					return out, err
				}
			}
			out = append(out, item)
			if req.OnRun != nil {
				req.OnRun(item)
			}
		}
		if len(page) < opts.Limit {
			return out, nil
		}
		opts.After = page[len(page)-1].RunID
	}
}

// bulkOne acts on one run; an error return is the store's, and ends the
// request.
func bulkOne(ctx context.Context, rt *runtime.Runtime, req *BulkRequest, st runstate.Status) (BulkItem, error) {
	item := BulkItem{RunID: st.RunID}
	key := bulkKey(req.ID, st.RunID)
	rec, err := loadBulkRecord(ctx, rt, key)
	if err != nil {
		return item, err
	}
	if rec != nil && rec.Outcome != "" {
		item.Outcome, item.Detail = "done", rec.Outcome
		return item, nil
	}
	skip := func(err error) (BulkItem, error) {
		item.Outcome, item.Detail = "skipped", err.Error()
		return item, nil
	}
	now := rt.Clock().Now().UnixMilli()
	switch req.Action {
	case "cancel":
		inc, err := rt.Incarnation(ctx, st.RunID)
		if err != nil {
			return item, err
		}
		if rec == nil {
			if inc.Active == "" {
				return skip(errors.New("not active"))
			}
			rec = &bulkRecord{Action: req.Action, Active: inc.Active, AtMs: now}
			if err := putBulkRecord(ctx, rt, key, rec); err != nil {
				return item, err
			}
		}
		if inc.Active != rec.Active {
			// The incarnation meant ended since the first attempt (by it,
			// or otherwise): never cancel a newer one.
			rec.Outcome = "ended"
			if inc.Active == "" && inc.Ended == rec.Active && inc.Status == runstate.Cancelled {
				rec.Outcome = "cancelled"
			}
		} else {
			ok, err := rt.Cancel(ctx, st.RunID)
			if err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
				return item, err
			}
			rec.Outcome = "ended"
			if ok {
				rec.Outcome = "cancelled"
			}
		}
		if err := putBulkRecord(ctx, rt, key, rec); err != nil {
			return item, err
		}
		if rec.Outcome != "cancelled" {
			return skip(errors.New("it ended before it could be cancelled"))
		}
		item.Outcome = "cancelled"
		return item, nil
	case "redrive":
		b, err := encodeBulkRecord(&bulkRecord{Action: req.Action, Outcome: "redriven", AtMs: now})
		if err != nil {
			return item, err
		}
		_, err = rt.Redrive(ctx, st.RunID, req.Arg, &queue.KVWrite{Key: key, Value: b})
		switch {
		case errors.Is(err, runtime.ErrRecordExists):
			item.Outcome, item.Detail = "done", "redriven"
			return item, nil
		case err != nil && isRefusal(err):
			return skip(err)
		case err != nil:
			return item, err
		}
		item.Outcome = "redriven"
		return item, nil
	}
	return bulkSignal(ctx, rt, req, st, key, rec)
}

// isRefusal reports an error about the run (refused, gone), which skips
// it; any other ends the request, to be repeated.
func isRefusal(err error) bool {
	return errors.Is(err, runtime.ErrNotRedrivable) || errors.Is(err, runtime.ErrRunNotFound)
}

// bulkSignal sends the payload to the key st waits on, exactly once: the
// done-record commits with the buffer write, then with the wake (the
// inbox's protocol, invariant 3).
func bulkSignal(ctx context.Context, rt *runtime.Runtime, req *BulkRequest, st runstate.Status, key string, rec *bulkRecord) (BulkItem, error) {
	item := BulkItem{RunID: st.RunID}
	if rec == nil {
		if st.SignalKey == "" || st.State != runstate.StateWaiting {
			item.Outcome, item.Detail = "skipped", "it waits on no signal"
			return item, nil
		}
		if err := rt.AdmitSignal(ctx, st.SignalKey, req.Payload, signal.Options{RequireWaiting: true}); err != nil {
			item.Outcome, item.Detail = "skipped", err.Error()
			return item, nil
		}
		rec = &bulkRecord{Action: req.Action, Key: st.SignalKey, Buf: rt.SignalValue(req.Payload), AtMs: rt.Clock().Now().UnixMilli()}
		b, err := encodeBulkRecord(rec)
		if err != nil {
			return item, err
		}
		if err := rt.BufferSignal(ctx, rec.Key, rec.Buf, queue.KVWrite{Key: key, Value: b}); errors.Is(err, runtime.ErrRecordExists) {
			item.Outcome, item.Detail = "done", "signal sent by a concurrent attempt"
			return item, nil
		} else if err != nil {
			return item, err
		}
	}
	cur, err := rt.SignalBuffered(ctx, rec.Key)
	if err != nil {
		return item, err
	}
	if !bytes.Equal(cur, rec.Buf) {
		// Consumed by the waiter's registration since the buffer write
		// (or replaced): never buffer it again.
		item.Outcome = "delivered"
		if cur != nil {
			item.Outcome = "buffered"
		}
		return item, nil
	}
	done := *rec
	done.Outcome = "delivered"
	b, err := encodeBulkRecord(&done)
	if err != nil {
		return item, err
	}
	out, err := rt.DeliverSignal(ctx, rec.Key, rec.Buf, queue.KVWrite{Key: key, Value: b})
	if err != nil {
		return item, err
	}
	item.Outcome = out.String()
	return item, nil
}

func encodeBulkRecord(r *bulkRecord) ([]byte, error) {
	b, err := msgpack.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("remote: encode bulk record: %w", err)
	}
	return b, nil
}

func loadBulkRecord(ctx context.Context, rt *runtime.Runtime, key string) (*bulkRecord, error) {
	b, err := rt.Queue().KVGet(ctx, key)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: read %s: %w", key, err)
	}
	var r bulkRecord
	if err := msgpackcheck.Unmarshal(b, &r, msgpackcheck.Options{}); err != nil {
		return nil, fmt.Errorf("%w: bulk record %s: %w", runtime.ErrCorruptRecord, key, err)
	}
	return &r, nil
}

func putBulkRecord(ctx context.Context, rt *runtime.Runtime, key string, r *bulkRecord) error {
	b, err := encodeBulkRecord(r)
	if err != nil {
		return err
	}
	if err := rt.Queue().KVPut(ctx, key, b); err != nil {
		return fmt.Errorf("remote: write %s: %w", key, err)
	}
	return nil
}

// sweepBulk drops the done-records older than BulkRetention.
func sweepBulk(ctx context.Context, rt *runtime.Runtime) error {
	cutoff := rt.Clock().Now().Add(-BulkRetention).UnixMilli()
	q, after := rt.Queue(), ""
	for {
		page, err := q.KVScan(ctx, kvBulk, after, 256)
		if err != nil {
			return fmt.Errorf("remote: sweep bulk records: %w", err)
		}
		for _, e := range page {
			after = e.Key
			var r bulkRecord
			if msgpackcheck.Unmarshal(e.Value, &r, msgpackcheck.Options{}) == nil && r.AtMs > cutoff {
				continue
			}
			if _, err := q.KVCompareAndDelete(ctx, e.Key, e.Value); err != nil {
				return fmt.Errorf("remote: sweep bulk records: %w", err)
			}
		}
		if len(page) < 256 {
			return nil
		}
	}
}
