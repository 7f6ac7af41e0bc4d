package interpreter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/repair"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// ErrDamagedObject reports a stored object (a large step output, a
// definition) whose bytes are not what was written: the checksum its name
// records does not match, or it does not decode. The error names the
// object's key; it also matches ErrCorruptState.
var ErrDamagedObject = errors.New("interpreter: stored object damaged")

// outputObjectKey names the object of a large output of runtime step n:
// its key ends in the SHA-256 of obj, so the record that references it
// (an output record, a history record) carries the checksum without a
// new field, and old records, whose keys end in the step number, still read.
func outputObjectKey(runID string, n int, obj []byte) string {
	sum := sha256.Sum256(obj)
	return outputObject(runID, n) + "." + hex.EncodeToString(sum[:])
}

// outputObjectSum returns the hex SHA-256 the key of a large output
// names, "" for a key written before keys named one.
func outputObjectSum(key string) string {
	i := strings.LastIndexByte(key, '.')
	if i < 0 || len(key)-i-1 != sha256.Size*2 || strings.Contains(key[i:], "/") {
		return ""
	}
	return key[i+1:]
}

// damaged is the error of object key whose bytes fail a check.
func damaged(key string, why error) error {
	return fmt.Errorf("%w: %s: %v (%w)", ErrDamagedObject, key, why, ErrCorruptState)
}

// checkOutputObject verifies b, the bytes of the large output at key,
// against the checksum key names (none for an old key) and decodes it;
// the error says what is wrong, without the key.
func checkOutputObject(key string, b []byte) (any, error) {
	if want := outputObjectSum(key); want != "" {
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != want {
			return nil, fmt.Errorf("its %d bytes do not match the SHA-256 its name records", len(b))
		}
	}
	var v any
	if err := decodeMsgpack(b, &v); err != nil {
		return nil, fmt.Errorf("it does not decode: %w", err)
	}
	return v, nil
}

// readOutputObject reads and verifies the large output at key. Cost: one GET.
func readOutputObject(ctx context.Context, store objstore.Store, key string) (any, error) {
	b, _, err := store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, fmt.Errorf("%w: output object %s is missing", ErrCorruptState, key)
	}
	if err != nil {
		return nil, fmt.Errorf("interpreter: read output %s: %w", key, err)
	}
	v, err := checkOutputObject(key, b)
	if err != nil {
		return nil, damaged(key, err)
	}
	return v, nil
}

// env builds the expression environment of the current step.
func (x *exec) env(ctx context.Context) (*dsl.Env, error) {
	steps, err := x.stepOutputs(ctx, x.d.refs[x.s], x.d.all[x.s])
	if err != nil {
		return nil, err
	}
	env := &dsl.Env{
		Input: x.st.Input, Vars: x.st.Vars, Steps: steps,
		Run: dsl.RunInfo{ID: x.rs.RunID, Workflow: x.wf.Name, Step: x.s.ID, Attempt: max(x.st.Attempt, 1)},
		Now: x.it.now, UUID: x.it.uuid,
	}
	if it := x.st.Item; it != nil {
		env.Item, env.Index = it.V, it.I
	}
	return env, nil
}

// stepOutputs reads the outputs of the steps ids (every step's, when
// all: an expression reads steps dynamically), those staged earlier in
// this delivery first.
func (x *exec) stepOutputs(ctx context.Context, ids []string, all bool) (map[string]dsl.StepState, error) {
	steps := map[string]dsl.StepState{}
	if all {
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
		return steps, nil
	}
	for _, id := range ids {
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
	return steps, nil
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
	b, found, err := x.rs.KV.Get(ctx, outKey(x.outputRun(id), id))
	if err != nil {
		return nil, false, fmt.Errorf("interpreter: read output of step %s: %w", id, err)
	}
	return b, found, nil
}

// putOutput stages the step's output (already plain and redacted) as a KV
// effect, offloading a large one to its own object first.
func (x *exec) putOutput(ctx context.Context, v any) error {
	b, ref, err := x.outputRecordOf(ctx, v, "output")
	if err != nil {
		return err
	}
	if ref != "" {
		x.hist.OutputRef = ref
	} else {
		x.hist.Output = v
	}
	if err := x.rs.Effects.Put(outKey(x.rs.RunID, x.s.ID), b); err != nil {
		return err
	}
	x.hist.Put = true
	x.ch.stageOutput(x.s.ID, b)
	return nil
}

// outputRecordOf encodes v as an output record: inline when it is small,
// else a reference to an object of its own (ref, its key), written first
// (what names the value, for the error).
func (x *exec) outputRecordOf(ctx context.Context, v any, what string) (b []byte, ref string, err error) {
	b, err = encodeMsgpack(&outputRecord{N: x.rs.Number, Output: v})
	if err != nil || len(b) <= InlineOutputLimit {
		return b, "", err
	}
	obj, err := encodeMsgpack(v)
	if err != nil {
		return nil, "", err
	}
	ref = outputObjectKey(x.rs.RunID, x.rs.Number, obj)
	x.it.noteDirty(x.rs.RunID) // even if this attempt's commit never lands
	if _, err := x.it.store.Put(ctx, ref, obj, objstore.PutOptions{}); err != nil {
		return nil, "", fmt.Errorf("interpreter: store %s of step %s: %w", what, x.s.ID, err)
	}
	b, err = encodeMsgpack(&outputRecord{N: x.rs.Number, Ref: ref})
	return b, ref, err
}

// finish stages the history record and reports the end of the step.
func (x *exec) finish(outcome, next string, e *dsl.ErrorInfo) error {
	end := x.it.now()
	if x.skipped && outcome == OutcomeOK {
		outcome = OutcomeSkipped
	}
	x.hist.End, x.hist.Outcome, x.hist.Next, x.hist.Error = end.UnixMilli(), outcome, next, e
	x.hist.Forkable = true
	b, err := encodeMsgpack(&x.hist)
	if err != nil {
		return err
	}
	if len(b) > storage.MaxKVValueSize/2 {
		if x.hist.Put && x.hist.OutputRef == "" {
			x.hist.Forkable = false // the output a fork needs is gone
		}
		x.hist.Output = nil
		if b, err = encodeMsgpack(&x.hist); err != nil {
			return err
		}
	}
	if len(b) > storage.MaxKVValueSize/2 {
		// What a fork needs does not fit: this run cannot be forked
		// past here (fork.go says so).
		x.hist.Set, x.hist.RunStart, x.hist.Forkable = nil, nil, false
		if b, err = encodeMsgpack(&x.hist); err != nil {
			return err
		}
	}
	if err := x.rs.Effects.Put(histKey(x.rs.RunID, x.rs.Number, x.seq), b); err != nil {
		return err
	}
	x.trackVisit(x.ch.ctx)
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
	if x.it.events != nil {
		ev.Vars = maps.Clone(x.st.Vars) // a later step's set must not show in this step's event
	}
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
	st.resetWait()
	return &st
}

// RunLister lists runs; *runtime.Inspector implements it.
type RunLister interface {
	ListRuns(ctx context.Context, opts runstate.ListOptions) ([]runstate.Status, error)
}

// CheckObjects verifies the objects the interpreter keeps beside the kv
// (definitions and large step outputs), read-only, and reports each
// damaged or missing one: it lists both prefixes and reads every object,
// checking it against the checksum its name records, then walks every run
// runs lists (active and sealed), reading its history from r, and reports
// a definition or a large output a run references that is not there, and
// a run whose records do not read (a sealed segment damaged or missing).
// Cost: one LIST per 1,000 objects of each prefix, one GET per object,
// plus one listing of the runs and one history read per run. The error is
// for a check that could not be done.
func CheckObjects(ctx context.Context, store objstore.Store, r Reader, runs RunLister) ([]repair.Problem, error) {
	var problems []repair.Problem
	seen := map[string]bool{}
	check := func(prefix string, verify func(key string, b []byte) error) error {
		after := ""
		for {
			page, err := store.List(ctx, prefix, after, 1000)
			if err != nil {
				return fmt.Errorf("interpreter: list %s: %w", prefix, err)
			}
			for _, o := range page {
				seen[o.Key] = true
				b, _, err := store.Get(ctx, o.Key)
				if errors.Is(err, objstore.ErrNotExist) {
					continue // deleted since the listing (retention)
				}
				if err != nil {
					return fmt.Errorf("interpreter: read %s: %w", o.Key, err)
				}
				if err := verify(o.Key, b); err != nil {
					problems = append(problems, repair.Problem{Object: o.Key, Kind: repair.ProblemDamaged, Detail: err.Error()})
				}
			}
			if len(page) < 1000 {
				return nil
			}
			after = page[len(page)-1].Key
		}
	}
	if err := check(defsPrefix, func(key string, b []byte) error {
		return checkDefinition(strings.TrimPrefix(key, defsPrefix), b)
	}); err != nil {
		return nil, err
	}
	if err := check(outputsPrefix, func(key string, b []byte) error {
		_, err := checkOutputObject(key, b)
		return err
	}); err != nil {
		return nil, err
	}
	missing := func(key, detail string) {
		if !seen[key] {
			seen[key] = true // one problem per object
			problems = append(problems, repair.Problem{Object: key, Kind: repair.ProblemMissing, Detail: detail})
		}
	}
	opts := runstate.ListOptions{Limit: 1000}
	for {
		page, err := runs.ListRuns(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("interpreter: list runs: %w", err)
		}
		for _, st := range page {
			if h := st.Headers[HeaderDefinition]; h != "" {
				missing(defKey(h), fmt.Sprintf("the definition of run %s is not in the store", st.RunID))
			}
			recs, err := history(ctx, r, nil, st.RunID)
			if err != nil {
				problems = append(problems, repair.Problem{Object: "run " + st.RunID, Kind: repair.ProblemDamaged,
					Detail: fmt.Sprintf("its records do not read: %v", err)})
				continue
			}
			for _, h := range recs {
				if h.OutputRef != "" {
					missing(h.OutputRef, fmt.Sprintf("the output of step %s of run %s is not in the store", h.Step, st.RunID))
				}
			}
		}
		if len(page) == 0 {
			return problems, nil
		}
		opts.After = page[len(page)-1].RunID
	}
}
