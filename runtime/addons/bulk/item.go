package bulk

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/runtime"
)

// memoKey is the memo key of a phase's result in the item's step memo.
func memoKey(phase string) string { return "phase-" + phase }

// itemOf parses the bulk headers of an item run.
func itemOf(h map[string]string) (batch string, index, gen int, err error) {
	batch = h[HeaderBatch]
	index, err1 := strconv.Atoi(h[HeaderIndex])
	gen, err2 := strconv.Atoi(h[HeaderGen])
	if batch == "" || err1 != nil || err2 != nil || index < 0 || gen < 1 {
		return "", 0, 0, fmt.Errorf("bulk: run without valid %s/%s/%s headers (%q, %q, %q)",
			HeaderBatch, HeaderIndex, HeaderGen, batch, h[HeaderIndex], h[HeaderGen])
	}
	return batch, index, gen, nil
}

// stepRunner runs one item: its pipeline's phases inside the single step
// of the item's run.
type stepRunner struct{ r *Runner }

func (s stepRunner) RunStep(ctx context.Context, step *runtime.Step) (runtime.StepOutcome, error) {
	r := s.r
	batch, i, gen, err := itemOf(step.Headers)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	key := r.itemKey(batch, i)
	if b, found, err := step.KV.Get(ctx, key); err != nil {
		return runtime.StepOutcome{}, err
	} else if found {
		if cur, derr := decodeItem(b); derr == nil {
			switch {
			case cur.Gen > gen:
				return runtime.CancelRun(fmt.Sprintf("superseded by generation %d of the item", cur.Gen)), nil
			case cur.Gen == gen && cur.Status.Terminal():
				// Already decided (a redelivery after the record committed).
				return outcomeOf(cur), nil
			}
		}
	}
	rec := &itemRecord{Gen: gen, Input: step.Payload, Attempts: step.Attempt}

	r.mu.Lock()
	st, err := r.state(ctx, batch)
	r.mu.Unlock()
	if err != nil {
		return runtime.StepOutcome{}, err
	}
	if st != nil && st.meta.Stopped {
		rec.Status, rec.Error = Cancelled, "batch stopped: "+st.meta.StopReason
		if step.Attempt > 1 || gen > 1 { // earlier deliveries may have completed phases
			if rec.Costs, err = r.memoCosts(ctx, step.Memo); err != nil {
				return runtime.StepOutcome{}, err
			}
		}
		return r.finish(step, key, rec)
	}

	r.mu.Lock()
	r.running[step.RunID]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.running[step.RunID]--; r.running[step.RunID] <= 0 {
			delete(r.running, step.RunID)
		}
		r.mu.Unlock()
	}()

	costs := map[string]int64{}
	in := step.Payload
	for _, ph := range r.pipe.Phases {
		pc := &PhaseContext{BatchID: batch, Index: i, RunID: step.RunID, Attempt: step.Attempt, Lease: step.Lease}
		var phaseErr error
		m, err := memo.Memoized(ctx, step.Memo, memoKey(ph.Name), func(ctx context.Context) (phaseMemo, error) {
			out, err := ph.Run(ctx, pc, in)
			if err != nil {
				phaseErr = err
				return phaseMemo{}, err
			}
			pc.mu.Lock()
			defer pc.mu.Unlock()
			return phaseMemo{Out: out, Costs: pc.costs}, nil
		})
		if err != nil {
			err = fmt.Errorf("phase %s: %w", ph.Name, err)
			if phaseErr == nil || errors.Is(context.Cause(ctx), runtime.ErrShutdown) ||
				!runtime.IsPermanent(phaseErr) && step.Attempt < r.cfg.MaxAttempts {
				return runtime.StepOutcome{}, runtime.Transient(err)
			}
			rec.Status, rec.Error, rec.Costs = Failed, err.Error(), costs
			return r.finish(step, key, rec)
		}
		for k, v := range m.Costs {
			costs[k] += v
		}
		in = m.Out
	}
	rec.Status, rec.Costs = Succeeded, costs
	if len(in) <= maxInlineOutput {
		rec.Output = in
	} else {
		rec.OutInMem = true
	}
	return r.finish(step, key, rec)
}

// outcomeOf is the step outcome matching a terminal item record.
func outcomeOf(rec *itemRecord) runtime.StepOutcome {
	switch rec.Status {
	case Succeeded:
		return runtime.Succeed(nil)
	case Cancelled:
		return runtime.CancelRun(rec.Error)
	}
	return runtime.Fail(rec.Error)
}

// finish stages rec, which commits with the step's terminating settlement.
func (r *Runner) finish(step *runtime.Step, key string, rec *itemRecord) (runtime.StepOutcome, error) {
	if len(rec.Costs) == 0 {
		rec.Costs = nil
	}
	rec.FinishMs = r.q.Clock().Now().UnixMilli()
	v, err := encode(rec)
	if err == nil {
		err = step.Effects.Put(key, v)
	}
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("bulk: stage the record of item %s: %w", step.RunID, err))
	}
	return outcomeOf(rec), nil
}

// memoCosts sums the costs of the phases memoized in m. Cost: one GET per phase.
func (r *Runner) memoCosts(ctx context.Context, m *memo.Memo) (map[string]int64, error) {
	var costs map[string]int64
	for _, ph := range r.pipe.Phases {
		b, found, err := m.Get(ctx, memoKey(ph.Name))
		if err != nil {
			return nil, err
		}
		var pm phaseMemo
		if !found || decode("phase memo", b, &pm) != nil {
			continue
		}
		for k, v := range pm.Costs {
			if costs == nil {
				costs = map[string]int64{}
			}
			costs[k] += v
		}
	}
	return costs, nil
}

// hook records terminations the item's step did not decide, folds every
// item's record into the batch aggregate and applies the threshold.
type hook struct{ r *Runner }

func (h hook) Observes(o *runstate.Outcome) bool { return o.Headers[HeaderBatch] != "" }

func (h hook) OnTermination(ctx context.Context, o *runstate.Outcome, _ *runtime.TerminalEffects) error {
	r := h.r
	batch, i, gen, err := itemOf(o.Headers)
	if err != nil {
		return runtime.Permanent(err)
	}
	key := r.itemKey(batch, i)
	b, err := r.kvGet(ctx, key)
	if err != nil {
		return err
	}
	var cur *itemRecord
	if b != nil {
		if cur, err = decodeItem(b); err != nil {
			r.log.Warn("replacing a corrupt item record", "batch", batch, "item", i, "err", err)
		}
	}
	if cur != nil && cur.Gen > gen {
		return nil // the notification of a generation that was replayed since
	}
	if cur == nil || !cur.Status.Terminal() {
		// Cancelled from outside or dead-lettered by the queue: the step
		// staged nothing. Record it now, only if the record is still the
		// one read, so a redelivery or a race changes nothing.
		rec := &itemRecord{Gen: gen, Status: statusOf(o.Status), Error: o.Error, FinishMs: o.FinishedAt.UnixMilli()}
		if cur != nil {
			rec.Input = cur.Input
		}
		if rec.Costs, err = r.memoCosts(ctx, r.rt.MemoStore().Step(o.RunID, 0)); err != nil {
			return err
		}
		v, err := encode(rec)
		if err != nil {
			return runtime.Permanent(err)
		}
		ok, err := r.q.KVCompareAndPut(ctx, key, b, v)
		if err != nil {
			return fmt.Errorf("bulk: record item %s: %w", o.RunID, err)
		}
		if !ok {
			return fmt.Errorf("bulk: item record of %s changed while being recorded; retrying", o.RunID)
		}
		cur = rec
	}
	if err := r.fold(ctx, batch, i, cur); err != nil {
		return err
	}
	if r.hookFault != nil {
		return r.hookFault(o.RunID)
	}
	return nil
}

func statusOf(s runstate.TerminalStatus) Status {
	switch s {
	case runstate.Succeeded:
		return Succeeded
	case runstate.Cancelled:
		return Cancelled
	}
	return Failed
}

// fold applies a committed item record to the batch aggregate and stops
// the batch when the threshold is crossed.
func (r *Runner) fold(ctx context.Context, batch string, i int, rec *itemRecord) error {
	r.mu.Lock()
	st, err := r.state(ctx, batch)
	if err != nil || st == nil {
		r.mu.Unlock()
		if err == nil {
			r.log.Warn("notification of an item without a batch record", "batch", batch, "item", i)
		}
		return err
	}
	st.apply(i, rec)
	stop, reason := false, ""
	if !st.meta.Stopped {
		stop, reason = st.meta.Threshold.exceeded(st.counts[Failed], st.counts[Succeeded])
	}
	r.mu.Unlock()
	if stop {
		return r.stop(ctx, batch, reason)
	}
	return nil
}

// stop marks batch stopped durably, then cancels its running items; its
// pending items cancel themselves when they are delivered.
func (r *Runner) stop(ctx context.Context, batch, reason string) error {
	r.mu.Lock()
	st := r.batches[batch]
	if st == nil || st.meta.Stopped {
		r.mu.Unlock()
		return nil
	}
	meta := *st.meta
	meta.Stopped, meta.StopReason = true, reason
	b, err := encode(&meta)
	if err == nil {
		err = r.q.KVPut(ctx, r.metaKey(batch), b)
	}
	if err != nil {
		r.mu.Unlock()
		return fmt.Errorf("bulk: stop batch %s: %w", batch, err)
	}
	st.meta = &meta
	close(st.changed)
	st.changed = make(chan struct{})
	var running []string
	for id := range r.running {
		if strings.HasPrefix(id, batch+".") {
			running = append(running, id)
		}
	}
	r.mu.Unlock()
	r.log.Warn("batch stopped by its failure threshold", "batch", batch, "reason", reason, "cancelling", len(running))
	for _, id := range running {
		if _, err := r.rt.Cancel(ctx, id); err != nil {
			r.log.Warn("cancelling a running item failed; it finishes on its own", "run", id, "err", err)
		}
	}
	return nil
}

// Result is one line of WriteResults.
type Result struct {
	Index  int    `json:"index"`
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	// Output is the item's result when it is JSON; OutputBase64 when not.
	Output       json.RawMessage  `json:"output,omitempty"`
	OutputBase64 string           `json:"output_base64,omitempty"`
	Error        string           `json:"error,omitempty"`
	Costs        map[string]int64 `json:"costs,omitempty"`
	Attempts     int              `json:"attempts,omitempty"`
}

// WriteResults streams the finished items of batchID to w as JSON lines
// in index order, keeping those whose status is in only (all finished items
// when empty), and returns how many it wrote. Cost: memory reads, plus one
// GET per output too large to be kept in its record.
func (r *Runner) WriteResults(ctx context.Context, batchID string, w io.Writer, only ...Status) (int, error) {
	if _, err := r.Progress(ctx, batchID); err != nil {
		return 0, err
	}
	enc := json.NewEncoder(w)
	n := 0
	err := r.scan(ctx, batchID, func(i int, rec *itemRecord) error {
		if !rec.Status.Terminal() || len(only) > 0 && !bytes.Contains(statusBytes(only), []byte{byte(rec.Status)}) {
			return nil
		}
		res := Result{Index: i, RunID: RunID(batchID, i), Status: rec.Status.String(), Error: rec.Error,
			Costs: rec.Costs, Attempts: rec.Attempts}
		out := rec.Output
		if rec.OutInMem {
			last := r.pipe.Phases[len(r.pipe.Phases)-1].Name
			b, found, err := r.rt.MemoStore().Step(res.RunID, 0).Get(ctx, memoKey(last))
			if err != nil {
				return fmt.Errorf("bulk: read the output of item %d: %w", i, err)
			}
			var pm phaseMemo
			if found && decode("phase memo", b, &pm) == nil {
				out = pm.Out
			} else {
				res.Error = "output no longer available (memo entry removed)"
			}
		}
		if len(out) > 0 {
			if json.Valid(out) {
				res.Output = out
			} else {
				res.OutputBase64 = base64.StdEncoding.EncodeToString(out)
			}
		}
		if err := enc.Encode(&res); err != nil {
			return fmt.Errorf("bulk: write results of batch %s: %w", batchID, err)
		}
		n++
		return nil
	})
	return n, err
}

func statusBytes(ss []Status) []byte {
	b := make([]byte, len(ss))
	for i, s := range ss {
		b[i] = byte(s)
	}
	return b
}
