package interpreter

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// parallel starts every branch as a child run (join.go), then, at each
// wake, reads the branches' ends: it fails at the first failed branch
// under fail: fast (cancelling the others), else once all ended, and
// succeeds with {branch: result} when every branch succeeded.
func (x *exec) parallel(ctx context.Context, env *dsl.Env) (runtime.StepOutcome, error) {
	p := x.s.Parallel
	if x.st.Phase != phaseJoin {
		for _, br := range p.Branches {
			c := blockChild{id: br.Name, name: br.Name, path: br.Block.Path, vars: maps.Clone(x.st.Vars), item: x.st.Item}
			if err := x.startChild(ctx, c); err != nil {
				return runtime.StepOutcome{}, runtime.Transient(err)
			}
		}
		return x.awaitJoin()
	}
	if x.rs.Signal == nil {
		for _, br := range p.Branches {
			x.cancelChild(ctx, br.Name)
		}
		return x.handleError(ctx, env, newStepErr(TypeTimeout, "the branches did not all finish within %s", x.s.Timeout))
	}
	out := make(map[string]any, len(p.Branches))
	var failed []string
	ended := 0
	for _, br := range p.Branches {
		res, err := x.joined(ctx, br.Name)
		if err != nil {
			return runtime.StepOutcome{}, runtime.Transient(err)
		}
		if res == nil {
			continue
		}
		ended++
		if res.Status == runstate.Succeeded.String() {
			v, err := childOutput(res)
			if err == nil {
				out[br.Name] = v
				continue
			}
			failed = append(failed, fmt.Sprintf("branch %s: %v", br.Name, err))
			continue
		}
		typ, msg := childError(res)
		failed = append(failed, fmt.Sprintf("branch %s: %s: %s", br.Name, typ, msg))
	}
	if len(failed) > 0 && (p.FailFast || ended == len(p.Branches)) {
		if ended < len(p.Branches) {
			for _, br := range p.Branches {
				x.cancelChild(ctx, br.Name)
			}
		}
		return x.handleError(ctx, env, newStepErr(TypeParallelFailed, "%s", strings.Join(failed, "; ")))
	}
	if ended < len(p.Branches) {
		return x.awaitJoin()
	}
	return x.finishAction(ctx, env, out)
}
