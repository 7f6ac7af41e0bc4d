package interpreter

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
)

// What a workflow file declares about its runs as a whole: labels:
// (evaluated at submission) and outputs: (evaluated as the run succeeds).

// declaredLabels evaluates wf's labels: for the run runID on input (plain
// values): they read input and run, all a run has before its first step.
// A label that is not a string, or breaks the label rules, is an error
// matching runstate.ErrInvalidLabel, and nothing is written.
func declaredLabels(wf *dsl.Workflow, input any, runID string) (map[string]string, error) {
	if len(wf.Labels) == 0 {
		return nil, nil
	}
	env := &dsl.Env{Input: input, Run: dsl.RunInfo{ID: runID, Workflow: wf.Name, Step: wf.Steps[0].ID, Attempt: 1},
		Now: time.Now, UUID: func() string { return formatUUID(rand.Uint64(), rand.Uint64()) }}
	labels, err := wf.EvalLabels(env)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", runstate.ErrInvalidLabel, wf.File, err)
	}
	return labels, nil
}

// result is what a run that succeeds with v ends with: its declared
// outputs, evaluated with v as output (the last output, or a succeed
// step's value) and the steps outputs reads, else v itself.
func (x *exec) result(ctx context.Context, env *dsl.Env, v any) (any, *stepErr, error) {
	// A branch or map item (a child run of a nested block) ends its block
	// with v: outputs are the workflow's, its top-level run's.
	if x.wf.Outputs == nil || x.st.Block != "" {
		return v, nil, nil
	}
	steps, err := x.stepOutputs(ctx, x.d.outputRefs, x.d.outputAll)
	if err != nil {
		return nil, nil, err
	}
	oenv := *env
	oenv.Output, oenv.Steps = v, maps.Clone(env.Steps)
	if oenv.Steps == nil {
		oenv.Steps = map[string]dsl.StepState{}
	}
	maps.Copy(oenv.Steps, steps)
	out, err := x.wf.Outputs.Eval(&oenv)
	if err != nil {
		return nil, exprErr(fmt.Errorf("outputs: %w", err)), nil
	}
	return out, nil, nil
}

// succeedWith ends the run successfully with v, or with its declared
// outputs (result).
func (x *exec) succeedWith(ctx context.Context, env *dsl.Env, v any) (runtime.StepOutcome, error) {
	out, e, err := x.result(ctx, env, v)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Transient(err)
	}
	if e != nil {
		return x.failRun(e)
	}
	return x.succeedRun(out)
}
