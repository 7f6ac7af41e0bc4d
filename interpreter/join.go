package interpreter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Joins. A parallel branch or a map item is a child run executing one
// block of the parent's pinned definition (call's machinery: an id derived
// from the parent, the step, its visit and attempt; the child index in the
// child's submission commit; cascade cancel; the terminal hook reporting
// its end). The runtime buffers one signal per key, the latest winning,
// so several children cannot each hand their result to the parent
// through one signal. Instead each child's end writes its result under a
// key of the parent's, tqw/join/<parent>/<step>/<visit>.<attempt>/<name>,
// durably, and only then rings the parent's doorbell (a signal on one
// key of the parent step). The parent wakes, reads the join records of
// the children it waits for, and waits again until it has what it needs.
// A ring that arrives while the parent is busy stays buffered and wakes
// it at its next wait, so no end is missed (its record is durable before
// the ring), and a ring for an end the parent already read costs one
// spurious wake. Results never ride in the parent's Continue payload.

// headerJoin is the child run header naming the KV key its end is
// written to before the parent's doorbell (headerParent) rings.
const headerJoin = "tqw.join"

const kvJoin = "tqw/join/" // KV: <parent>/<step>/<visit>.<attempt>/<name> a child's end

func joinRunPrefix(runID string) string { return kvJoin + runID + "/" }

// joinPrefix is where the children of x's step visit and attempt write
// their ends.
func (x *exec) joinPrefix() string {
	return fmt.Sprintf("%s%s/%d.%d/", joinRunPrefix(x.rs.RunID), x.s.ID, x.st.Visit, max(x.st.Attempt, 1))
}

const doorbellPrefix = "tqw.join:"

// doorbell is the signal key the children of x's step ring.
func (x *exec) doorbell() string {
	return fmt.Sprintf("%s%s:%s:%d.%d", doorbellPrefix, x.rs.RunID, x.s.ID, x.st.Visit, max(x.st.Attempt, 1))
}

// joinChildID is the run id of the child name of x's step.
func (x *exec) joinChildID(name string) string {
	return blockChildID(x.rs.RunID, x.s.ID, x.st.Visit, x.st.Attempt, name)
}

// blockChildID is the run id of child name of step's visit and attempt in
// run parent (the doorbell's key without its prefix, then the name).
func blockChildID(parent, step string, visit, attempt int, name string) string {
	return boundRunID(fmt.Sprintf("%s:%s:%d.%d:%s", parent, step, visit, max(attempt, 1), name))
}

// ChildRunIDs returns, for the wait key of a parallel or map step's
// history record, the prefix of its children's run ids: a branch's id is
// the prefix and its name, a map item's the prefix and its index (ids
// over 128 bytes are hashed instead). It returns "" for other keys.
func ChildRunIDs(waitKey string) string {
	rest, ok := strings.CutPrefix(waitKey, doorbellPrefix)
	if !ok {
		return ""
	}
	return rest + ":"
}

// blockChild is a child run to start: it executes block path of the
// parent's definition from a copy of vars (and, for a map item, item and
// index).
type blockChild struct {
	id   string // branch name or item index: the suffix of its run id
	name string // the join record's key suffix
	path string
	vars map[string]any
	item *mapItem
}

// startChild submits c as a child run of x's run, unless a run of its id
// exists (a redelivery of the step). Cost: a memory read, plus one
// submission commit carrying the child index.
func (x *exec) startChild(ctx context.Context, c blockChild) error {
	childID := x.joinChildID(c.id)
	if _, err := x.it.rt.Status(ctx, childID); err == nil {
		return nil
	} else if !errors.Is(err, runtime.ErrRunNotFound) {
		return err
	}
	ref, err := x.inputRecord(ctx)
	if err != nil {
		return err
	}
	cst := &state{V: stateVersion, Def: x.st.Def, Pin: x.st.Pin, InputRef: ref, Vars: c.vars, Init: true,
		Block: c.path, Up: append([]string{x.rs.RunID}, x.st.Up...), Item: c.item}
	payload, err := cst.encode()
	if err != nil {
		return runtime.Permanent(err)
	}
	spec := runtime.RunSpec{RunID: childID, Input: payload,
		Headers: map[string]string{headerParent: x.doorbell(), headerJoin: x.joinPrefix() + c.name,
			HeaderWorkflow: x.wf.Name, HeaderDefinition: x.st.Def},
		Labels:   map[string]string{LabelWorkflow: x.wf.Name},
		KVWrites: map[string][]byte{childIndexKey(x.rs.RunID, childID): {}}}
	stampTrace(ctx, &spec)
	x.it.noteDirty(x.rs.RunID)
	if _, err := x.it.rt.Submit(ctx, spec); err != nil {
		return fmt.Errorf("start child run %s: %w", childID, err)
	}
	return nil
}

// inlineInputLimit is the largest input record kept inline. A larger
// input goes to an object, whose hash-named key lets inputCache share one
// decoded copy among the children here: inline, every map item would GET
// and decode the whole input (all the items), O(items) each.
const inlineInputLimit = 4 << 10

// inputRecord returns the KV key of a record holding the run's input,
// written (durably, before any child that reads it is submitted) once per
// step visit: the one of the parent when x runs in a child itself. A
// large input goes to an object of its own, as a large output does.
func (x *exec) inputRecord(ctx context.Context) (string, error) {
	if x.st.InputRef != "" {
		return x.st.InputRef, nil
	}
	if x.inputRef != "" {
		return x.inputRef, nil
	}
	key := x.joinPrefix() + "input"
	rec := outputRecord{N: x.rs.Number, Output: x.st.Input}
	b, err := encodeMsgpack(&rec)
	if err != nil {
		return "", err
	}
	if len(b) > inlineInputLimit {
		obj, err := encodeMsgpack(x.st.Input)
		if err != nil {
			return "", err
		}
		okey := outputObjectKey(x.rs.RunID, x.rs.Number, obj)
		x.it.noteDirty(x.rs.RunID)
		if _, err := x.it.store.Put(ctx, okey, obj, objstore.PutOptions{}); err != nil {
			return "", fmt.Errorf("interpreter: store the input for the children of step %s: %w", x.s.ID, err)
		}
		if b, err = encodeMsgpack(&outputRecord{N: x.rs.Number, Ref: okey}); err != nil {
			return "", err
		}
	}
	if err := x.it.q.KVPut(ctx, key, b); err != nil {
		return "", fmt.Errorf("interpreter: record the input for the children of step %s: %w", x.s.ID, err)
	}
	x.inputRef = key
	return key, nil
}

// readInput reads a run input inputRecord wrote. Cost: a memory read,
// and one GET for a large input.
func (it *Interpreter) readInput(ctx context.Context, key string) (any, error) {
	b, err := it.q.KVGet(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("interpreter: read input record %s: %w", key, err)
	}
	if b == nil {
		return nil, fmt.Errorf("%w: input record %s is missing", ErrCorruptState, key)
	}
	var rec outputRecord
	if err := decodeMsgpack(b, &rec); err != nil {
		return nil, err
	}
	if rec.Ref == "" {
		return rec.Output, nil
	}
	if v, ok := it.inputs.get(rec.Ref); ok {
		return v, nil
	}
	v, err := readOutputObject(ctx, it.store, rec.Ref)
	if err != nil {
		return nil, err
	}
	it.inputs.add(rec.Ref, v)
	return v, nil
}

// inputCache keeps the large inputs of the last few parents whose
// children run here, so a map's items do not each GET their parent's
// input: the objects never change under their key (it names their hash).
// Entries are shared read-only.
type inputCache struct {
	mu sync.Mutex
	m  map[string]any
}

const inputCacheSize = 16

func (c *inputCache) get(key string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

func (c *inputCache) add(key string, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= inputCacheSize {
		c.m = map[string]any{} // bounded: dropping all is enough for a cache of parents
	}
	c.m[key] = v
}

// joined reads the end of child name, if it ended.
func (x *exec) joined(ctx context.Context, name string) (*childResult, error) {
	b, found, err := x.rs.KV.Get(ctx, x.joinPrefix()+name)
	if err != nil {
		return nil, fmt.Errorf("interpreter: read the end of child %s: %w", name, err)
	}
	if !found {
		return nil, nil
	}
	var res childResult
	if err := decodeMsgpack(b, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// cancelChild cancels the child of x's step whose id ends in suffix (an
// end already reported is left as it is).
func (x *exec) cancelChild(ctx context.Context, suffix string) {
	id := x.joinChildID(suffix)
	if _, err := x.it.rt.Cancel(ctx, id); err != nil && !errors.Is(err, runtime.ErrRunNotFound) {
		x.it.log.Warn("cancelling a child run failed; the run's end cancels it", "run", x.rs.RunID, "child", id, "err", err)
	}
}

// awaitJoin parks the step until a child rings its doorbell or the step's
// timeout passes (Step.Signal nil). Only the first wait writes a history
// record; the wakes after it are not step ends.
func (x *exec) awaitJoin() (runtime.StepOutcome, error) {
	next := *x.st
	now := x.it.now()
	if next.Phase != phaseJoin {
		timeout := x.s.Timeout
		if timeout <= 0 {
			timeout = noTimeout
		}
		next.Phase, next.WaitKey, next.Started = phaseJoin, x.doorbell(), x.start.UnixMilli()
		next.Deadline = now.Add(timeout).UnixMilli()
		x.hist.WaitKey = next.WaitKey
		if x.s.Timeout > 0 {
			x.hist.Until = next.Deadline
		}
		if err := x.finish(OutcomeWaiting, "", nil); err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
	}
	payload, err := next.encode()
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	left := max(time.UnixMilli(next.Deadline).Sub(now), time.Millisecond)
	return runtime.ContinueOnSignal(payload, next.WaitKey, left), nil
}

// blockFailure records, in a branch's or map item's failing settlement,
// the error type and message its run fails with, which the terminal hook
// copies into the join record: a run's end carries only a message.
func (x *exec) blockFailure(typ, msg string) error {
	if x.st.Block == "" {
		return nil
	}
	b, err := encodeMsgpack(&childResult{Type: typ, Message: msg})
	if err != nil {
		return err
	}
	return x.rs.Effects.Put(joinRunPrefix(x.rs.RunID)+"error", b)
}

// readBlockFailure copies the error a failed block child recorded into res.
func (it *Interpreter) readBlockFailure(ctx context.Context, runID string, res *childResult) error {
	b, err := it.q.KVGet(ctx, joinRunPrefix(runID)+"error")
	if err != nil || b == nil {
		return err
	}
	var rec childResult
	if err := decodeMsgpack(b, &rec); err != nil {
		return err
	}
	res.Type, res.Message = rec.Type, rec.Message
	return nil
}

// childError is a failed child's error type and message: the ones its
// failing step recorded, else cancelled for a cancelled child, else
// call.failed with its run's error (a run the runtime failed).
func childError(res *childResult) (typ, msg string) {
	switch {
	case res.Type != "":
		return res.Type, res.Message
	case res.Status == runstate.Cancelled.String():
		return TypeCancelled, res.Error
	}
	return TypeCallFailed, res.Error
}

// childOutput decodes a succeeded child's result.
func childOutput(res *childResult) (any, error) {
	if res.Omitted {
		return nil, fmt.Errorf("its result is over %d bytes; return less", runtime.MaxRetainedResult)
	}
	if len(res.Result) == 0 {
		return nil, nil
	}
	return DecodeJSON(res.Result)
}
