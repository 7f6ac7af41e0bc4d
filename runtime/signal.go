package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Durable signals live in three caller-KV key spaces:
//   - signals/buf/<key>: a signal that arrived while no waiter was
//     registered (one per key, the latest wins);
//   - signals/wait/<key>: the job id of the step scheduled to wait on key;
//   - signals/delivered/<run>/<step>: a buffered signal consumed for that
//     step, so every redelivery of the step observes the same payload.
// A waiter registers in the settlement of the step that returned
// ContinueOnSignal, consuming a buffered signal in the same commit; a
// signal for a registered waiter wakes its scheduled job with the payload,
// which stays on the job record for redeliveries; a waiter promoted by its
// timeout consumes a signal buffered meanwhile when it is claimed.

// SignalOutcome reports what Signal did.
type SignalOutcome uint8

const (
	// Delivered means a waiting run was woken with the payload.
	Delivered SignalOutcome = iota + 1
	// Buffered means no waiter was woken; the signal is held durably under
	// its key for the next waiter, replacing any earlier buffered signal.
	// A waiter registering at the same moment may still pick it up at
	// once: Buffered never loses a signal, but may under-report delivery.
	Buffered
)

// String returns "delivered" or "buffered".
func (o SignalOutcome) String() string {
	switch o {
	case Delivered:
		return "delivered"
	case Buffered:
		return "buffered"
	}
	return fmt.Sprintf("SignalOutcome(%d)", uint8(o))
}

// MaxSignalPayload bounds a signal's payload.
const MaxSignalPayload = queue.MaxKVValueSize - 1

// Signal delivers payload to the run waiting on key, or buffers it for the
// next waiter. The buffer write is durable before anything else, so a
// signal is never lost once Signal returned; a waiter registering
// concurrently picks it up in its own settlement. Cost: one durable commit
// to buffer, plus one to wake a waiter.
func (rt *Runtime) Signal(ctx context.Context, key string, payload []byte) (SignalOutcome, error) {
	if err := validateSignalKey(key); err != nil {
		return 0, err
	}
	if len(payload) > MaxSignalPayload {
		return 0, fmt.Errorf("runtime: signal %q: %w: payload of %d bytes, the limit is %d", key, ErrValueTooLarge, len(payload), MaxSignalPayload)
	}
	buf := encodeSignal(payload)
	if err := rt.q.KVPut(ctx, sigBufKey(key), buf); err != nil {
		return 0, fmt.Errorf("runtime: signal %q: buffer: %w", key, err)
	}
	waiter, err := kvGet(ctx, rt.q, sigWaitKey(key))
	if err != nil {
		return Buffered, err
	}
	if waiter == nil {
		// No waiter, unless one registering concurrently consumed the
		// buffer (and removed its index entry) between the two reads.
		cur, err := kvGet(ctx, rt.q, sigBufKey(key))
		if err == nil && cur == nil {
			return Delivered, nil
		}
		return Buffered, err
	}
	jobID := string(waiter)
	res, err := rt.q.WakeScheduled(ctx, jobID, payload)
	if err != nil {
		// The signal is buffered; the waiter consumes it at its timeout.
		return Buffered, fmt.Errorf("runtime: signal %q: wake job %s: %w", key, jobID, err)
	}
	if res == queue.Woken {
		rt.compareAndDelete(ctx, sigBufKey(key), buf)
		rt.compareAndDelete(ctx, sigWaitKey(key), waiter)
		return Delivered, nil
	}
	// The waiter is no longer scheduled: its timeout fired, its run was
	// cancelled, or a concurrent registration check woke it with this
	// very signal.
	rt.compareAndDelete(ctx, sigWaitKey(key), waiter)
	if job, err := rt.q.GetJob(ctx, jobID); err == nil && !job.WokenAt.IsZero() && bytes.Equal(job.WakePayload, payload) {
		rt.compareAndDelete(ctx, sigBufKey(key), buf)
		return Delivered, nil
	}
	if cur, err := kvGet(ctx, rt.q, sigBufKey(key)); err == nil && cur == nil {
		return Delivered, nil // consumed by the waiter meanwhile
	}
	return Buffered, nil
}

// ClearSignal discards the signal buffered under key and reports whether
// there was one.
func (rt *Runtime) ClearSignal(ctx context.Context, key string) (bool, error) {
	if err := validateSignalKey(key); err != nil {
		return false, err
	}
	for {
		cur, err := kvGet(ctx, rt.q, sigBufKey(key))
		if err != nil || cur == nil {
			return false, err
		}
		ok, err := rt.q.KVCompareAndDelete(ctx, sigBufKey(key), cur)
		if err != nil {
			return false, fmt.Errorf("runtime: clear signal %q: %w", key, err)
		}
		if ok {
			return true, nil
		}
	}
}

// compareAndDelete removes key if it still holds expected. A failure only
// leaves residue that the next resolution of the key overwrites or ignores.
func (rt *Runtime) compareAndDelete(ctx context.Context, key string, expected []byte) {
	if _, err := rt.q.KVCompareAndDelete(ctx, key, expected); err != nil && !errors.Is(err, queue.ErrNotFound) {
		rt.log.Debug("signal entry removal failed", "key", key, "err", err)
	}
}

// liveWaiter returns the job id of the waiter registered for key while it
// is still scheduled, or "".
func (rt *Runtime) liveWaiter(ctx context.Context, key string) (string, error) {
	w, err := kvGet(ctx, rt.q, sigWaitKey(key))
	if err != nil || w == nil {
		return "", err
	}
	job, err := rt.q.GetJob(ctx, string(w))
	if errors.Is(err, queue.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if job.State == queue.StateScheduled {
		return job.ID, nil
	}
	return "", nil
}

// afterRegister closes the race between a registration and a concurrent
// Signal: a signal buffered after the registration read the buffer, whose
// Signal call did not yet see the waiter index, is delivered here.
func (rt *Runtime) afterRegister(ctx context.Context, key, jobID string) {
	buf, err := kvGet(ctx, rt.q, sigBufKey(key))
	if err != nil || buf == nil {
		return
	}
	payload, err := decodeSignal(buf)
	if err != nil {
		rt.log.Warn("dropping undecodable buffered signal", "key", key, "err", err)
		rt.compareAndDelete(ctx, sigBufKey(key), buf)
		return
	}
	res, err := rt.q.WakeScheduled(ctx, jobID, payload)
	if err != nil {
		rt.log.Debug("waking a new waiter for a buffered signal failed; its timeout consumes it", "key", key, "err", err)
		return
	}
	if res == queue.Woken {
		rt.compareAndDelete(ctx, sigBufKey(key), buf)
		rt.compareAndDelete(ctx, sigWaitKey(key), []byte(jobID))
	}
}

// resolveSignal returns the signal a claimed step observes, and the
// delivered records to delete with its settlement.
func (rt *Runtime) resolveSignal(ctx context.Context, job *queue.Job, runID string, n int) ([]byte, []string, error) {
	if job.Headers[HeaderSignalDelivered] != "" {
		dk := deliveredKey(runID, n)
		b, err := kvGet(ctx, rt.q, dk)
		if err != nil {
			return nil, nil, err
		}
		if b == nil {
			rt.log.Warn("delivered signal record is missing", "run", runID, "step", n)
			return nil, nil, nil
		}
		p, err := decodeSignal(b)
		return p, []string{dk}, err
	}
	key := job.Headers[HeaderSignalWait]
	if key == "" {
		return nil, nil, nil
	}
	rt.compareAndDelete(ctx, sigWaitKey(key), []byte(job.ID))
	if !job.WokenAt.IsZero() {
		// A signal woke the job; its payload is on the job record, so every
		// redelivery observes it.
		if job.WakePayload == nil {
			return []byte{}, nil, nil
		}
		return job.WakePayload, nil, nil
	}
	// The timeout promoted the job. A prior attempt may already have
	// consumed a buffered signal into the delivered record.
	dk := deliveredKey(runID, n)
	if b, err := kvGet(ctx, rt.q, dk); err != nil {
		return nil, nil, err
	} else if b != nil {
		p, err := decodeSignal(b)
		return p, []string{dk}, err
	}
	// A signal buffered after the registration read the buffer, which did
	// not win the wake, is consumed now: recorded first, then removed from
	// the buffer, so a retry of this step observes the same signal.
	b, err := kvGet(ctx, rt.q, sigBufKey(key))
	if err != nil || b == nil {
		return nil, nil, err
	}
	p, err := decodeSignal(b)
	if err != nil {
		return nil, nil, err
	}
	if err := rt.q.KVPut(ctx, dk, b); err != nil {
		return nil, nil, err
	}
	rt.compareAndDelete(ctx, sigBufKey(key), b)
	return p, []string{dk}, nil
}
