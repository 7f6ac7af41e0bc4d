package interpreter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// ErrRunIDReused reports a submission under the id of a finished run whose
// result or records are still retained.
var ErrRunIDReused = errors.New("interpreter: run id belongs to a finished run that is still retained")

// DefaultSweepInterval is how often SweepLoop sweeps when
// Options.SweepInterval is 0.
const DefaultSweepInterval = time.Minute

// purgeBatch bounds the KV deletes of one purge commit.
const purgeBatch = 256

func expireKey(finished time.Time, runID string) string {
	return fmt.Sprintf("%s%016x/%s", kvExpire, uint64(max(finished.UnixMilli(), 0)), runID)
}

func parseExpireKey(key string) (time.Time, string, error) {
	rest, ok := strings.CutPrefix(key, kvExpire)
	if !ok || len(rest) < 18 || rest[16] != '/' {
		return time.Time{}, "", fmt.Errorf("%w: retention marker %q", ErrCorruptState, key)
	}
	ms, err := strconv.ParseUint(rest[:16], 16, 63)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: retention marker %q: %w", ErrCorruptState, key, err)
	}
	return time.UnixMilli(int64(ms)), rest[17:], nil
}

func childPrefix(parent string) string          { return kvChild + parent + "/" }
func childIndexKey(parent, child string) string { return childPrefix(parent) + child }
func outPrefix(runID string) string             { return kvOut + runID + "/" }
func outputsObjectPrefix(runID string) string   { return outputsPrefix + runID + "/" }

// scanKeys calls fn for every KV entry under prefix, in key order.
func scanKeys(ctx context.Context, r Reader, prefix string, fn func(storage.KVEntry) error) error {
	after := ""
	for {
		page, err := r.KVScan(ctx, prefix, after, 256)
		if err != nil {
			return fmt.Errorf("interpreter: scan %s: %w", prefix, err)
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(page) < 256 {
			return nil
		}
		after = page[len(page)-1].Key
	}
}

// hasRecords reports whether the interpreter holds history for runID.
func hasRecords(ctx context.Context, r Reader, runID string) (bool, error) {
	page, err := r.KVScan(ctx, histPrefix(runID), "", 1)
	if err != nil {
		return false, fmt.Errorf("interpreter: read history of run %s: %w", runID, err)
	}
	return len(page) > 0, nil
}

// checkReuse refuses, with ErrRunIDReused, a run id that names a finished
// run whose result or interpreter records are still retained, reading r
// (the writer's queue or a Reader) through insp (an Inspector of r; the
// runtime's own on the writer, whose decoded catalog of sealed segments
// stays cached): a new run under it would mix its
// history and outputs with the old one's. An active run passes (the
// runtime's Submit is idempotent on it), and so does an unknown id. Cost:
// memory reads of r.
func checkReuse(ctx context.Context, insp *runtime.Inspector, r runtime.StateReader, runID string) error {
	st, err := insp.Status(ctx, runID)
	switch {
	case err == nil && !st.State.Terminal():
		return nil
	case err == nil:
		return fmt.Errorf("%w: run %s %s at %s and is retained; choose a fresh run id, or reuse this one once retention removed it",
			ErrRunIDReused, runID, st.State, st.FinishedAt.UTC().Format(time.RFC3339))
	case !errors.Is(err, runtime.ErrRunNotFound):
		return fmt.Errorf("interpreter: check run id %s: %w", runID, err)
	}
	found, err := hasRecords(ctx, r, runID)
	if err != nil {
		return err
	}
	if found {
		return fmt.Errorf("%w: the history of an earlier run %s is still stored; choose a fresh run id, or reuse this one once retention removed it",
			ErrRunIDReused, runID)
	}
	return nil
}

// cancelChildren cancels every child run parent started that has not
// terminated. Cancelling a terminated or unknown run is a no-op, so a
// redelivered notification repeats nothing. Cost: one Cancel (two durable
// commits) per child still active; none for a run that called nothing.
func (it *Interpreter) cancelChildren(ctx context.Context, parent string) error {
	return scanKeys(ctx, it.q, childPrefix(parent), func(e storage.KVEntry) error {
		child := e.Key[len(childPrefix(parent)):]
		ok, err := it.rt.Cancel(ctx, child)
		if err != nil {
			return fmt.Errorf("interpreter: cancel child run %s of %s: %w", child, parent, err)
		}
		if ok {
			it.log.Info("cancelled a child run: its parent ended", "run", parent, "child", child)
		}
		return nil
	})
}

// staleWaits returns the wait entries that still name runID: a run that
// ended while waiting (cancelled, or failed by the runtime) leaves its
// entry behind, as does a wait predicted at submission (the signal keys
// in extra) in a step the run never reached, and Waiting must not report
// a run that is gone.
func (it *Interpreter) staleWaits(ctx context.Context, runID string, extra ...string) ([]string, error) {
	keys := map[string]bool{}
	for _, k := range extra {
		keys[k] = true
	}
	err := scanKeys(ctx, it.q, histPrefix(runID), func(e storage.KVEntry) error {
		var h HistoryRecord
		if err := decodeMsgpack(e.Value, &h); err == nil && h.WaitKey != "" {
			keys[h.WaitKey] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range keys {
		b, err := it.q.KVGet(ctx, waitKey(k))
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("interpreter: read waiter of %q: %w", k, err)
		}
		var w waitRecord
		if decodeMsgpack(b, &w) == nil && w.RunID == runID {
			out = append(out, waitKey(k))
		}
	}
	return out, nil
}

// needsExpiryMarker reports whether run o's end needs a retention marker
// (with Options.Retention): when the runtime seals (runtime.Runtime.Seals),
// the run's KV records leave with its segment, so only a run that left
// something else behind needs one: a rerun claim (its run key) or large
// outputs in objects, removed through the marker as the runtime expires
// the run (ExpireRunRecords). Others keep nothing in memory once sealed.
// Cost: memory reads of the run's history.
func (it *Interpreter) needsExpiryMarker(ctx context.Context, o *runstate.Outcome) (bool, error) {
	if it.retention <= 0 {
		return false, nil
	}
	if it.rt == nil || !it.rt.Seals() || o.Headers[headerRunKey] != "" {
		return true, nil
	}
	large := false
	err := scanKeys(ctx, it.q, histPrefix(o.RunID), func(e storage.KVEntry) error {
		var h HistoryRecord
		if err := decodeMsgpack(e.Value, &h); err != nil || h.OutputRef != "" {
			large = true // an unreadable record: let the sweep look
		}
		return nil
	})
	if err != nil || large {
		return large, err
	}
	// Large outputs of dropped visits may still wait to be deleted.
	var visits []storage.KVEntry
	err = scanKeys(ctx, it.q, visitsPrefix(o.RunID), func(e storage.KVEntry) error { visits = append(visits, e); return nil })
	_, pending := droppedVisits(visits, visitsPrefix(o.RunID))
	return pending, err
}

// SweepResult counts what one retention sweep removed.
type SweepResult struct {
	// Runs is the number of runs whose records were removed; Keys the KV
	// entries (outputs, history, wait and child index entries) and Objects
	// the large-output objects deleted for them.
	Runs, Keys, Objects int
}

// Sweep removes the records of every run that terminated more than
// Options.Retention ago and whose status the runtime no longer shows: its
// step outputs, history, wait and child index entries and large-output
// objects, then its retention marker. A run the runtime still shows (its
// result retained, or a segment still listing it) keeps everything; a
// sealed run's records go as the runtime expires it (ExpireRunRecords).
// Markers are written by the terminal hook in the commit that
// acknowledges the run's termination notification and are read oldest
// first, so a pass stops at the first unexpired one.
// A pass interrupted by a crash leaves the marker and is repeated by the
// next (deleting what is already gone is a no-op).
//
// Cost per expired run: a status read (memory reads, plus a sealed
// segment's index unless cached; repeated at each pass while the run is
// shown), one LIST per 1,000 large-output objects plus one DELETE per
// object, and one durable commit per 256 KV entries (the last one also
// removes the marker). Scans are memory reads on the writer. A pass with
// nothing expired costs nothing. Definitions are kept; see the package
// documentation.
func (it *Interpreter) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	if it.retention <= 0 {
		return res, nil
	}
	cutoff := it.now().Add(-it.retention)
	after := ""
	for {
		page, err := it.q.KVScan(ctx, kvExpire, after, 256)
		if err != nil {
			return res, fmt.Errorf("interpreter: sweep: %w", err)
		}
		for _, e := range page {
			after = e.Key
			t, runID, err := parseExpireKey(e.Key)
			if err != nil {
				it.log.Warn("deleting a malformed retention marker", "key", e.Key, "err", err)
				if err := it.q.KVDelete(ctx, e.Key); err != nil && !errors.Is(err, storage.ErrNotFound) {
					return res, fmt.Errorf("interpreter: sweep: delete marker %s: %w", e.Key, err)
				}
				continue
			}
			if t.After(cutoff) {
				return res, nil
			}
			if shown, err := it.shown(ctx, runID); err != nil {
				return res, fmt.Errorf("interpreter: sweep run %s: %w", runID, err)
			} else if shown {
				continue
			}
			keys, objs, err := it.purge(ctx, runID, e.Key, string(e.Value))
			res.Keys += keys
			res.Objects += objs
			if err != nil {
				return res, fmt.Errorf("interpreter: sweep run %s: %w", runID, err)
			}
			res.Runs++
		}
		if len(page) < 256 {
			return res, nil
		}
	}
}

// shown reports whether the runtime still shows runID: active, or
// finished with its result retained in the KV or in a listed segment.
func (it *Interpreter) shown(ctx context.Context, runID string) (bool, error) {
	if it.rt == nil {
		return false, nil
	}
	_, err := it.rt.Status(ctx, runID)
	if errors.Is(err, runtime.ErrRunNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ExpireRunRecords implements runtime.RunRecordExpirer: as the runtime
// expires a sealed run (or one past its retention before it was sealed),
// the run's large-output objects and rerun claim go, then its retention
// marker, before the commit that removes its status; its KV records go
// in that commit. A run without a marker keeps nothing outside the KV.
// Cost: one memory read; for a run with a marker, its objects' LIST and
// DELETEs and one durable commit.
func (it *Interpreter) ExpireRunRecords(ctx context.Context, runID string, finished time.Time) error {
	marker := expireKey(finished, runID)
	b, err := it.q.KVGet(ctx, marker)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("interpreter: read the retention marker of run %s: %w", runID, err)
	}
	if _, err := it.purgeObjects(ctx, runID, string(b)); err != nil {
		return err
	}
	if err := it.q.KVDelete(ctx, marker); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("interpreter: delete the retention marker of run %s: %w", runID, err)
	}
	return nil
}

// purge deletes runID's objects (purgeObjects), then its KV entries and
// marker.
func (it *Interpreter) purge(ctx context.Context, runID, marker, runKey string) (keys, objects int, err error) {
	if objects, err = it.purgeObjects(ctx, runID, runKey); err != nil {
		return keys, objects, err
	}
	var dels []string
	collect := func(e storage.KVEntry) error { dels = append(dels, e.Key); return nil }
	// Outputs and history go before the marker; wait entries are read off
	// the history, so they are collected first.
	waits, err := it.staleWaits(ctx, runID)
	if err != nil {
		return keys, objects, err
	}
	dels = append(dels, waits...)
	for _, p := range runRecordPrefixes(runID) {
		if err := scanKeys(ctx, it.q, p, collect); err != nil {
			return keys, objects, err
		}
	}
	dels = append(dels, marker)
	for len(dels) > 0 {
		n := min(len(dels), purgeBatch)
		if _, err := it.q.KVApply(ctx, storage.KVBatch{Deletes: dels[:n]}); err != nil {
			return keys, objects, fmt.Errorf("delete records: %w", err)
		}
		keys += n
		dels = dels[n:]
	}
	return keys - 1, objects, nil // the marker is not a record
}

// purgeObjects deletes runID's large-output objects and its rerun claim
// under runKey, and returns how many outputs it deleted.
func (it *Interpreter) purgeObjects(ctx context.Context, runID, runKey string) (objects int, err error) {
	if runKey != "" && validRunKey(runKey) {
		if err := ReleaseRun(ctx, it.store, runKey, runID); err != nil {
			return objects, err
		}
	}
	prefix := outputsObjectPrefix(runID)
	for {
		// Deleted objects leave the listing, so each page starts afresh.
		page, err := it.store.List(ctx, prefix, "", 1000)
		if err != nil {
			return objects, fmt.Errorf("list output objects: %w", err)
		}
		for _, o := range page {
			if err := it.store.Delete(ctx, o.Key); err != nil && !errors.Is(err, objstore.ErrNotExist) {
				return objects, fmt.Errorf("delete output object %s: %w", o.Key, err)
			}
			objects++
		}
		if len(page) < 1000 {
			return objects, nil
		}
	}
}

// SweepLoop sweeps now and then every Options.SweepInterval until ctx is
// done; it returns at once when Options.Retention is 0. Run it in the
// process that owns the queue (the one running the worker). A failed pass
// is logged and retried at the next interval.
func (it *Interpreter) SweepLoop(ctx context.Context) {
	if it.retention <= 0 || it.rt == nil {
		return
	}
	var answersSwept time.Time
	for {
		if res, err := it.Sweep(ctx); err != nil {
			if ctx.Err() == nil {
				it.log.Error("interpreter retention sweep failed", "err", err)
			}
		} else if res != (SweepResult{}) {
			it.log.Debug("interpreter retention sweep", "runs", res.Runs, "keys", res.Keys, "objects", res.Objects)
		}
		// Shared answers are listed at most once an hour: their LIST
		// costs in proportion to all answers, not to expired runs.
		if now := it.now(); now.Sub(answersSwept) >= answerSweepEvery {
			if n, err := it.AnswerSweep(ctx); err != nil {
				if ctx.Err() == nil {
					it.log.Error("interpreter answer sweep failed", "err", err)
				}
			} else {
				answersSwept = now
				if n > 0 {
					it.log.Debug("interpreter answer sweep", "answers", n)
				}
			}
		}
		t := it.clock.NewTimer(it.sweepEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// Known-clean runs. With sealing on, a run's end needs the terminal
// notification only for its retention marker, and the marker only for a
// rerun claim or large-output objects (needsExpiryMarker). A run whose
// first attempt of step 0 ran in this process, and which has stored no
// large output and started no child since, needs neither: Observes lets
// it end without a notification, which saves its job's commit (one WAL
// PUT per run when alone). A run this process did not see start (it
// resumed after a restart) is never known clean, so a crash costs at
// most a notification, never a marker.

// noteStart records rs's run as clean when rs is its first delivery of
// step 0.
func (it *Interpreter) noteStart(rs *runtime.Step) {
	if rs.Number != 0 || rs.Attempt != 1 {
		return
	}
	it.cleanMu.Lock()
	if _, seen := it.clean[rs.RunID]; !seen {
		it.clean[rs.RunID] = true
	}
	it.cleanMu.Unlock()
}

// noteDirty records that runID stored something the sweep must find.
func (it *Interpreter) noteDirty(runID string) {
	it.cleanMu.Lock()
	if _, seen := it.clean[runID]; seen {
		it.clean[runID] = false
	}
	it.cleanMu.Unlock()
}

// forgetClean drops runID once its end is handled.
func (it *Interpreter) forgetClean(runID string) {
	it.cleanMu.Lock()
	delete(it.clean, runID)
	it.cleanMu.Unlock()
}

// knownClean reports whether o's run is known to need no retention
// marker: the runtime seals, no rerun claim rides on it, and it is clean.
func (it *Interpreter) knownClean(o *runstate.Outcome) bool {
	if !it.rt.Seals() || o.Headers[headerRunKey] != "" || o.Headers[HeaderForkFrom] != "" {
		return false
	}
	it.cleanMu.Lock()
	defer it.cleanMu.Unlock()
	return it.clean[o.RunID]
}
