package remote

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Redrive and bulk commands. A redrive commits its applied-marker in the
// redrive's own commit (runtime.Runtime.Redrive's record, written only
// while absent), so a redrain that finds the marker reports the redrive
// done and never redrives again. A bulk command is its request, which is
// exactly once per run by its request id (Bulk): a redrain repeats it.

// bulkCommand is a bulk command's request.
type bulkCommand struct {
	ID      string            `json:"request_id"`
	Action  string            `json:"action"`
	States  []string          `json:"states,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	After   string            `json:"after,omitempty"`
	Arg     []byte            `json:"arg,omitempty"`
	Payload []byte            `json:"payload,omitempty"`
	DryRun  bool              `json:"dry_run,omitempty"`
}

// redrive applies a Redrive command.
func (ib *inbox) redrive(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	ans.RunID = cmd.RunID
	if m != nil {
		ans.OK = true
		return nil
	}
	mb, err := encodeMarker(&inboxMarker{Kind: CommandRedrive, AtMs: ib.rt.Clock().Now().UnixMilli()})
	if err != nil {
		return err
	}
	out, err := ib.rt.Redrive(ctx, cmd.RunID, cmd.Payload, &queue.KVWrite{Key: inboxMarkerKey(cmd.ID), Value: mb})
	if errors.Is(err, runtime.ErrRecordExists) {
		ans.OK = true // another drainer applied it meanwhile
		return nil
	}
	if err != nil {
		return err
	}
	ans.OK, ans.JobID = true, out.JobID
	return nil
}

// bulk applies a Bulk command.
func (ib *inbox) bulk(ctx context.Context, cmd *inboxCommand, ans *inboxAnswer) error {
	b := cmd.Bulk
	req := BulkRequest{ID: b.ID, Action: b.Action, Arg: b.Arg, Payload: b.Payload, DryRun: b.DryRun,
		Filter: runstate.ListOptions{Labels: b.Labels, After: b.After}}
	for _, name := range b.States {
		st, ok := parseState(name)
		if !ok {
			return fmt.Errorf("%w: bulk command %s: state %q", ErrInvalidCommand, cmd.ID, name)
		}
		req.Filter.States = append(req.Filter.States, st)
	}
	items, err := Bulk(ctx, ib.rt, req)
	if err != nil {
		return err // a refusal (codeOf) is answered, a store error retried
	}
	ans.OK, ans.Bulk = true, items
	return nil
}

func parseState(name string) (runstate.State, bool) {
	for st := runstate.StatePending; st <= runstate.StateCancelled; st++ {
		if st.String() == name {
			return st, true
		}
	}
	return 0, false
}

// Redrive asks the writer to continue a failed or cancelled run; arg is
// the runner's (interpreter.RedriveArg). See runtime.Runtime.Redrive; a
// refusal matches runtime.ErrNotRedrivable.
func (c *Client) Redrive(ctx context.Context, runID string, arg []byte) error {
	if err := runstate.ValidateRunID(runID); err != nil {
		return err
	}
	_, err := c.do(ctx, &inboxCommand{Kind: CommandRedrive, RunID: runID, Payload: arg})
	return err
}

// Bulk asks the writer to apply req (its Match and OnRun are not sent:
// they stay in this process) and returns what it did to each run.
func (c *Client) Bulk(ctx context.Context, req BulkRequest) ([]BulkItem, error) {
	if err := ValidateBulkID(req.ID); err != nil {
		return nil, err
	}
	if req.Match != nil || req.OnRun != nil {
		return nil, errors.New("remote: client: a bulk request's Match and OnRun run in the writer's process and cannot be sent")
	}
	b := &bulkCommand{ID: req.ID, Action: req.Action, Labels: req.Filter.Labels, After: req.Filter.After, Arg: req.Arg, Payload: req.Payload, DryRun: req.DryRun}
	for _, st := range req.Filter.States {
		b.States = append(b.States, st.String())
	}
	ans, err := c.do(ctx, &inboxCommand{Kind: CommandBulk, Bulk: b})
	if err != nil {
		return nil, err
	}
	return ans.Bulk, nil
}
