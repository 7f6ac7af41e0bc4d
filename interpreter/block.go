package interpreter

import (
	"fmt"
	"iter"

	"github.com/tqw-dsl/tqw/dsl"
)

// Blocks. A workflow's steps are lists (dsl.Block): the top level (path
// ""), each parallel branch, a map's steps, on_error and finally. A run's
// state names the block it executes (state.Block) and its position there
// (state.Step); a parallel branch or a map item is a child run of the
// parent that executes one block of the parent's pinned definition, so
// state.Block is "" except in those children. stepAt is the one place
// that turns a position into a step.

// stepAt returns step i of block path of wf.
func stepAt(wf *dsl.Workflow, path string, i int) (*dsl.Step, error) {
	b := wf.Block(path)
	if b == nil {
		return nil, fmt.Errorf("%w: workflow %s has no block %q", ErrCorruptState, wf.Name, path)
	}
	if i < 0 || i >= len(b.Steps) {
		return nil, fmt.Errorf("%w: step %d of block %q, which has %d steps", ErrCorruptState, i, path, len(b.Steps))
	}
	return b.Steps[i], nil
}

// current returns the step st is at.
func (st *state) current(wf *dsl.Workflow) (*dsl.Step, error) { return stepAt(wf, st.Block, st.Step) }

// allSteps yields every step of wf, in every block.
func allSteps(wf *dsl.Workflow) iter.Seq[*dsl.Step] {
	return func(yield func(*dsl.Step) bool) {
		for _, b := range wf.Blocks() {
			for _, s := range b.Steps {
				if !yield(s) {
					return
				}
			}
		}
	}
}
