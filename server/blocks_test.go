package server_test

import (
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/server/client"
)

const parallelYAML = `tqw: v1
name: par
steps:
  - id: checks
    parallel:
      fail: all
      branches:
        quick:
          - id: quick_check
            succeed: 1
        slow:
          - id: slow_check
            action: wait_signal
            with: {key: "slow:${ run.id }", timeout: 1h}
  - id: done
    succeed: "${ output }"
`

// The run view of a run at a parallel step lists each branch's child run
// in file order with its state and, while it runs, its step; once the
// step ended, the view has no branches.
func TestRunViewShowsBranches(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Submit(f.ctx, client.SubmitRequest{YAML: parallelYAML, RunID: "par1"}); err != nil {
		t.Fatal(err)
	}
	var run client.Run
	for {
		run = f.waitState("par1", "waiting")
		if len(run.Branches) == 2 && run.Branches[0].State == "succeeded" && run.Branches[1].State == "waiting" {
			break
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("the run view's branches are %+v; want quick succeeded and slow waiting", run.Branches)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if run.Waiting != nil {
		t.Fatalf("the parent waiting at its parallel step asks for a signal: %+v", run.Waiting)
	}
	quick, slow := run.Branches[0], run.Branches[1]
	if quick.Step != "checks" || quick.Branch != "quick" || quick.CurrentStep != "" ||
		slow.Step != "checks" || slow.Branch != "slow" || slow.CurrentStep != "slow_check" {
		t.Fatalf("branches %+v", run.Branches)
	}
	child, err := f.c.Run(f.ctx, slow.RunID)
	if err != nil || child.State != "waiting" || child.Waiting == nil || child.Waiting.SignalKey != "slow:"+slow.RunID {
		t.Fatalf("the slow branch's run %s: %+v %v", slow.RunID, child, err)
	}
	if _, err := f.c.Signal(f.ctx, "slow:"+slow.RunID, []byte(`"late"`), false); err != nil {
		t.Fatal(err)
	}
	if run = f.waitState("par1", "succeeded"); run.Branches != nil {
		t.Fatalf("the ended run still shows branches %+v", run.Branches)
	}
}
