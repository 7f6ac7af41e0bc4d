package interpreter

import (
	"context"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
)

// Folding. A pure step (set, switch, succeed, fail) computes only from the
// run's state and writes only its history record and the next state, and
// none of it is seen outside before its settlement commits: rerun from the
// last durable state after a crash, it gives an outcome no one saw another
// version of. So one delivery runs its DSL step and then the pure steps
// that follow it, and all of them commit in its one settlement. An
// effectful step (an action, sleep and wait_signal included, foreach,
// call) always starts a delivery of its own: it never starts before what
// came before it is durable, and what is keyed by the runtime step number
// (memo visits, child run ids, large-output objects) keeps at most one
// effectful step per number.

// maxFoldedSteps bounds the pure steps one delivery runs after its first
// DSL step, so a pure loop commits (shows its progress, keeps it through a
// crash) every 101 steps, a few ms of interpreter CPU, and a chain's
// history records fit a three-digit key suffix (histKey). It bounds the
// settlement's size too: a pure step's record holds ids, kinds and times,
// and only the steps that end the run (succeed, fail, a failed expression)
// carry a result or an error, at most one per chain, so a chain adds
// about 100 small records to what its first step staged; the variables
// ride in the one Continue payload, whatever the chain's length.
const maxFoldedSteps = 100

// chain is what the DSL steps of one delivery share.
type chain struct {
	red *redactor
	// outputs are the output records (encoded outputRecord) staged in
	// this delivery, by step id: rs.KV reads only committed state, so a
	// set or switch reading the action it follows finds its output here.
	outputs map[string][]byte
	// steps counts the DSL steps the delivery ran.
	steps int
}

// folds reports whether the delivery runs the step x moved the run to
// (x.next) too, rather than settle and leave it to the next delivery.
func (c *chain) folds(ctx context.Context, x *exec) bool {
	if c.steps-1 >= maxFoldedSteps || ctx.Err() != nil {
		return false
	}
	s, err := x.next.current(x.wf)
	return err == nil && pure(s)
}

// pure reports whether s has no effect but its history record and the
// run's next state.
func pure(s *dsl.Step) bool {
	switch s.Kind {
	case dsl.KindSet, dsl.KindSwitch, dsl.KindSucceed, dsl.KindFail:
		return true
	}
	return false
}

// stagedOutput returns the output record of step id staged earlier in this
// delivery.
func (c *chain) stagedOutput(id string) ([]byte, bool) {
	b, ok := c.outputs[id]
	return b, ok
}

func (c *chain) stageOutput(id string, rec []byte) {
	if c.outputs == nil {
		c.outputs = map[string][]byte{}
	}
	c.outputs[id] = rec
}

// continueNow is the outcome of a delivery whose last step moved the run
// to x.next, to run at once.
func (x *exec) continueNow() (runtime.StepOutcome, error) {
	payload, err := x.next.encode()
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueNow(payload), nil
}
