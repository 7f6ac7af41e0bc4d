package interpreter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/storage"
)

// mapChunk is how many items one stored chunk of a map's items holds: a
// wake that starts items reads only the chunks it needs.
const mapChunk = 64

// mapCursor is a running map step's place, in the Continue payload: a
// few counters and at most Concurrency indexes, whatever the number of
// items. Items [0, Low) have ended and are counted in Done and Failed;
// of [Low, Next), those in Ended have ended too, the rest run.
type mapCursor struct {
	Total  int   `msgpack:"t"`
	Next   int   `msgpack:"n,omitempty"`
	Low    int   `msgpack:"l,omitempty"`
	Ended  []int `msgpack:"e,omitempty"`
	Done   int   `msgpack:"d,omitempty"`
	Failed int   `msgpack:"f,omitempty"`
}

// running is how many started items have not ended.
func (c *mapCursor) running() int { return c.Next - c.Low - len(c.Ended) }

// mapResultName is the join record name of item i: zero-padded so that
// the records list in item order.
func mapResultName(i int) string { return fmt.Sprintf("r/%09d", i) }

func mapItemsKey(prefix string, chunk int) string { return fmt.Sprintf("%si/%06d", prefix, chunk) }

// mapStep runs the map's block once per item as child runs, at most
// Concurrency at once: the first entry evaluates and stores the items
// (in chunks beside the join records) and starts the first ones; each
// wake reads the ends of the items running, counts them, starts more,
// and fails once more items failed than tolerated (cancelling those
// still running). When every item ended, the output is assembled from
// the join records in item order.
func (x *exec) mapStep(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	m := x.s.Map
	prefix := x.joinPrefix()
	if x.st.Phase != phaseJoin {
		v, err := m.Items.Eval(env)
		if err != nil {
			return x.handleError(ctx, env, exprErr(err))
		}
		pv, err := plain(v)
		if err != nil {
			return x.handleError(ctx, env, newStepErr(TypeExpression, "map items: %v", err))
		}
		items, ok := pv.([]any)
		if !ok && pv != nil {
			return x.handleError(ctx, env, newStepErr(TypeValidation, "map items evaluate to %T, want a list", pv))
		}
		if len(items) == 0 {
			return x.finishAction(ctx, env, mapOutput(nil, nil, 0, 0, 0))
		}
		for c := 0; c*mapChunk < len(items); c++ {
			if err := x.stashRecord(ctx, mapItemsKey(prefix, c), items[c*mapChunk:min((c+1)*mapChunk, len(items))]); err != nil {
				return runtime.StepOutcome{}, runtime.Transient(err)
			}
		}
		x.st.Map = &mapCursor{Total: len(items)}
		if err := x.startItems(ctx, items); err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		return x.awaitJoin()
	}
	cur := x.st.Map
	if cur == nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("%w: run %s: map step %q waits without a cursor", ErrCorruptState, x.rs.RunID, x.s.ID))
	}
	if x.rs.Signal == nil {
		x.cancelItems(ctx, cur)
		return x.handleError(ctx, env, newStepErr(TypeTimeout, "the items did not all finish within %s", x.s.Timeout))
	}
	next := *cur
	next.Ended = slices.Clone(cur.Ended)
	var firstErr string
	for i := cur.Low; i < cur.Next; i++ {
		if slices.Contains(cur.Ended, i) {
			continue
		}
		res, err := x.joined(ctx, mapResultName(i))
		if err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		if res == nil {
			continue
		}
		next.Ended = append(next.Ended, i)
		if res.Status == runstate.Succeeded.String() {
			next.Done++
		} else {
			next.Failed++
			if firstErr == "" {
				typ, msg := childError(res)
				firstErr = fmt.Sprintf("item %d: %s: %s", i, typ, msg)
			}
		}
	}
	for slices.Contains(next.Ended, next.Low) {
		next.Ended = slices.DeleteFunc(next.Ended, func(i int) bool { return i == next.Low })
		next.Low++
	}
	x.st.Map = &next
	if tol := m.MaxFailures(next.Total); next.Failed > tol {
		x.cancelItems(ctx, &next)
		msg := fmt.Sprintf("%d of %d items failed, more than the %d tolerated", next.Failed, next.Total, tol)
		if firstErr != "" {
			msg += "; " + firstErr
		}
		return x.handleError(ctx, env, newStepErr(TypeMapFailed, "%s", msg))
	}
	if next.Low == next.Total {
		out, err := x.mapResults(ctx, prefix, next)
		if err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		return x.finishAction(ctx, env, out)
	}
	if next.Next < next.Total && next.running() < m.Concurrency {
		if err := x.startItems(ctx, nil); err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
	}
	return x.awaitJoin()
}

// startItems starts items from the cursor's Next while fewer than
// Concurrency run. items is the whole list when the caller holds it, else
// nil: the chunks needed are read back.
func (x *exec) startItems(ctx context.Context, items []any) error {
	cur, m := x.st.Map, x.s.Map
	var chunk []any
	chunkAt := -1
	for cur.Next < cur.Total && cur.running() < m.Concurrency {
		i := cur.Next
		var item any
		if items != nil {
			item = items[i]
		} else {
			if c := i / mapChunk; c != chunkAt {
				v, err := x.readRecord(ctx, mapItemsKey(x.joinPrefix(), c))
				if err != nil {
					return err
				}
				chunk, _ = v.([]any)
				chunkAt = c
			}
			if i%mapChunk >= len(chunk) {
				return fmt.Errorf("%w: run %s: map step %q has no stored item %d", ErrCorruptState, x.rs.RunID, x.s.ID, i)
			}
			item = chunk[i%mapChunk]
		}
		c := blockChild{id: strconv.Itoa(i), name: mapResultName(i), path: m.Block.Path, vars: maps.Clone(x.st.Vars), item: &mapItem{V: item, I: i}}
		if err := x.startChild(ctx, c); err != nil {
			return err
		}
		cur.Next++
	}
	return nil
}

// cancelItems cancels the items that run.
func (x *exec) cancelItems(ctx context.Context, cur *mapCursor) {
	for i := cur.Low; i < cur.Next; i++ {
		if !slices.Contains(cur.Ended, i) {
			x.cancelChild(ctx, strconv.Itoa(i))
		}
	}
}

// mapResults assembles the output from the join records, in item order.
func (x *exec) mapResults(ctx context.Context, prefix string, cur mapCursor) (any, error) {
	results := make([]any, cur.Total)
	var errs []any
	rp := prefix + "r/"
	err := scanKeys(ctx, x.it.q, rp, func(e storage.KVEntry) error {
		i, err := strconv.Atoi(e.Key[len(rp):])
		if err != nil || i < 0 || i >= cur.Total {
			return fmt.Errorf("%w: join record %s", ErrCorruptState, e.Key)
		}
		var res childResult
		if err := decodeMsgpack(e.Value, &res); err != nil {
			return err
		}
		if res.Status == runstate.Succeeded.String() {
			v, err := childOutput(&res)
			if err == nil {
				results[i] = v
				return nil
			}
			errs = append(errs, map[string]any{"index": int64(i), "type": TypeCallFailed, "message": err.Error()})
			return nil
		}
		typ, msg := childError(&res)
		errs = append(errs, map[string]any{"index": int64(i), "type": typ, "message": msg})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return mapOutput(results, errs, cur.Done, cur.Failed, cur.Total), nil
}

func mapOutput(results, errs []any, done, failed, total int) map[string]any {
	if results == nil {
		results = []any{}
	}
	if errs == nil {
		errs = []any{}
	}
	return map[string]any{"results": results, "errors": errs, "done": int64(done), "failed": int64(failed), "total": int64(total)}
}

// stashRecord stages v under key as an output record: inline when it is
// small, else in an object of its own written first (the large-output
// path), so a map's items fit however large they are.
func (x *exec) stashRecord(ctx context.Context, key string, v any) error {
	b, _, err := x.outputRecordOf(ctx, v, "the items")
	if err != nil {
		return err
	}
	return x.rs.Effects.Put(key, b)
}

// readRecord reads back a record stashRecord staged in an earlier step.
func (x *exec) readRecord(ctx context.Context, key string) (any, error) {
	b, found, err := x.rs.KV.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("interpreter: read %s: %w", key, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: record %s is missing", ErrCorruptState, key)
	}
	return x.decodeOutput(ctx, b)
}
