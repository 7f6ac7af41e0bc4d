// Command durable_approvals holds an agent run for a human decision across
// processes, on the local file store.
//
//	go run ./examples/durable_approvals                   # investigates, proposes a refund, exits waiting
//	go run ./examples/durable_approvals approve           # delivers the decision; the run completes
//	go run ./examples/durable_approvals reject "duplicate claim"
//
// The first invocation investigates a claim one turn per step, proposes a
// refund and exits with the run waiting (ContinueOnSignal on
// "approval:<run id>"). A later invocation with approve or reject REASON
// delivers the decision and resumes the run to completion. A decision sent
// before the first invocation is buffered durably and consumed when the run
// registers its wait, so the run then completes in that first invocation.
// A run that waits past --timeout escalates at the next plain invocation:
// its next step runs with no signal. --clock-skew moves this program's clock
// forward, to see the escalation without waiting a day.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
)

func main() { exampleenv.Main("durable_approvals", run) }

// claim is the run's payload: what the agent has established so far.
type claim struct {
	Text     string   `json:"text"`
	Findings []string `json:"findings,omitempty"`
	Refund   string   `json:"refund,omitempty"`
	// Wait is the timeout of the approval wait, kept for the escalation.
	Wait string `json:"wait,omitempty"`
}

// decision is the signal payload.
type decision struct {
	Approve bool   `json:"approve"`
	Reason  string `json:"reason,omitempty"`
}

// agent investigates in turns 0 and 1, proposes and waits in turn 2, and
// acts on the decision (or its absence) in turn 3.
type agent struct {
	out     io.Writer
	timeout time.Duration
}

func approvalKey(runID string) string { return "approval:" + runID }

func (a agent) RunStep(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	var c claim
	if err := json.Unmarshal(s.Payload, &c); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("turn %d payload: %w", s.Number, err))
	}
	next := func() (runtime.StepOutcome, error) {
		b, err := json.Marshal(c)
		if err != nil {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		if s.Number == 2 {
			return runtime.ContinueOnSignal(b, approvalKey(s.RunID), a.timeout), nil
		}
		return runtime.ContinueNow(b), nil
	}
	switch s.Number {
	case 0:
		c.Findings = append(c.Findings, "order exists and was delivered")
		fmt.Fprintf(a.out, "turn 0: read the claim %q\n", c.Text)
		return next()
	case 1:
		c.Findings = append(c.Findings, "no earlier refund on this order")
		fmt.Fprintf(a.out, "turn 1: checked the order history: %s\n", strings.Join(c.Findings, "; "))
		return next()
	case 2:
		c.Refund = "42.00"
		c.Wait = a.timeout.String()
		fmt.Fprintf(a.out, "turn 2: proposing a refund of %s; waiting for approval on %q\n", c.Refund, approvalKey(s.RunID))
		return next()
	default:
		if s.Signal == nil {
			msg := fmt.Sprintf("escalated to a supervisor: no decision within %s", c.Wait)
			fmt.Fprintf(a.out, "turn 3: %s\n", msg)
			return runtime.Succeed([]byte(msg)), nil
		}
		var d decision
		if err := json.Unmarshal(s.Signal, &d); err != nil {
			return runtime.Fail(fmt.Sprintf("unreadable decision %q: %v", s.Signal, err)), nil
		}
		if !d.Approve {
			msg := "refund rejected: " + d.Reason
			fmt.Fprintf(a.out, "turn 3: %s\n", msg)
			return runtime.Succeed([]byte(msg)), nil
		}
		msg := "refund of " + c.Refund + " issued"
		fmt.Fprintf(a.out, "turn 3: approved; %s\n", msg)
		return runtime.Succeed([]byte(msg)), nil
	}
}

// skewedClock is the system clock moved forward by skew.
type skewedClock struct {
	clock.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time { return c.Clock.Now().Add(c.skew) }

// run parses args, delivers a decision if one is given, and works the run
// until it ends or waits for a decision that is not due yet.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("durable_approvals", flag.ContinueOnError)
	storeURL := fs.String("store", "file://.tqw-examples/durable_approvals", "store URL; file:// or s3:// to wait across processes")
	runID := fs.String("run-id", "claim-118", "the run to start, resume or decide")
	text := fs.String("claim", "order 118: the table arrived broken", "the claim to investigate")
	timeout := fs.Duration("timeout", 24*time.Hour, "how long the run waits for a decision before it escalates")
	skew := fs.Duration("clock-skew", 0, "move this process's clock forward by this much (to see an escalation)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: durable_approvals [flags] [approve | reject REASON]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var dec *decision
	switch rest := fs.Args(); {
	case len(rest) == 0:
	case rest[0] == "approve" && len(rest) == 1:
		dec = &decision{Approve: true}
	case rest[0] == "reject" && len(rest) > 1:
		dec = &decision{Reason: strings.Join(rest[1:], " ")}
	default:
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q: want nothing, approve, or reject REASON", rest)
	}
	out = exampleenv.SyncWriter(out)

	clock := skewedClock{Clock: clock.System(), skew: *skew}
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelError,
		Queue: storage.Options{Clock: clock}})
	if err != nil {
		return err
	}
	defer env.Close()
	rt, err := env.NewRuntime(agent{out: out, timeout: *timeout}, *runID, runtime.Options{ResultRetention: 30 * 24 * time.Hour})
	if err != nil {
		return err
	}

	// The zero status (RunID "") when the run has not started.
	st, err := exampleenv.Status(ctx, rt, *runID)
	if err != nil {
		return err
	}
	if st.State.Terminal() {
		fmt.Fprintf(out, "run %s already %s: %s%s (use --run-id to start another)\n", *runID, st.State, st.Result, st.Error)
		return nil
	}
	if dec != nil {
		b, err := json.Marshal(dec)
		if err != nil {
			return err
		}
		res, err := rt.Signal(ctx, approvalKey(*runID), b)
		if err != nil {
			return fmt.Errorf("deliver the decision: %w", err)
		}
		fmt.Fprintf(out, "decision %s for run %s: %s\n", b, *runID, res)
		if st.RunID == "" {
			fmt.Fprintln(out, "the run has not started; the decision is held until it waits")
			return env.Queue.DB().Sync(ctx)
		}
	}

	if st.RunID == "" {
		in, err := json.Marshal(claim{Text: *text})
		if err != nil {
			return err
		}
		if _, err := rt.Submit(ctx, runtime.RunSpec{RunID: *runID, Input: in}); err != nil {
			return fmt.Errorf("submit %s: %w", *runID, err)
		}
		fmt.Fprintf(out, "submitted run %s\n", *runID)
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))

	// Work the run until it ends, or until it waits for a decision that is
	// not due: then exit, leaving the wait in the store.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case o := <-env.Outcomes():
			fmt.Fprintf(out, "run %s %s: %s%s\n", o.RunID, o.Status, o.Result, o.Error)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
		}
		st, err := rt.Status(ctx, *runID)
		if err != nil {
			if errors.Is(err, runtime.ErrRunNotFound) {
				continue // terminated; the hook reports it
			}
			return err
		}
		if st.State == runstate.StateWaiting && st.Until.After(clock.Now()) {
			if err := env.Queue.DB().Sync(ctx); err != nil {
				return err
			}
			fmt.Fprintf(out, "run %s is waiting for a decision until %s; run again with: approve | reject REASON\n",
				*runID, st.Until.UTC().Format(time.RFC3339))
			return nil
		}
	}
}
