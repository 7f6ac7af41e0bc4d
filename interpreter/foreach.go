package interpreter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// itemRecord is the memo entry of a finished foreach item.
type itemRecord struct {
	Output any `msgpack:"o"`
	// Spent is what the item's calls paid (actions.Call.Spend), replayed
	// to the ledger with the item.
	Spent []actions.Spend `msgpack:"s,omitempty"`
}

// foreach runs the inner action once per item, at most Concurrency at a
// time. Finished items are memoized under the step's visit, so neither a
// crash nor a retry of the step runs them again.
func (x *exec) foreach(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	f := x.s.Foreach
	if f.Action == "sleep" || f.Action == "wait_signal" {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "foreach cannot run %s: this interpreter parks whole steps only; use a separate step", f.Action))
	}
	a, e := x.lookup(f.Action)
	if e != nil {
		return x.handleError(ctx, env, e)
	}
	v, err := f.Items.Eval(env)
	if err != nil {
		return x.handleError(ctx, env, exprErr(err))
	}
	pv, err := plain(v)
	if err != nil {
		return x.handleError(ctx, env, newStepErr(TypeExpression, "foreach items: %v", err))
	}
	items, ok := pv.([]any)
	if !ok && pv != nil {
		return x.handleError(ctx, env, newStepErr(TypeValidation, "foreach items evaluate to %T, want a list", pv))
	}
	outputs := make([]any, len(items))
	errs := make([]*stepErr, len(items))
	var infra error
	var mu sync.Mutex
	// stopped closes at the first failure: no new item starts, and items
	// in flight finish (and are memoized) rather than being thrown away.
	stopped := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopped) }) }
	sem := make(chan struct{}, max(f.Concurrency, 1))
	var wg sync.WaitGroup
	for i, item := range items {
		key := fmt.Sprintf("v%d.fe.%d", x.st.Visit, i)
		if x.rs.RunMemo != nil {
			if b, found, err := x.rs.RunMemo.Get(ctx, key); err != nil {
				return runtime.StepOutcome{}, runtime.Transient(err)
			} else if found {
				var rec itemRecord
				if decodeMsgpack(b, &rec) == nil {
					outputs[i] = rec.Output
					for _, sp := range rec.Spent {
						x.charge(sp)
					}
					continue
				}
			}
		}
		select {
		case sem <- struct{}{}:
		case <-stopped:
		}
		if isClosed(stopped) {
			break
		}
		wg.Add(1)
		go func(i int, item any) {
			defer func() { <-sem; wg.Done() }()
			out, se, err := x.runItem(ctx, a, env, i, item, key)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if infra == nil {
					infra = err
				}
				stop()
			case se != nil:
				errs[i] = se
				stop()
			default:
				outputs[i] = out
			}
		}(i, item)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return runtime.StepOutcome{}, runtime.Transient(fmt.Errorf("step %s interrupted: %w", x.s.ID, context.Cause(ctx)))
	}
	if infra != nil {
		return runtime.StepOutcome{}, runtime.Transient(infra)
	}
	for _, se := range errs {
		if se != nil {
			// The first failure in item order.
			return x.handleError(ctx, env, se)
		}
	}
	return x.finishAction(ctx, env, outputs)
}

// runItem runs one item's action and memoizes its output. It returns a
// stepErr for a failed attempt and an error for an infrastructure failure.
func (x *exec) runItem(ctx context.Context, a actions.Action, env *dsl.Env, i int, item any, key string) (any, *stepErr, error) {
	ienv := *env
	ienv.Item, ienv.Index = item, i
	args, se := x.evalWith(&ienv, x.s.Foreach.With)
	if se != nil {
		return nil, se, nil
	}
	var spentMu sync.Mutex
	var spent []actions.Spend
	charge := func(s actions.Spend) {
		spentMu.Lock()
		spent = append(spent, s)
		spentMu.Unlock()
		x.charge(s)
	}
	call := &actions.Call{RunID: x.rs.RunID, StepID: fmt.Sprintf("%s[%d]", x.s.ID, i), Attempt: x.st.Attempt, Args: args,
		Secret: x.secret, Derived: x.red.derive, Memo: x.memo(fmt.Sprintf("i%d.", i)), Charge: charge,
		Logger: x.red.logger(x.it.log).With("run", x.rs.RunID, "step", x.s.ID, "item", i, "action", x.s.Foreach.Action)}
	out, err := x.invoke(ctx, a, call)
	if err != nil {
		var se *runtime.StepError
		if errors.As(err, &se) {
			return nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("step %s item %d interrupted: %w", x.s.ID, i, context.Cause(ctx))
		}
		e := classify(err)
		e.info.Message = fmt.Sprintf("item %d: %s", i, e.info.Message)
		return nil, e, nil
	}
	p, err := plain(out)
	if err != nil {
		return nil, newStepErr(TypeValidation, "item %d: output: %v", i, err), nil
	}
	p = x.red.value(p)
	if x.rs.RunMemo != nil {
		b, err := encodeMsgpack(&itemRecord{Output: p, Spent: slices.Clone(spent)})
		if err != nil {
			return nil, nil, err
		}
		if err := x.rs.RunMemo.Put(ctx, key, b); err != nil {
			// The item is done; only its memo is missing, so a crash redoes it.
			x.it.log.Warn("memoizing a foreach item failed", "run", x.rs.RunID, "step", x.s.ID, "item", i, "err", err)
		}
	}
	return p, nil, nil
}

// childRunID derives the id of the child run a call step starts from the
// parent run and the runtime step, so a redelivered step finds its child.
func childRunID(parent, step string, n int) string {
	return boundRunID(fmt.Sprintf("%s:%s:%d", parent, step, n))
}

// boundRunID returns id, or a hash of it when it is longer than a run id
// may be.
func boundRunID(id string) string {
	if len(id) <= 128 {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "child-" + hex.EncodeToString(sum[:])
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
