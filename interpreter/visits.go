package interpreter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/storage"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Long loops. A run keeps, in its readable history, the records of the
// last Options.HistoryVisits visits of each step, and counts the visits
// it dropped: a loop that visits a step 100,000 times keeps 100 of them,
// so its stored history, the writer's memory (the KV lives in it) and a
// sealed run's segment stay bounded, and the history says how many
// earlier visits are gone. Keeping a window rather than restarting the
// run (continue_as_new) keeps the run id, its variables, its steps.X
// outputs and its workflow unchanged: nothing in the file has to say
// where a loop restarts, and a step reads the latest output of another
// step, which is never dropped (steps.X is the latest output only).
//
// tqw/visits/<run>/<step> lists the history records of the step's kept
// visits, oldest first. The settlement that writes a step's history
// record rewrites that list and deletes the records of the visits past
// the window, so the history is trimmed in the commit that grows it: a
// crash never leaves more. A record staged in the same delivery cannot be
// deleted by it (a pure loop of one step folds up to 101 visits in one
// delivery), so the window holds at most one delivery's records more
// until the next delivery trims them. A dropped record's large output
// (an object) goes too, unless the step's latest output still names it:
// the list holds it as pending, deleted by the next delivery that writes
// the step's list (after the deleting commit is durable, so no committed
// record names a deleted object); the retention sweep deletes what a run
// that ended left pending (needsExpiryMarker sees it).

// DefaultHistoryVisits is Options.HistoryVisits when 0.
const DefaultHistoryVisits = 100

// visitsRecord is what tqw/visits/<run>/<step> holds.
type visitsRecord struct {
	// Recs are the kept history records of the step, oldest first, each
	// packRec(n, seq, cont).
	Recs []int64 `msgpack:"r"`
	// Dropped counts the visits whose records were deleted.
	Dropped int `msgpack:"d,omitempty"`
	// Pending are large-output objects of deleted records, deleted by the
	// next delivery that writes this record.
	Pending []string `msgpack:"p,omitempty"`
}

func visitsPrefix(runID string) string          { return kvVisits + runID + "/" }
func visitsKey(runID, stepID string) string     { return visitsPrefix(runID) + stepID }
func packRec(n, seq int, cont bool) int64       { return int64(n)<<8 | int64(seq)<<1 | boolBit(cont) }
func unpackRec(r int64) (n, seq int, cont bool) { return int(r >> 8), int(r>>1) & 0x7f, r&1 == 1 }

func boolBit(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// keepVisits is the window of visits a run's history keeps per step; 0
// keeps every visit (Options.HistoryVisits < 0).
func (it *Interpreter) keepVisits() int { return it.historyVisits }

// trackVisit adds x's history record (runtime step n, seq) to its step's
// visits list and trims the list to the window, staging the deletes in
// x's settlement. A list it cannot read leaves the record untracked
// (kept until the run's retention), never the list rewritten without
// the records it held.
func (x *exec) trackVisit(ctx context.Context) {
	keep := x.it.keepVisits()
	if keep <= 0 {
		return
	}
	step := x.hist.Step
	rec, err := x.visits(ctx, step)
	if err != nil {
		x.it.log.Warn("reading the visits of a step failed; its record is kept", "run", x.rs.RunID, "step", step, "err", err)
		return
	}
	// A record continues its step's visit when the step was entered
	// before it: a retry, or the end of a wait (sleep, signal, call).
	cont := x.st.Phase != phaseRun || x.st.Attempt > 1
	rec.Recs = append(rec.Recs, packRec(x.rs.Number, x.seq, cont))
	for visitCount(rec.Recs) > keep {
		end := 1
		for end < len(rec.Recs) {
			if _, _, c := unpackRec(rec.Recs[end]); !c {
				break
			}
			end++
		}
		if !x.dropVisit(ctx, step, rec, rec.Recs[:end]) {
			break
		}
		rec.Recs = rec.Recs[end:]
		rec.Dropped++
	}
	b, err := encodeMsgpack(rec)
	if err == nil {
		err = x.rs.Effects.Put(visitsKey(x.rs.RunID, step), b)
	}
	if err != nil {
		x.it.log.Warn("writing the visits of a step failed", "run", x.rs.RunID, "step", step, "err", err)
	}
}

// dropVisit stages the deletes of the records recs of one visit of step,
// noting their large outputs in rec.Pending; false when it cannot (a
// record of this delivery, or an unreadable one), deleting nothing.
func (x *exec) dropVisit(ctx context.Context, step string, rec *visitsRecord, recs []int64) bool {
	type drop struct{ key, object string }
	drops := make([]drop, 0, len(recs))
	var latest *string // the step's latest output object, read once
	for _, r := range recs {
		n, seq, _ := unpackRec(r)
		if n >= x.rs.Number {
			return false // staged in this delivery: the next one drops it
		}
		key := histKey(x.rs.RunID, n, seq)
		b, found, err := x.rs.KV.Get(ctx, key)
		if err != nil {
			x.it.log.Warn("reading a dropped visit's record failed; it is kept for now", "run", x.rs.RunID, "key", key, "err", err)
			return false
		}
		d := drop{key: key}
		if found {
			var h HistoryRecord
			if decodeMsgpack(b, &h) == nil && h.OutputRef != "" {
				if latest == nil {
					ref, err := x.latestOutputRef(ctx, step)
					if err != nil {
						return false
					}
					latest = &ref
				}
				if h.OutputRef != *latest {
					d.object = h.OutputRef
				}
			}
		}
		drops = append(drops, d)
	}
	for _, d := range drops {
		if err := x.rs.Effects.Delete(d.key); err != nil {
			// Only a key this delivery put conflicts, and those stop above.
			x.it.log.Warn("dropping a visit's record failed", "run", x.rs.RunID, "key", d.key, "err", err)
			continue
		}
		if d.object != "" {
			x.it.noteDirty(x.rs.RunID)
			rec.Pending = append(rec.Pending, d.object)
		}
	}
	return true
}

// latestOutputRef is the object the step's latest output record names,
// "" when it is inline or there is none.
func (x *exec) latestOutputRef(ctx context.Context, step string) (string, error) {
	b, found, err := x.outputRecord(ctx, step)
	if err != nil || !found {
		return "", err
	}
	var out outputRecord
	if err := decodeMsgpack(b, &out); err != nil {
		return "", err
	}
	return out.Ref, nil
}

// visits returns the step's visits list as this delivery last staged it,
// else as committed.
func (x *exec) visits(ctx context.Context, step string) (*visitsRecord, error) {
	if rec, ok := x.ch.visits[step]; ok {
		return rec, nil
	}
	rec := &visitsRecord{}
	b, found, err := x.rs.KV.Get(ctx, visitsKey(x.rs.RunID, step))
	if err != nil {
		return nil, fmt.Errorf("interpreter: read the visits of step %s: %w", step, err)
	}
	if found {
		if err := decodeMsgpack(b, rec); err != nil {
			return nil, err
		}
	}
	// The objects pending in the committed list lost their records in a
	// settlement that is durable: a delivery starts only after the one
	// before it is (the runtime's order), so no record names them.
	pending := rec.Pending
	rec.Pending = nil
	for _, key := range pending {
		if err := x.it.store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotExist) {
			x.it.log.Warn("deleting the output of a dropped visit failed; retried later", "run", x.rs.RunID, "object", key, "err", err)
			rec.Pending = append(rec.Pending, key)
		}
	}
	if x.ch.visits == nil {
		x.ch.visits = map[string]*visitsRecord{}
	}
	x.ch.visits[step] = rec
	return rec, nil
}

// visitCount is the number of visits recs hold: a record that does not
// continue the one before it starts one (the first always does).
func visitCount(recs []int64) int {
	n := 0
	for i, r := range recs {
		if _, _, cont := unpackRec(r); !cont || i == 0 {
			n++
		}
	}
	return n
}

// droppedVisits reads the visits lists of runID: how many visits of each
// step its history no longer holds, and whether large outputs of dropped
// visits wait to be deleted.
func droppedVisits(entries []storage.KVEntry, prefix string) (map[string]int, bool) {
	out := map[string]int{}
	pending := false
	for _, e := range entries {
		var rec visitsRecord
		if decodeMsgpack(e.Value, &rec) != nil {
			pending = true // unreadable: let the sweep look
			continue
		}
		if rec.Dropped > 0 {
			out[e.Key[len(prefix):]] = rec.Dropped
		}
		pending = pending || len(rec.Pending) > 0
	}
	return out, pending
}
