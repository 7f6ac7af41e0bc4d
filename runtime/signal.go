package runtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Durable signals live in three caller-KV key spaces:
//   - signals/buf/<key>: a signal that arrived while no waiter was
//     registered (one per key, the latest wins), with its buffering time;
//     the retention sweep drops it after Options.SignalRetention;
//   - signals/wait/<key>: the job id of the step scheduled to wait on key;
//   - signals/delivered/<run>/<step>: a buffered signal consumed for that
//     step, so every redelivery of the step observes the same payload.
// A waiter registers in the settlement of the step that returned
// ContinueOnSignal, consuming a buffered signal in the same commit; a
// signal for a registered waiter wakes its scheduled job with the payload,
// which stays on the job record for redeliveries; a waiter promoted by its
// timeout consumes a signal buffered meanwhile when it is claimed. A
// signal is checked (signal.Validator, RequireWaiting) before its first
// write, so a refused one leaves nothing.

// SignalRetention returns how long a buffered signal is kept (0: until
// consumed or cleared).
func (rt *Runtime) SignalRetention() time.Duration { return rt.cfg.signalRetention }

// Signal delivers payload to the run waiting on key, or buffers it for the
// next waiter; it is SendSignal without options.
func (rt *Runtime) Signal(ctx context.Context, key string, payload []byte) (signal.Outcome, error) {
	res, err := rt.SendSignal(ctx, key, payload, signal.Options{})
	return res.Outcome, err
}

// SendSignal delivers payload to the run waiting on key, or buffers it for
// the next waiter. The signal.Validator checks it first: a refused payload
// (signal.ErrRejected) writes nothing. The buffer write is durable before
// anything else, so a signal is never lost once SendSignal returned; a
// waiter registering concurrently picks it up in its own settlement.
// Cost: one durable commit to buffer, plus one to wake a waiter; the
// validator's reads, and with RequireWaiting one read of the waiter, are
// memory reads on the writer.
func (rt *Runtime) SendSignal(ctx context.Context, key string, payload []byte, opts signal.Options) (signal.Result, error) {
	if err := rt.AdmitSignal(ctx, key, payload, opts); err != nil {
		return signal.Result{}, err
	}
	buf := encodeBufferedSignal(payload, rt.clock.Now())
	if err := rt.q.KVPut(ctx, sigBufKey(key), buf); err != nil {
		return signal.Result{}, fmt.Errorf("runtime: signal %q: buffer: %w", key, err)
	}
	out, err := rt.deliverBuffered(ctx, key, payload, buf)
	res := signal.Result{Outcome: out}
	if out == signal.Buffered {
		res.Expires = rt.SignalExpiry(buf)
	}
	return res, err
}

// ValidateSignal checks a signal's key (signal.ErrInvalidKey) and the
// size of its payload (ErrValueTooLarge, over signal.MaxPayload) as
// SendSignal does, without a runtime, so a process that sends signals to
// another (runtime/remote's Client) refuses them before it sends them.
func ValidateSignal(key string, payload []byte) error {
	if err := validateSignalKey(key); err != nil {
		return err
	}
	if len(payload) > signal.MaxPayload {
		return fmt.Errorf("runtime: signal %q: %w: payload of %d bytes, the limit is %d", key, ErrValueTooLarge, len(payload), signal.MaxPayload)
	}
	return nil
}

// AdmitSignal checks a signal as SendSignal does before anything is
// written, and writes nothing: its key and size (ValidateSignal), the
// signal.Validator (signal.ErrRejected), then with opts.RequireWaiting the
// waiter (signal.ErrNoWaiter). Any other error means it could not decide (a
// store error); the signal must then not be sent. Cost: the validator's
// reads and one read of the waiter, memory reads on the writer.
func (rt *Runtime) AdmitSignal(ctx context.Context, key string, payload []byte, opts signal.Options) error {
	if err := ValidateSignal(key, payload); err != nil {
		return err
	}
	if rt.validator != nil {
		if err := rt.validator.ValidateSignal(ctx, key, payload); err != nil {
			if errors.Is(err, signal.ErrRejected) {
				return err // the validator's text names the step and the reason
			}
			return fmt.Errorf("runtime: signal %q: check the payload: %w", key, err)
		}
	}
	if opts.RequireWaiting {
		w, err := rt.liveWaiter(ctx, key)
		if err != nil {
			return fmt.Errorf("runtime: signal %q: look for its waiter: %w", key, err)
		}
		if w == "" {
			return fmt.Errorf("runtime: signal %q: %w; nothing was buffered", key, signal.ErrNoWaiter)
		}
	}
	return nil
}

// SignalExpiry returns when the buffered signal value (SignalValue)
// expires under the signal retention in force (Options.SignalRetention): zero
// when it never does, and for a value that does not decode.
func (rt *Runtime) SignalExpiry(buf []byte) time.Time {
	_, at, err := decodeSignalTime(buf)
	if err != nil || at.IsZero() || rt.cfg.signalRetention <= 0 {
		return time.Time{}
	}
	return at.Add(rt.cfg.signalRetention)
}

// deliverBuffered wakes the waiter of key, if one is registered, with the
// signal just buffered as buf.
func (rt *Runtime) deliverBuffered(ctx context.Context, key string, payload, buf []byte) (signal.Outcome, error) {
	res, waiter, err := rt.wakeWaiter(ctx, key, payload, buf)
	if err == nil && res == queue.WakeConditionFailed {
		// The buffer no longer holds this signal (a newer one replaced
		// it, or it was consumed or cleared) or key's entry changed: wake
		// without touching either.
		if res, err = rt.q.WakeScheduled(ctx, string(waiter), payload); err == nil && res == queue.Woken {
			rt.compareAndDelete(ctx, sigWaitKey(key), waiter)
		}
	}
	if err != nil {
		// The signal is buffered; the waiter consumes it at its timeout.
		return signal.Buffered, fmt.Errorf("runtime: signal %q: wake its waiter: %w", key, err)
	}
	if res == queue.Woken {
		return signal.Delivered, nil
	}
	return rt.settledElsewhere(ctx, key, payload, buf, waiter, res)
}

// wakeWaiter is the one way a buffered signal wakes its waiter: it wakes
// the step registered under key with payload, buffered as buf, and in the
// same commit removes the buffered copy and the step's entry and writes
// puts, only while both still hold what was read (otherwise
// queue.WakeConditionFailed, nothing written). Removed afterwards, the
// woken step could wait on key again in between, consume this same
// signal a second time and have its new entry deleted. waiter is the
// entry read, nil when no step is registered (then res is "").
func (rt *Runtime) wakeWaiter(ctx context.Context, key string, payload, buf []byte, puts ...queue.KVWrite) (res queue.WakeOutcome, waiter []byte, err error) {
	waiter, err = kvGet(ctx, rt.q, sigWaitKey(key))
	if err != nil || waiter == nil {
		return "", nil, err
	}
	wait := queue.KVWrite{Key: sigWaitKey(key), Value: waiter}
	res, err = rt.q.WakeScheduledKV(ctx, string(waiter), payload, queue.KVBatch{
		Expect:  []queue.KVWrite{wait, {Key: sigBufKey(key), Value: buf}},
		Puts:    puts,
		Deletes: []string{wait.Key, sigBufKey(key)},
	})
	return res, waiter, err
}

// settledElsewhere says what became of the signal buffered as buf under
// key when wakeWaiter did not wake a step with it (res): Delivered when
// it left the buffer for a waiter meanwhile (a registration consumed it,
// or a registration's recheck woke its step with it), Buffered when it
// waits there for the next waiter. An entry whose step is no longer
// scheduled (its timeout fired, its run ended) is dropped.
func (rt *Runtime) settledElsewhere(ctx context.Context, key string, payload, buf, waiter []byte, res queue.WakeOutcome) (signal.Outcome, error) {
	if res == queue.NotScheduled || res == queue.NotFound {
		rt.compareAndDelete(ctx, sigWaitKey(key), waiter)
		if job, err := rt.q.GetJob(ctx, string(waiter)); err == nil && !job.WokenAt.IsZero() && bytes.Equal(job.WakePayload, payload) {
			rt.compareAndDelete(ctx, sigBufKey(key), buf)
			return signal.Delivered, nil
		}
	}
	cur, err := kvGet(ctx, rt.q, sigBufKey(key))
	if err != nil || cur != nil {
		return signal.Buffered, err
	}
	return signal.Delivered, nil
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
	return liveWaiter(ctx, rt.q, key)
}

// SignalWaiter returns the queue job of the step registered as waiting on
// key while it is still waiting, or "" when none is: what
// signal.Options.RequireWaiting asks for, read without writing. Cost:
// memory reads (on a Reader, nothing beyond its Refresh).
func (in *Inspector) SignalWaiter(ctx context.Context, key string) (string, error) {
	if err := validateSignalKey(key); err != nil {
		return "", err
	}
	return liveWaiter(ctx, in.r, key)
}

// SignalKeyHolder returns the run registered as waiting on key ("" when
// none): one waiter per key, so a step about to wait on a taken key fails
// as a step (the interpreter's signal.key_taken) rather than at its
// settlement. Cost: memory reads on the writer.
func (rt *Runtime) SignalKeyHolder(ctx context.Context, key string) (runID string, err error) {
	jobID, err := liveWaiter(ctx, rt.q, key)
	if err != nil || jobID == "" {
		return "", err
	}
	job, err := rt.q.GetJob(ctx, jobID)
	if errors.Is(err, queue.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return job.Headers[headerRunID], nil
}

func liveWaiter(ctx context.Context, r StateReader, key string) (string, error) {
	w, err := kvGet(ctx, r, sigWaitKey(key))
	if err != nil || w == nil {
		return "", err
	}
	job, err := r.GetJob(ctx, string(w))
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
	if _, _, err := rt.wakeWaiter(ctx, key, payload, buf); err != nil {
		rt.log.Debug("waking a new waiter for a buffered signal failed; its timeout consumes it", "key", key, "job", jobID, "err", err)
	}
}

// resolveSignal returns the signal a claimed step observes, and the
// delivered records to delete with its settlement.
func (rt *Runtime) resolveSignal(ctx context.Context, job *queue.Job, runID string, n int) ([]byte, []string, error) {
	if job.Headers[headerSignalDelivered] != "" {
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
	key := job.Headers[headerSignalWait]
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

// Signal values (buffer entries, delivered records, inbox markers) carry a
// one-byte format so an empty payload is a non-empty value:
//   - format 1: the payload;
//   - format 2: the buffering time (Unix ms, 8 bytes big-endian), then the
//     payload. Every signal buffered since retention exists has it.
const (
	signalFormat      byte = 1
	signalFormatTimed byte = 2
	signalTimeLen          = 8
)

// encodeSignal returns the untimed value of payload (format 1).
func encodeSignal(payload []byte) []byte {
	return append([]byte{signalFormat}, payload...)
}

// encodeBufferedSignal returns the value of payload buffered at at (format 2).
func encodeBufferedSignal(payload []byte, at time.Time) []byte {
	b := make([]byte, 1+signalTimeLen, 1+signalTimeLen+len(payload))
	b[0] = signalFormatTimed
	binary.BigEndian.PutUint64(b[1:], uint64(max(at.UnixMilli(), 0)))
	return append(b, payload...)
}

// decodeSignal returns the payload of a signal value of either format.
func decodeSignal(b []byte) ([]byte, error) {
	p, _, err := decodeSignalTime(b)
	return p, err
}

// decodeSignalTime returns the payload of a signal value and when it was
// buffered (zero for format 1).
func decodeSignalTime(b []byte) ([]byte, time.Time, error) {
	switch {
	case len(b) > 0 && b[0] == signalFormat:
		return append([]byte{}, b[1:]...), time.Time{}, nil
	case len(b) >= 1+signalTimeLen && b[0] == signalFormatTimed:
		ms := binary.BigEndian.Uint64(b[1:])
		if ms > 1<<62 {
			return nil, time.Time{}, fmt.Errorf("%w: signal value buffered at %d ms", ErrCorruptRecord, ms)
		}
		return append([]byte{}, b[1+signalTimeLen:]...), time.UnixMilli(int64(ms)), nil
	}
	return nil, time.Time{}, fmt.Errorf("%w: signal value with unknown format", ErrCorruptRecord)
}

// ListSignals returns buffered signals in key order; see
// Inspector.ListSignals.
func (rt *Runtime) ListSignals(ctx context.Context, opts signal.ListOptions) ([]signal.Info, error) {
	return rt.insp.ListSignals(ctx, opts)
}

// ListSignals returns the buffered signals (a signal no step has consumed
// yet) in key order, without their payloads. It writes nothing; on a
// Reader it costs nothing beyond the Reader's Refresh.
func (in *Inspector) ListSignals(ctx context.Context, opts signal.ListOptions) ([]signal.Info, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	after := ""
	if opts.After != "" {
		after = sigBufKey(opts.After)
	}
	page, err := in.r.KVScan(ctx, kvSigBuf, after, limit)
	if err != nil {
		return nil, fmt.Errorf("runtime: list buffered signals: %w", err)
	}
	out := make([]signal.Info, 0, len(page))
	for _, e := range page {
		p, at, err := decodeSignalTime(e.Value)
		if err != nil {
			return nil, fmt.Errorf("buffered signal %q: %w", e.Key[len(kvSigBuf):], err)
		}
		out = append(out, signal.Info{Key: e.Key[len(kvSigBuf):], Size: len(p), BufferedAt: at})
	}
	if err := in.durable(ctx); err != nil {
		return nil, err
	}
	return out, nil
}
