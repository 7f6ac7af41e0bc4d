package interpreter

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// Definition returns the parsed workflow pinned under hash (a run's
// HeaderDefinition). Cost: one GET on a cache miss, none after; an
// unknown hash matches ErrDefinitionMissing.
func (v *View) Definition(ctx context.Context, hash string) (*dsl.Workflow, error) {
	d, err := v.definition(ctx, hash)
	if err != nil {
		return nil, err
	}
	return d.wf, nil
}

// Position is where an active run stands, read from the payload of its
// current step job.
type Position struct {
	// Definition is the content hash of the pinned definition.
	Definition string
	// Input is the run's input.
	Input any
	// Step is the id of the DSL step the job runs (or waits in).
	Step string
	// Map is the progress of the map step the run waits in; nil at any
	// other step.
	Map *MapProgress
	// Branches are, at a parallel step waiting for its branches, the run
	// id of each branch's child run by branch name; nil at any other step.
	Branches map[string]string
}

// jobRunIDHeader is the runtime's header naming a step job's run.
const jobRunIDHeader = "workflow.run_id"

// MapProgress counts the items of a running map step that ended so far:
// Done succeeded, Failed failed, of Total. It is the state's cursor, so
// an item counts once the map step read its end.
type MapProgress struct{ Done, Failed, Total int }

// Position reads where the active run whose current step job is jobID
// stands (runstate.Status.JobID). A job that is gone (the run moved on
// or ended) matches runtime.ErrRunNotFound. A job's payload never
// changes, so given the JobID of a durable status (runtime.Inspector's)
// the answer is durable too: Position waits for no read barrier. Cost: a
// read of the job from r (no object-store request on the writer's queue)
// and, on a definition cache miss, one GET.
func (v *View) Position(ctx context.Context, r runtime.StateReader, jobID string) (Position, error) {
	job, err := r.GetJob(ctx, jobID)
	if errors.Is(err, storage.ErrNotFound) {
		return Position{}, fmt.Errorf("%w: job %s is gone", runtime.ErrRunNotFound, jobID)
	}
	if err != nil {
		return Position{}, fmt.Errorf("interpreter: read job %s: %w", jobID, err)
	}
	st, err := decodeState(job.Payload)
	if err != nil {
		return Position{}, err
	}
	pos := Position{Definition: st.Def, Input: st.Input}
	d, err := v.definition(ctx, st.Def)
	if err != nil {
		return pos, err
	}
	if s, err := st.current(d.wf); err == nil {
		pos.Step = s.ID
		if c := st.Map; c != nil && s.Kind == dsl.KindMap {
			pos.Map = &MapProgress{Done: c.Done, Failed: c.Failed, Total: c.Total}
		}
		if run := job.Headers[jobRunIDHeader]; s.Kind == dsl.KindParallel && st.Phase == phaseJoin && run != "" {
			pos.Branches = make(map[string]string, len(s.Parallel.Branches))
			for _, br := range s.Parallel.Branches {
				pos.Branches[br.Name] = blockChildID(run, s.ID, st.Visit, st.Attempt, br.Name)
			}
		}
	}
	return pos, nil
}
