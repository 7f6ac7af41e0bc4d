package interpreter

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// redriveSeq is the history place of a redrive's record: after every
// step of the runtime step the run ended at (at most 101 fold into one),
// before the next runtime step's.
const redriveSeq = 999

var _ runtime.Redriver = (*Interpreter)(nil)

// RedriveOptions shape a redrive (Interpreter.Redrive, RedriveArg).
type RedriveOptions struct {
	// Definition, when set, continues the run on this revision of its
	// workflow. It must be compatible: every step the run completed and
	// the step it resumes at exist in it with the same kind (action);
	// else the redrive is refused with an *IncompatibleError listing the
	// differences.
	Definition *Workflow
	// Skip, when set, must name the step the run ended at: instead of
	// running it again, it is recorded as done with Output (outcome
	// OutcomeSkipped) and the run routes on from it as the step would
	// (its set, switch and next).
	Skip string
	// Output is the skipped step's output (a JSON value; nil is null).
	Output any
}

// IncompatibleError refuses a redrive on a definition that lacks, or
// changed the kind of, a step the run completed or resumes at.
type IncompatibleError struct {
	RunID       string
	Differences []string
}

// Unwrap makes the error a runtime.ErrNotRedrivable.
func (e *IncompatibleError) Unwrap() error { return runtime.ErrNotRedrivable }

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("interpreter: run %s cannot continue on the new definition: %s", e.RunID, strings.Join(e.Differences, "; "))
}

// redriveArg is RedriveOptions as Runtime.Redrive carries it to
// PrepareRedrive (also through another process's inbox).
type redriveArg struct {
	Def     string `msgpack:"d,omitempty"`
	Pin     *pin   `msgpack:"p,omitempty"`
	Name    string `msgpack:"w,omitempty"`
	Skip    string `msgpack:"s,omitempty"`
	Output  any    `msgpack:"o"`
	Version int    `msgpack:"v"`
}

// RedriveArg pins opts.Definition (and every workflow it calls) in store
// and returns opts encoded for runtime.Runtime.Redrive, whose runner
// (the Interpreter, in the store's writer) applies them: what a process
// that is not the writer sends. Cost: PrepareRun's for the definition.
func RedriveArg(ctx context.Context, store objstore.Store, opts RedriveOptions) ([]byte, error) {
	return redriveArgWith(ctx, store, nil, opts)
}

func redriveArgWith(ctx context.Context, store objstore.Store, pins *pinSet, opts RedriveOptions) ([]byte, error) {
	a := redriveArg{Skip: opts.Skip, Version: 1}
	if opts.Skip != "" {
		p, err := plain(opts.Output)
		if err != nil {
			return nil, fmt.Errorf("%w: skip output: %v", dsl.ErrInputInvalid, err)
		}
		if err := checkInputSize(p); err != nil {
			return nil, err
		}
		a.Output = p
	}
	if w := opts.Definition; w != nil {
		if err := pinDefinitions(ctx, store, pins, w); err != nil {
			return nil, err
		}
		a.Def, a.Name = w.pin.Hash, w.Main.Name
		if len(w.pin.Calls) > 0 {
			a.Pin = w.pin
		}
	}
	return encodeMsgpack(&a)
}

// Redrive continues runID, which failed or was cancelled, in place (see
// runtime.Runtime.Redrive and PrepareRedrive): the step it ended at runs
// again with a fresh retry budget, or is skipped, with every completed
// step's output and the variables as they were.
func (it *Interpreter) Redrive(ctx context.Context, runID string, opts RedriveOptions) (runtime.SubmitOutcome, error) {
	arg, err := redriveArgWith(ctx, it.store, &it.pins, opts)
	if err != nil {
		return runtime.SubmitOutcome{}, err
	}
	if w := opts.Definition; w != nil {
		for _, wf := range w.all {
			it.cache(wf)
		}
	}
	return it.rt.Redrive(ctx, runID, arg, nil)
}

// PrepareRedrive implements runtime.Redriver: it turns the state a run
// ended in into the input of the step it resumes at. The step is entered
// afresh (attempt 1, its wait and child forgotten, a new visit: memo
// entries of the failed visit are not reused); on a new definition
// (checked compatible) at that step's place in it; with Skip, recorded as
// skipped. A child run (started by a call step) is refused: its parent
// already received its end, and redriving the parent starts the child
// anew. The redrive's history record lands in the same commit.
func (it *Interpreter) PrepareRedrive(ctx context.Context, r *runtime.RedriveSpec, argBytes []byte) error {
	var a redriveArg
	if len(argBytes) > 0 {
		if err := decodeMsgpack(argBytes, &a); err != nil {
			return fmt.Errorf("%w: run %s: the redrive's options: %w", runtime.ErrNotRedrivable, r.RunID, err)
		}
	}
	if r.Headers[headerParent] != "" {
		return fmt.Errorf("%w: run %s is a child run (a call step of its parent started it) and its parent already received its end; redrive the parent instead: its call step starts the child anew",
			runtime.ErrNotRedrivable, r.RunID)
	}
	st, err := decodeState(r.Payload)
	if err != nil {
		return fmt.Errorf("%w: run %s: its last state: %w", runtime.ErrNotRedrivable, r.RunID, err)
	}
	d, err := it.definition(ctx, st.Def)
	if errors.Is(err, ErrDefinitionMissing) || errors.Is(err, ErrCorruptState) {
		return fmt.Errorf("%w: run %s: %w", runtime.ErrNotRedrivable, r.RunID, err)
	}
	if err != nil {
		return fmt.Errorf("redrive run %s: %w", r.RunID, err)
	}
	at, err := st.current(d.wf)
	if err != nil {
		return fmt.Errorf("%w: run %s: %w", runtime.ErrNotRedrivable, r.RunID, err)
	}
	if a.Skip != "" && a.Skip != at.ID {
		return fmt.Errorf("%w: run %s %s at step %q, not %q: only the step a run ended at can be skipped",
			runtime.ErrNotRedrivable, r.RunID, r.Status.State(), at.ID, a.Skip)
	}
	def, wf := st.Def, d.wf
	if a.Def != "" && a.Def != st.Def {
		nd, err := it.definition(ctx, a.Def)
		if errors.Is(err, ErrDefinitionMissing) || errors.Is(err, ErrCorruptState) {
			return fmt.Errorf("%w: run %s: new definition: %w", runtime.ErrNotRedrivable, r.RunID, err)
		}
		if err != nil {
			return fmt.Errorf("redrive run %s: new definition: %w", r.RunID, err)
		}
		idx, err := it.compatible(ctx, r.RunID, d.wf, nd.wf, at)
		if err != nil {
			return err
		}
		st.Def, st.Pin, st.Step, wf = a.Def, a.Pin, idx, nd.wf
		if ns := wf.Step(at.ID); ns != nil && ns.Block != nil {
			st.Block = ns.Block.Path
		}
		r.Headers[HeaderDefinition] = a.Def
		if a.Name != "" {
			r.Headers[HeaderWorkflow] = a.Name
		}
		def = a.Def
	}
	r.Headers[headerRedriveAt] = at.ID
	next := r.Step + 1
	st.Attempt, st.Visit = 1, next
	st.resetWait()
	if wf.Timeout > 0 && st.End == nil {
		// A redrive gives the run its timeout again, from now: the
		// deadline that ended it has passed.
		st.RunDeadline = it.now().Add(wf.Timeout).UnixMilli()
	}
	if a.Skip != "" {
		st.Skip = &skipRecord{Output: a.Output}
	}
	if r.Payload, err = st.encode(); err != nil {
		return err
	}
	now := it.now().UnixMilli()
	out := map[string]any{"ended": r.Status.State().String(), "definition": def}
	if r.Error != "" {
		out["error"] = r.Error
	}
	if a.Skip != "" {
		out["skip"] = a.Skip
	}
	h := HistoryRecord{N: r.Step, Seq: redriveSeq, Step: at.ID, Kind: "redrive", Attempt: 1, Start: now, End: now,
		Outcome: OutcomeRedriven, Output: out, Next: at.ID}
	b, err := encodeMsgpack(&h)
	if err != nil {
		return err
	}
	return r.Effects.Put(histKey(r.RunID, r.Step, redriveSeq), b)
}

// compatible checks that nw holds every step the run completed and the
// step it resumes at, each with its kind in old, and returns the index
// of the resumed step in nw.
func (it *Interpreter) compatible(ctx context.Context, runID string, old, nw *dsl.Workflow, at *dsl.Step) (int, error) {
	recs, err := history(ctx, WithSealed(it.q, it.rt.Inspector()), it.store, runID)
	if err != nil {
		return 0, fmt.Errorf("redrive run %s: %w", runID, err)
	}
	need := []string{at.ID}
	seen := map[string]bool{at.ID: true}
	for _, h := range recs {
		switch h.Outcome {
		case OutcomeOK, OutcomeCaught, OutcomeSkipped:
			if !seen[h.Step] && old.Step(h.Step) != nil {
				seen[h.Step] = true
				need = append(need, h.Step)
			}
		}
	}
	var diffs []string
	for _, id := range need {
		s, n := old.Step(id), nw.Step(id)
		switch {
		case n == nil:
			diffs = append(diffs, fmt.Sprintf("step %q is missing", id))
		case kindName(s) != kindName(n):
			diffs = append(diffs, fmt.Sprintf("step %q is %s in the run, %s in the new definition", id, kindName(s), kindName(n)))
		}
	}
	if len(diffs) > 0 {
		return 0, &IncompatibleError{RunID: runID, Differences: diffs}
	}
	idx, _ := nw.Index(at.ID)
	return idx, nil
}

// skipRecord is a step a redrive skips: state.Skip.
type skipRecord struct {
	Output any `msgpack:"o"`
}

// skip records the current step as done with the output a redrive gave
// and routes on from it.
func (x *exec) skip(ctx context.Context, env *dsl.Env, output any) (runtime.StepOutcome, error) {
	p := x.red.value(output)
	if err := x.putOutput(ctx, p); err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	x.hist.Output = p
	x.skipped = true
	return x.after(ctx, env, p, x.s.ID)
}
