package interpreter

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Forks. A fork is a new run that starts at a step of an earlier run
// (its origin) with the variables and step outputs exactly as they were
// just before the origin first reached that step. Neither the queue's
// step jobs (deleted once acknowledged) nor the outputs (the latest per
// step) keep that state, so the history records do: each record of a
// step that moved the run on carries the variables its set assigned
// (HistoryRecord.Set, only what changed), whether the attempt wrote the
// step's output record (Put; the output itself is the record's Output
// already) and the step the next `output` names (Prev); a run's first
// record carries what the run started from (RunStart: input, pinned
// definitions, initial variables, and a fork's copied outputs). The cost
// is the size of what a set assigns, once per step that assigns, and the
// input and initial variables once per run: no request, the records ride
// the settlements they always did. A run recorded before this (no
// Forkable mark), or one whose records had to drop it to fit, is refused
// with ErrNotForkable.

// ErrNotForkable is matched by the error of a fork of a run whose
// history does not hold what a fork needs.
var ErrNotForkable = errors.New("interpreter: run cannot be forked")

// runStart is what a run started from, kept on its first history record.
type runStart struct {
	Input any            `msgpack:"i"`
	Pin   *pin           `msgpack:"p"`
	Vars  map[string]any `msgpack:"v,omitempty"`
	// Outputs are a fork's inherited step outputs: the output records
	// (outputRecord encodings) its submission wrote, by step id.
	Outputs map[string][]byte `msgpack:"o,omitempty"`
	// Prev is the state's Prev at the fork's first step.
	Prev string `msgpack:"pv,omitempty"`
}

// recordStart puts on the history record what the run starts from when
// this is its first step: fresh runs after their initial variables, forks
// from their first payload (which no later payload carries).
func (x *exec) recordStart(first bool) {
	st := x.st
	switch {
	case first:
		p := st.Pin
		if p == nil {
			p = &pin{Hash: st.Def}
		}
		vars, _ := x.red.value(maps.Clone(st.Vars)).(map[string]any)
		x.hist.RunStart = &runStart{Input: st.Input, Pin: p, Vars: vars}
	case st.Start != nil:
		x.hist.RunStart = st.Start
		st.Start = nil
	}
}

// assigned returns the variables a set assigned, as they are now in vars.
func assigned(vars map[string]any, set []dsl.Assignment) map[string]any {
	if len(set) == 0 {
		return nil
	}
	out := make(map[string]any, len(set))
	for _, a := range set {
		out[a.Name] = vars[a.Name]
	}
	return out
}

// ForkPoint is the state of a run just before it first reached a step.
type ForkPoint struct {
	// Step is the step's id; Index its place in the origin's history
	// (the records before it are what the fork inherits).
	Step  string
	Index int
	Input any
	Vars  map[string]any
	// Outputs are the step outputs by step id.
	Outputs map[string]any
	prev    string
	pin     *pin
}

// FindForkPoint rebuilds, from a run's history (History), its state just
// before it first reached step at. It fails with ErrNotForkable when the
// history was recorded without what a fork needs, and names the steps
// the run did reach when it never reached at.
// A large output a fork inherited is read back from the fork's object
// (one GET each).
func FindForkPoint(ctx context.Context, store objstore.Store, runID string, recs []HistoryRecord, at string) (*ForkPoint, error) {
	idx := -1
	for i, h := range recs {
		if h.Step == at {
			idx = i
			break
		}
	}
	if idx < 0 {
		var reached []string
		seen := map[string]bool{}
		for _, h := range recs {
			if !seen[h.Step] {
				seen[h.Step] = true
				reached = append(reached, h.Step)
			}
		}
		return nil, fmt.Errorf("%w: run %s never reached step %q (it reached %v)", ErrNotForkable, runID, at, reached)
	}
	if len(recs) == 0 || recs[0].RunStart == nil {
		return nil, fmt.Errorf("%w: run %s was recorded without its start (by a tqw before forks, or its input and variables were too large to record); run it again instead", ErrNotForkable, runID)
	}
	for _, h := range recs[:idx+1] {
		if !h.Forkable {
			return nil, fmt.Errorf("%w: the history of run %s before step %q lacks what a fork needs (record %d of step %s was written by a tqw before forks, or had to drop it to fit)", ErrNotForkable, runID, at, h.N, h.Step)
		}
	}
	s := recs[0].RunStart
	fp := &ForkPoint{Step: at, Index: idx, Input: s.Input, Vars: maps.Clone(s.Vars), Outputs: map[string]any{}, prev: s.Prev, pin: s.Pin}
	if fp.Vars == nil {
		fp.Vars = map[string]any{}
	}
	for id, b := range s.Outputs {
		var rec outputRecord
		if err := decodeMsgpack(b, &rec); err != nil {
			return nil, fmt.Errorf("run %s: inherited output of step %s: %w", runID, id, err)
		}
		if rec.Ref != "" {
			v, err := readOutputObject(ctx, store, rec.Ref)
			if err != nil {
				return nil, err
			}
			rec.Output = v
		}
		fp.Outputs[id] = rec.Output
	}
	for _, h := range recs[:idx] {
		maps.Copy(fp.Vars, h.Set)
		if h.Put {
			fp.Outputs[h.Step] = h.Output
		}
	}
	if idx > 0 {
		fp.prev = recs[idx-1].Prev
	}
	return fp, nil
}

// ForkOptions change what a fork runs.
type ForkOptions struct {
	// Workflow replaces the origin's pinned definition (nil: the
	// origin's); it must have the step the fork starts at.
	Workflow *Workflow
	// Input replaces the origin's input (nil: the origin's); it is
	// checked against the input schema.
	Input any
	// RunID names the fork ("": a fresh ULID). Submitting the same
	// fork again under its id is a no-op, as any submission is.
	RunID string
	// Reader, when set, refuses a RunID that names a finished run still
	// retained (ErrRunIDReused), as PrepareRun's does; a nil Reader skips
	// the check (the fork then fails at its first step, writing nothing).
	Reader runtime.StateReader
}

// PrepareFork returns the RunSpec of a fork of run origin at fp (from
// FindForkPoint over the origin's history), for Runtime.Submit or a
// remote.Client. The spec writes, in the submission commit, the inherited
// step outputs; outputs over InlineOutputLimit are copied first to
// objects of the fork (one PUT each), so the fork keeps nothing of its
// origin's and outlives it. Cost: besides those PUTs, one GET for the
// origin's definition on a cache miss and, with opts.Workflow, what
// PrepareRun costs for its definitions. Nothing is written on error.
func (v *View) PrepareFork(ctx context.Context, origin string, fp *ForkPoint, opts ForkOptions) (runtime.RunSpec, error) {
	f, err := v.checkFork(ctx, origin, fp, opts)
	if err != nil {
		return runtime.RunSpec{}, err
	}
	if opts.Workflow != nil {
		if err := pinDefinitions(ctx, v.store, &v.pins, opts.Workflow); err != nil {
			return runtime.RunSpec{}, err
		}
	}
	p, wf, idx, input, runID := f.pin, f.wf, f.idx, f.input, f.runID
	writes := map[string][]byte{}
	inherited := map[string][]byte{}
	for id, out := range fp.Outputs {
		rec := outputRecord{N: 0, Output: out}
		b, err := encodeMsgpack(&rec)
		if err != nil {
			return runtime.RunSpec{}, err
		}
		if len(b) > InlineOutputLimit {
			obj, err := encodeMsgpack(out)
			if err != nil {
				return runtime.RunSpec{}, err
			}
			key := outputObjectKey(runID, 0, obj)
			if _, err := v.store.Put(ctx, key, obj, objstore.PutOptions{}); err != nil {
				return runtime.RunSpec{}, fmt.Errorf("interpreter: copy the output of step %s for the fork: %w", id, err)
			}
			if b, err = encodeMsgpack(&outputRecord{N: 0, Ref: key}); err != nil {
				return runtime.RunSpec{}, err
			}
		}
		writes[outKey(runID, id)] = b
		inherited[id] = b
	}
	st := &state{V: stateVersion, Def: p.Hash, Input: input, Vars: fp.Vars, Init: true, Step: idx, Attempt: 1, Prev: fp.prev}
	if len(p.Calls) > 0 {
		st.Pin = p
	}
	st.Start = &runStart{Input: input, Pin: p, Vars: fp.Vars, Prev: fp.prev, Outputs: inherited}
	payload, err := st.encode()
	if err != nil {
		return runtime.RunSpec{}, err
	}
	spec := runtime.RunSpec{RunID: runID, Input: payload,
		Headers: map[string]string{HeaderWorkflow: wf.Name, HeaderDefinition: p.Hash, HeaderForkFrom: origin, HeaderForkAt: fp.Step},
		Labels:  map[string]string{LabelWorkflow: wf.Name}, KVWrites: writes}
	stampTrace(ctx, &spec)
	return spec, nil
}

// CheckFork checks what PrepareFork checks (the step, the input, the id)
// without writing anything, so a command refuses a fork before it opens
// the store as its writer. Cost: one GET for the origin's definition on
// a cache miss.
func (v *View) CheckFork(ctx context.Context, origin string, fp *ForkPoint, opts ForkOptions) error {
	_, err := v.checkFork(ctx, origin, fp, opts)
	return err
}

// checkedFork is what checkFork found.
type checkedFork struct {
	pin   *pin
	wf    *dsl.Workflow
	idx   int
	input any
	runID string
}

func (v *View) checkFork(ctx context.Context, origin string, fp *ForkPoint, opts ForkOptions) (*checkedFork, error) {
	f := &checkedFork{}
	if opts.Workflow != nil {
		f.pin, f.wf = opts.Workflow.pin, opts.Workflow.Main
	} else {
		d, err := v.definition(ctx, fp.pin.Hash)
		if err != nil {
			return nil, fmt.Errorf("the definition of run %s: %w", origin, err)
		}
		f.pin, f.wf = fp.pin, d.wf
	}
	idx, ok := f.wf.Index(fp.Step)
	if !ok {
		return nil, fmt.Errorf("%w: workflow %s has no step %q to start the fork at", ErrNotForkable, f.wf.Name, fp.Step)
	}
	f.idx, f.input = idx, fp.Input
	if opts.Input != nil {
		in, err := plain(opts.Input)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", dsl.ErrInputInvalid, err)
		}
		f.input = in
	}
	if err := checkInputSize(f.input); err != nil {
		return nil, err
	}
	if err := validateInput(f.wf, f.input); err != nil {
		return nil, err
	}
	f.runID = opts.RunID
	if f.runID == "" {
		f.runID = ulid.Make().String()
	} else if err := runstate.ValidateRunID(f.runID); err != nil {
		return nil, err
	}
	if f.runID == origin {
		return nil, fmt.Errorf("%w: a fork needs an id of its own, not its origin's", runstate.ErrInvalidRunID)
	}
	if opts.RunID != "" && opts.Reader != nil {
		if err := checkReuse(ctx, runtime.NewInspector(opts.Reader), opts.Reader, f.runID); err != nil {
			return nil, err
		}
	}
	return f, nil
}
