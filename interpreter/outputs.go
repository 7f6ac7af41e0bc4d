package interpreter

import (
	"context"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// env builds the expression environment of the current step.
func (x *exec) env(ctx context.Context) (*dsl.Env, error) {
	steps := map[string]dsl.StepState{}
	idx := x.s.Index
	if x.d.all[idx] {
		after := ""
		prefix := kvOut + x.rs.RunID + "/"
		for {
			page, err := x.it.q.KVScan(ctx, prefix, after, 256)
			if err != nil {
				return nil, fmt.Errorf("interpreter: read outputs of run %s: %w", x.rs.RunID, err)
			}
			for _, e := range page {
				v, err := x.decodeOutput(ctx, e.Value)
				if err != nil {
					return nil, err
				}
				steps[e.Key[len(prefix):]] = dsl.StepState{Output: v}
			}
			if len(page) < 256 {
				break
			}
			after = page[len(page)-1].Key
		}
		for id, b := range x.ch.outputs {
			v, err := x.decodeOutput(ctx, b)
			if err != nil {
				return nil, err
			}
			steps[id] = dsl.StepState{Output: v}
		}
	} else {
		for _, id := range x.d.refs[idx] {
			b, found, err := x.outputRecord(ctx, id)
			if err != nil {
				return nil, err
			}
			if !found {
				continue
			}
			v, err := x.decodeOutput(ctx, b)
			if err != nil {
				return nil, err
			}
			steps[id] = dsl.StepState{Output: v}
		}
	}
	return &dsl.Env{
		Input: x.st.Input, Vars: x.st.Vars, Steps: steps,
		Run: dsl.RunInfo{ID: x.rs.RunID, Workflow: x.wf.Name, Step: x.s.ID, Attempt: max(x.st.Attempt, 1)},
		Now: x.it.now, UUID: x.it.uuid,
	}, nil
}

func (x *exec) decodeOutput(ctx context.Context, b []byte) (any, error) {
	var rec outputRecord
	if err := decodeMsgpack(b, &rec); err != nil {
		return nil, err
	}
	if rec.Ref != "" {
		return readOutputObject(ctx, x.it.store, rec.Ref)
	}
	return rec.Output, nil
}

// loadOutput returns the recorded output of step id ("" and unknown: nil).
func (x *exec) loadOutput(ctx context.Context, id string) (any, error) {
	if id == "" {
		return nil, nil
	}
	b, found, err := x.outputRecord(ctx, id)
	if err != nil || !found {
		return nil, err
	}
	return x.decodeOutput(ctx, b)
}

// outputRecord returns the output record of step id: the one staged
// earlier in this delivery, else the committed one.
func (x *exec) outputRecord(ctx context.Context, id string) ([]byte, bool, error) {
	if b, ok := x.ch.stagedOutput(id); ok {
		return b, true, nil
	}
	b, found, err := x.rs.KV.Get(ctx, outKey(x.rs.RunID, id))
	if err != nil {
		return nil, false, fmt.Errorf("interpreter: read output of step %s: %w", id, err)
	}
	return b, found, nil
}

// putOutput stages the step's output (already plain and redacted) as a KV
// effect, offloading a large one to its own object first.
func (x *exec) putOutput(ctx context.Context, v any) error {
	rec := outputRecord{N: x.rs.Number, Output: v}
	b, err := encodeMsgpack(&rec)
	if err != nil {
		return err
	}
	if len(b) > InlineOutputLimit {
		obj, err := encodeMsgpack(v)
		if err != nil {
			return err
		}
		key := outputObject(x.rs.RunID, x.rs.Number)
		x.it.noteDirty(x.rs.RunID) // even if this attempt's commit never lands
		if _, err := x.it.store.Put(ctx, key, obj, objstore.PutOptions{}); err != nil {
			return fmt.Errorf("interpreter: store output of step %s: %w", x.s.ID, err)
		}
		rec = outputRecord{N: x.rs.Number, Ref: key}
		if b, err = encodeMsgpack(&rec); err != nil {
			return err
		}
		x.hist.OutputRef = key
	} else {
		x.hist.Output = v
	}
	if err := x.rs.Effects.Put(outKey(x.rs.RunID, x.s.ID), b); err != nil {
		return err
	}
	x.ch.stageOutput(x.s.ID, b)
	return nil
}

// finish stages the history record and reports the end of the step.
func (x *exec) finish(outcome, next string, e *dsl.ErrorInfo) error {
	end := x.it.now()
	x.hist.End, x.hist.Outcome, x.hist.Next, x.hist.Error = end.UnixMilli(), outcome, next, e
	b, err := encodeMsgpack(&x.hist)
	if err != nil {
		return err
	}
	if len(b) > storage.MaxKVValueSize/2 {
		x.hist.Output = nil
		if b, err = encodeMsgpack(&x.hist); err != nil {
			return err
		}
	}
	if err := x.rs.Effects.Put(histKey(x.rs.RunID, x.rs.Number, x.seq), b); err != nil {
		return err
	}
	switch outcome {
	case OutcomeWaiting:
	case OutcomeRetry:
		x.rs.AddTotal(TotalAttempts, 1)
		x.rs.AddTotal(TotalRetries, 1)
	default:
		x.rs.AddTotal(TotalAttempts, 1)
		x.rs.AddTotal(TotalSteps, 1)
	}
	began := x.start
	if x.st.Phase != phaseRun && x.st.Started > 0 {
		began = time.UnixMilli(x.st.Started)
	}
	ev := Event{Time: end, RunID: x.rs.RunID, Step: x.s.ID, Kind: "end", Attempt: x.hist.Attempt,
		Status: outcome, Elapsed: end.Sub(began), Waited: max(x.start.Sub(began), 0), Error: e, Next: next, Job: x.rs.JobID,
		Workflow: x.wf.Name, Action: stepAction(x.s), Number: x.rs.Number, Seq: x.seq, LLM: x.llm}
	// Reported once the history record and the transition are durable,
	// never before: a step shown complete never runs again. The
	// callbacks run in the order the chain's steps registered them, so
	// each step's end precedes the next step's start.
	start := x.foldedStart
	x.rs.OnDurable(func() {
		if start != nil {
			x.it.emit(*start)
		}
		x.it.emit(ev)
	})
	return nil
}

// moveTo returns the state that runs step idx next. Its visit starts at
// the next runtime step: an effectful step is never folded (fold.go), so
// it runs there; a pure one keys nothing by its visit.
func (x *exec) moveTo(idx int, prev string) *state {
	st := *x.st
	st.Step, st.Attempt, st.Visit, st.Prev = idx, 1, x.rs.Number+1, prev
	st.Phase, st.WaitKey, st.Child, st.Started, st.Deadline = phaseRun, "", "", 0, 0
	return &st
}
