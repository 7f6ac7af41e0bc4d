package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// SweepResult counts what one retention sweep removed.
type SweepResult struct {
	// MemoRuns counts runs whose memo and replay entries were cleared;
	// MemoObjects the objects deleted for them.
	MemoRuns, MemoObjects int
	// Results counts expired result records.
	Results int
	// Signals counts buffered signals dropped after the signal retention.
	Signals int
	// Sealed counts runs sealed (Options.Sealing); SealedExpired the sealed
	// runs whose segments expired.
	Sealed, SealedExpired int
}

// terminalMarker records a run's termination for memo retention.
type terminalMarker struct {
	RunID      string
	FinishedAt time.Time
	key        string
}

// terminalMarkers lists memo-retention markers oldest first, starting after
// the marker with key after ("" = from the start), at most limit of them.
// Markers exist only with Options.MemoRetention; they are written in the commit
// that terminates the run, keyed by time, then run id.
func (rt *Runtime) terminalMarkers(ctx context.Context, after *terminalMarker, limit int) ([]terminalMarker, error) {
	start := ""
	if after != nil {
		start = after.key
	}
	page, err := rt.q.KVScan(ctx, kvTerminals, start, limit)
	if err != nil {
		return nil, fmt.Errorf("runtime: list terminal markers: %w", err)
	}
	out := make([]terminalMarker, 0, len(page))
	for _, e := range page {
		t, id, err := parseTimedKey(kvTerminals, e.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, terminalMarker{RunID: id, FinishedAt: t, key: e.Key})
	}
	return out, nil
}

// deleteTerminalMarker removes a marker once its run's entries are cleared.
func (rt *Runtime) deleteTerminalMarker(ctx context.Context, m terminalMarker) error {
	if m.key == "" {
		return fmt.Errorf("%w: marker not obtained from terminalMarkers", ErrInvalidKey)
	}
	if err := rt.q.KVDelete(ctx, m.key); err != nil && !errors.Is(err, queue.ErrNotFound) {
		return fmt.Errorf("runtime: delete terminal marker of run %s: %w", m.RunID, err)
	}
	return nil
}

// Sweep runs one retention pass: with memo retention, it clears the memo
// and replay entries of every run whose terminal marker is older than the
// window, then the marker; with sealing, it seals the runs whose end is
// handled (Seal) first, so a run past its result retention leaves whole,
// its result with the runner's records; with result retention, it then
// drops the result records still expired (runs never handed to the
// sealer); with signal retention, it drops buffered signals older than
// the window. Each pass reads markers oldest first and stops at the first
// unexpired one. Cost: one LIST per run cleared plus one DELETE per entry;
// one durable commit per expired result; buffered signals are scanned in
// memory and each expired one costs one durable commit.
func (rt *Runtime) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := rt.clock.Now()
	if ret := rt.cfg.memoRetention; ret > 0 {
		err := rt.sweepMarkers(ctx, kvTerminals, now.Add(-ret), func(runID string, _ []byte) error {
			n, err := rt.memo.ClearRun(ctx, runID)
			res.MemoObjects += n
			if err == nil {
				res.MemoRuns++
			}
			return err
		})
		if err != nil {
			return res, err
		}
	}
	if rt.sealing() {
		sealed, expired, err := rt.seal(ctx)
		res.Sealed += sealed
		res.Results += expired
		if err != nil {
			return res, err
		}
	}
	if ret := rt.cfg.resultRetention; ret > 0 {
		err := rt.sweepMarkers(ctx, kvExpiry, now.Add(-ret), func(runID string, nonce []byte) error {
			b, err := kvGet(ctx, rt.q, resultKey(runID))
			if err != nil || b == nil {
				return err
			}
			// A later run under the same id owns a newer record: keep it.
			if r, derr := decodeResultRecord(b); derr == nil && r.Nonce != string(nonce) {
				return nil
			}
			dels, err := rt.resultExpiry(ctx, runID, b)
			if err != nil {
				return err
			}
			ok, err := rt.q.ApplyEffects(ctx, &queue.SettlementEffects{KVCompareDeletes: dels}, []queue.KVWrite{{Key: resultKey(runID), Value: b}})
			if ok {
				res.Results++
			}
			return err
		})
		if err != nil {
			return res, err
		}
	}
	n, err := rt.expireSegments(ctx, now)
	res.SealedExpired += n
	if err != nil {
		return res, err
	}
	if ret := rt.cfg.signalRetention; ret > 0 {
		n, err := rt.sweepSignals(ctx, now, ret)
		res.Signals += n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// resultExpired reports whether a run that finished at finishedMs is past
// the result retention at now.
func (rt *Runtime) resultExpired(finishedMs int64, now time.Time) bool {
	return rt.cfg.resultRetention > 0 && now.UnixMilli() >= finishedMs+rt.cfg.resultRetention.Milliseconds()
}

// resultExpiry returns the compare-deletes that expire runID's result
// record b: the record, its label entries and its totals (an unreadable
// record goes alone); a later run's entries under the id stay.
func (rt *Runtime) resultExpiry(ctx context.Context, runID string, b []byte) ([]queue.KVWrite, error) {
	dels := []queue.KVWrite{{Key: resultKey(runID), Value: b}}
	r, err := decodeResultRecord(b)
	if err != nil {
		return dels, nil
	}
	dels = append(dels, labelCompareDeletes(r.Labels, runID, r.Nonce)...)
	resume, err := rt.resumeCompareDelete(ctx, runID, r.Nonce)
	if err != nil {
		return dels, err
	}
	dels = append(dels, resume...)
	t, err := kvGet(ctx, rt.q, totalsKey(runID))
	if err != nil || t == nil {
		return dels, err
	}
	var tr totalsRecord
	if decodeRecord("totals", t, &tr) != nil || tr.Nonce == r.Nonce {
		dels = append(dels, queue.KVWrite{Key: totalsKey(runID), Value: t})
	}
	return dels, nil
}

// sweepSignals drops the buffered signals older than ret. Each is removed
// by a compare-delete of the value read, so a signal buffered under the
// same key meanwhile stays. A signal without a buffering time (an older
// version's) is stamped now, so it expires ret after the first sweep that
// saw it (one too large to stamp is kept); an undecodable one is dropped.
func (rt *Runtime) sweepSignals(ctx context.Context, now time.Time, ret time.Duration) (int, error) {
	dropped, after := 0, ""
	for {
		page, err := rt.q.KVScan(ctx, kvSigBuf, after, 256)
		if err != nil {
			return dropped, fmt.Errorf("runtime: sweep buffered signals: %w", err)
		}
		for _, e := range page {
			after = e.Key
			p, at, err := decodeSignalTime(e.Value)
			switch {
			case err != nil:
				rt.log.Warn("dropping an undecodable buffered signal", "key", e.Key, "err", err)
			case at.IsZero():
				if 1+signalTimeLen+len(p) > queue.MaxKVValueSize {
					continue // too large to stamp: kept until consumed or cleared
				}
				if _, err := rt.q.KVCompareAndPut(ctx, e.Key, e.Value, encodeBufferedSignal(p, now)); err != nil {
					return dropped, fmt.Errorf("runtime: sweep: stamp buffered signal %s: %w", e.Key, err)
				}
				continue
			case now.Sub(at) < ret:
				continue
			}
			ok, err := rt.q.KVCompareAndDelete(ctx, e.Key, e.Value)
			if err != nil && !errors.Is(err, queue.ErrNotFound) {
				return dropped, fmt.Errorf("runtime: sweep: drop buffered signal %s: %w", e.Key, err)
			}
			if ok {
				dropped++
				rt.log.Info("dropped a buffered signal no step waited for", "key", e.Key[len(kvSigBuf):], "buffered_at", at, "retention", ret)
			}
		}
		if len(page) < 256 {
			return dropped, nil
		}
	}
}

// sweepMarkers calls expire for every marker under prefix timed at or
// before cutoff, oldest first, deleting each marker after expire succeeded.
func (rt *Runtime) sweepMarkers(ctx context.Context, prefix string, cutoff time.Time, expire func(runID string, value []byte) error) error {
	for {
		page, err := rt.q.KVScan(ctx, prefix, "", 256)
		if err != nil {
			return fmt.Errorf("runtime: sweep %s: %w", prefix, err)
		}
		for _, e := range page {
			t, runID, err := parseTimedKey(prefix, e.Key)
			if err == nil {
				if t.After(cutoff) {
					return nil
				}
				if err := expire(runID, e.Value); err != nil {
					return fmt.Errorf("runtime: sweep run %s: %w", runID, err)
				}
			} else {
				rt.log.Warn("deleting malformed retention marker", "key", e.Key, "err", err)
			}
			if err := rt.q.KVDelete(ctx, e.Key); err != nil && !errors.Is(err, queue.ErrNotFound) {
				return fmt.Errorf("runtime: sweep: delete marker %s: %w", e.Key, err)
			}
		}
		if len(page) < 256 {
			return nil
		}
	}
}

// sweepLoop sweeps at startup and then every sweep interval, while any
// retention is configured.
func (rt *Runtime) sweepLoop(ctx context.Context) {
	if rt.cfg.memoRetention <= 0 && rt.cfg.resultRetention <= 0 && rt.cfg.signalRetention <= 0 {
		return
	}
	for {
		if res, err := rt.Sweep(ctx); err != nil {
			if ctx.Err() == nil {
				rt.log.Error("retention sweep failed", "err", err)
			}
		} else if res != (SweepResult{}) {
			rt.log.Debug("retention sweep", "memo_runs", res.MemoRuns, "memo_objects", res.MemoObjects, "results", res.Results, "signals", res.Signals,
				"sealed", res.Sealed, "sealed_expired", res.SealedExpired)
		}
		if h := rt.afterSweep; h != nil {
			h()
		}
		if !rt.pause(ctx, rt.cfg.sweepInterval) {
			return
		}
	}
}
