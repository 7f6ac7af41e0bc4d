package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Applying one command through the runtime's control surface
// (runtime/control.go), each kind as a continuation of its first attempt
// through the command's applied-marker (doc.go, Invariants).

// apply checks and applies one command. A returned error is a store
// error (retry); a rejection is an answer with Code set.
func (ib *inbox) apply(ctx context.Context, cmd *inboxCommand) (*inboxAnswer, error) {
	if err := cmd.validate(); err != nil {
		return reject(&inboxAnswer{}, err), nil
	}
	id := cmd.ID
	ans := &inboxAnswer{Kind: cmd.Kind}
	m, err := ib.marker(ctx, id)
	if err != nil {
		return ans, err
	}
	if m == nil && !cmd.Expires.IsZero() && !ib.opts.Clock.Now().Before(cmd.Expires) {
		return reject(ans, fmt.Errorf("%w: command %s from %s expired at %s", ErrCommandExpired, id, cmd.Client, cmd.Expires.UTC().Format(time.RFC3339))), nil
	}
	switch cmd.Kind {
	case CommandSubmit:
		err = ib.submit(ctx, cmd, m, ans)
	case CommandCancel:
		err = ib.cancel(ctx, cmd, m, ans)
	case CommandSignal:
		err = ib.signal(ctx, cmd, m, ans)
	case CommandClearSignal:
		err = ib.clearSignal(ctx, cmd, m, ans)
	case CommandRedrive:
		err = ib.redrive(ctx, cmd, m, ans)
	case CommandBulk:
		err = ib.bulk(ctx, cmd, ans)
	}
	if err != nil && codeOf(err) != "" {
		return reject(ans, err), nil
	}
	return ans, err
}

func reject(ans *inboxAnswer, err error) *inboxAnswer {
	ans.Code, ans.Error = codeOf(err), err.Error()
	if ans.Code == "" {
		ans.Code = codeInternal
	}
	return ans
}

// submit applies a Submit command (invariant 5).
func (ib *inbox) submit(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	rt := ib.rt
	if err := runstate.ValidateRunID(cmd.RunID); err != nil {
		return err
	}
	spec := runtime.RunSpec{RunID: cmd.RunID, Input: cmd.Input, Headers: cmd.Headers, Labels: cmd.Labels, KVWrites: cmd.KVWrites}
	inc, err := rt.Incarnation(ctx, cmd.RunID)
	if err != nil {
		return err
	}
	active, result := inc.Active, inc.Ended
	ans.RunID = cmd.RunID
	newly := false
	switch {
	case m == nil && active == "" && result != "":
		// The run ended and its result is retained: this command arrives
		// late (its sender died before the writer applied it, and the run
		// was submitted again meanwhile, as `tqw-dsl run` does when it
		// resumes). A submission is idempotent while the run's result is
		// retained, not only while it is active: starting it again would
		// run its steps twice.
		ans.NewlySubmitted = false
		return nil
	case m == nil:
		if err := ib.putMarker(ctx, cmd.ID, &inboxMarker{Kind: CommandSubmit, Active: active, Result: result}); err != nil {
			return err
		}
	case active != "" && active != m.Active:
		newly = true // the first attempt started this incarnation
	case active == "" && result != "" && result != m.Result:
		// An incarnation ended since the first attempt: the one that was
		// active then (a duplicate), or the one the attempt started.
		ans.NewlySubmitted = result != m.Active
		return nil
	}
	out, err := rt.Submit(ctx, spec)
	if err != nil {
		return err
	}
	ans.RunID, ans.JobID, ans.NewlySubmitted = out.RunID, out.JobID, out.NewlySubmitted || newly
	return nil
}

// cancel applies a Cancel command (invariant 5).
func (ib *inbox) cancel(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	rt := ib.rt
	if err := runstate.ValidateRunID(cmd.RunID); err != nil {
		return err
	}
	ans.RunID = cmd.RunID
	inc, err := rt.Incarnation(ctx, cmd.RunID)
	if err != nil {
		return err
	}
	if m == nil {
		if inc.Active == "" {
			return nil // no run to cancel: false, nothing written
		}
		if err := ib.putMarker(ctx, cmd.ID, &inboxMarker{Kind: CommandCancel, Active: inc.Active}); err != nil {
			return err
		}
	} else if inc.Active != m.Active {
		// The incarnation this command meant ended since the first
		// attempt; never cancel a newer one.
		ans.OK = inc.Ended == m.Active && inc.Status == runstate.Cancelled
		return nil
	}
	ans.OK, err = rt.Cancel(ctx, cmd.RunID)
	return err
}

// signal applies a Signal command (invariant 3). The checks of
// SendSignal (RequireWaiting, the SignalValidator) run before the first
// attempt writes anything; a continuation skips them, the signal having
// been accepted.
func (ib *inbox) signal(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	rt := ib.rt
	if err := runtime.ValidateSignal(cmd.Key, cmd.Payload); err != nil {
		return err
	}
	mk := inboxMarkerKey(cmd.ID)
	defer func() {
		if ans.Signal == signal.Buffered.String() && m != nil {
			ans.SignalExpires = rt.SignalExpiry(m.Buf)
		}
	}()
	if m == nil {
		if err := rt.AdmitSignal(ctx, cmd.Key, cmd.Payload, signal.Options{RequireWaiting: cmd.RequireWaiting}); err != nil {
			return err
		}
		m = &inboxMarker{Kind: CommandSignal, Buf: rt.SignalValue(cmd.Payload), AtMs: rt.Clock().Now().UnixMilli()}
		mb, err := encodeMarker(m)
		if err != nil {
			return err
		}
		err = rt.BufferSignal(ctx, cmd.Key, m.Buf, queue.KVWrite{Key: mk, Value: mb})
		if errors.Is(err, runtime.ErrRecordExists) {
			// Only another drainer of this store could have written the
			// marker; follow its record.
			if m, err = ib.marker(ctx, cmd.ID); err != nil || m == nil {
				return fmt.Errorf("remote: signal command %s: marker vanished: %w", cmd.ID, err)
			}
		} else if err != nil {
			return err
		}
	}
	if m.Outcome != "" {
		ans.Signal = m.Outcome
		return nil
	}
	cur, err := rt.SignalBuffered(ctx, cmd.Key)
	if err != nil {
		return err
	}
	if !bytes.Equal(cur, m.Buf) {
		// Consumed by a registering waiter (or cleared) since the buffer
		// write, or replaced by a later signal: never buffer again.
		ans.Signal = outcomeOfBuffer(cur).String()
		return nil
	}
	done := *m
	done.Outcome = signal.Delivered.String()
	mb, err := encodeMarker(&done)
	if err != nil {
		return err
	}
	// The wake consumes the buffer entry and records the outcome in the
	// marker in one commit.
	out, err := rt.DeliverSignal(ctx, cmd.Key, m.Buf, queue.KVWrite{Key: mk, Value: mb})
	if err != nil && (!ib.lastTry || errors.Is(err, kv.ErrCommitUncertain)) {
		// Retry the wake at the next pass; a wake that may have been
		// applied is never reported as buffered.
		return err
	}
	if err != nil {
		// The signal is durably buffered: a waiter consumes it at its
		// registration or its timeout, as with Runtime.Signal.
		ib.log.Warn("signal buffered; waking its waiter failed", "key", cmd.Key, "err", err)
	}
	ans.Signal = out.String()
	return nil
}

// outcomeOfBuffer is the outcome reported once the buffer no longer holds
// a command's signal: consumed (empty) counts as delivered, as in Signal.
func outcomeOfBuffer(cur []byte) signal.Outcome {
	if cur == nil {
		return signal.Delivered
	}
	return signal.Buffered
}

// clearSignal applies a ClearSignal command (invariant 4).
func (ib *inbox) clearSignal(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	if err := runtime.ValidateSignal(cmd.Key, nil); err != nil {
		return err
	}
	if m != nil {
		ans.OK = m.Cleared
		return nil
	}
	mb, err := encodeMarker(&inboxMarker{Kind: CommandClearSignal, Cleared: true, AtMs: ib.rt.Clock().Now().UnixMilli()})
	if err != nil {
		return err
	}
	ans.OK, err = ib.rt.ClearSignalWith(ctx, cmd.Key, queue.KVWrite{Key: inboxMarkerKey(cmd.ID), Value: mb})
	if errors.Is(err, runtime.ErrRecordExists) {
		// Another drainer of this store applied the command meanwhile:
		// follow its marker.
		if m, err = ib.marker(ctx, cmd.ID); err != nil || m == nil {
			return fmt.Errorf("remote: clear signal command %s: marker vanished: %w", cmd.ID, err)
		}
		ans.OK = m.Cleared
		return nil
	}
	return err
}
