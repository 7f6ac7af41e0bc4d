package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The control surface: what a control plane needs to apply commands from
// other processes exactly once across its own crashes (the store inbox of
// runtime/remote; an HTTP API). Submit, Cancel and SendSignal apply a
// command; what follows lets a control plane replay one. Its own records
// (an applied-marker per command) live in the caller KV under a
// ControlKVPrefix, and the signal operations below commit such a record
// atomically with their own writes, since a signal, unlike a submission,
// is not idempotent.

// maxControlNameLen bounds the name of a ControlKVPrefix.
const maxControlNameLen = 32

// ControlKVPrefix returns the caller-KV prefix ReservedKVPrefix + name +
// "/" that the runtime leaves to the records of the control plane called
// name: the inbox of runtime/remote keeps its applied-markers under
// ControlKVPrefix("inbox"), "workflow/inbox/". The runtime never reads,
// writes or sweeps under it, and Submit and Step.Effects refuse it with
// the rest of ReservedKVPrefix. The control plane writes it through the
// queue's caller KV (Queue) or as the record of BufferSignal,
// DeliverSignal and ClearSignalWith. name is 1 to 32 lower-case ASCII
// letters, digits and '-' (ErrInvalidKey); the names of the runtime's own
// records ("runs", "signals", ...) are ErrReserved.
func ControlKVPrefix(name string) (string, error) {
	if name == "" || len(name) > maxControlNameLen || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return "", fmt.Errorf("%w: control namespace %q: want 1 to %d lower-case letters, digits and '-'", ErrInvalidKey, name, maxControlNameLen)
	}
	prefix := ReservedKVPrefix + name + "/"
	if slices.ContainsFunc(ownKVPrefixes, func(own string) bool { return strings.HasPrefix(own, prefix) }) {
		return "", fmt.Errorf("%w: control namespace %q holds the runtime's own records; pick another name", ErrReserved, name)
	}
	return prefix, nil
}

// checkControlRecord checks that key names a record under a
// ControlKVPrefix, so no control plane overwrites the runtime's records.
func checkControlRecord(key string) error {
	name, rest, ok := strings.Cut(strings.TrimPrefix(key, ReservedKVPrefix), "/")
	if !strings.HasPrefix(key, ReservedKVPrefix) || !ok || rest == "" {
		return fmt.Errorf("%w: control record %q: want a key under a ControlKVPrefix", ErrInvalidKey, key)
	}
	if _, err := ControlKVPrefix(name); err != nil {
		return fmt.Errorf("control record %q: %w", key, err)
	}
	return nil
}

// Incarnation names the runs that have carried one run id. A run id is
// free again once its run ended, so a control plane that replays a
// Submit or a Cancel after a crash compares the incarnation it saw before
// its first attempt with the one it sees now: an Active nonce that
// appeared since was started by that attempt, and a Cancel is only
// repeated on the run it was meant for.
type Incarnation struct {
	// Active is the nonce of the run active under the id ("" for none).
	Active string
	// Ended is the nonce of the last run that ended under the id, while
	// its result is retained (Options.ResultRetention; "" for none), and
	// Status how it ended.
	Ended  string
	Status runstate.TerminalStatus
}

// Incarnation returns the incarnation of runID. It writes nothing. Cost:
// memory reads on the writer.
func (rt *Runtime) Incarnation(ctx context.Context, runID string) (Incarnation, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return Incarnation{}, err
	}
	rec, err := loadRun(ctx, rt.q, runID)
	if err != nil {
		return Incarnation{}, err
	}
	var inc Incarnation
	if rec != nil {
		inc.Active = rec.Nonce
	}
	b, err := kvGet(ctx, rt.q, resultKey(runID))
	if err != nil || b == nil {
		return inc, err
	}
	r, err := decodeResultRecord(b)
	if err != nil {
		return Incarnation{}, fmt.Errorf("run %s: %w", runID, err)
	}
	inc.Ended, inc.Status = r.Nonce, r.Status
	return inc, nil
}

// SignalValue returns payload as the runtime buffers it now, stamped with
// the runtime clock's time. The value is opaque: a control plane that
// buffers a signal with BufferSignal keeps it in its own record to
// recognise that very signal later (SignalBuffered, DeliverSignal,
// SignalExpiry).
func (rt *Runtime) SignalValue(payload []byte) []byte {
	return encodeBufferedSignal(payload, rt.clock.Now())
}

// BufferSignal buffers the signal value (from SignalValue) under key and
// writes record (and the more records) in the same durable commit, only
// if none of their keys holds anything yet; otherwise it writes nothing
// and returns an error wrapping ErrRecordExists (an earlier attempt
// applied it, or another request holding one of the records did). Like
// SendSignal it replaces a signal buffered earlier under key; unlike it,
// it checks nothing (AdmitSignal does) and wakes no waiter (DeliverSignal
// does). Every record's key must lie under a ControlKVPrefix. Cost: one
// durable commit.
func (rt *Runtime) BufferSignal(ctx context.Context, key string, value []byte, record queue.KVWrite, more ...queue.KVWrite) error {
	if err := validateSignalKey(key); err != nil {
		return err
	}
	if _, _, err := decodeSignalTime(value); err != nil {
		return fmt.Errorf("runtime: signal %q: the value to buffer: %w", key, err)
	}
	records := append([]queue.KVWrite{record}, more...)
	expect := make([]queue.KVWrite, 0, len(records))
	keys := make([]string, 0, len(records))
	for _, r := range records {
		if err := checkControlRecord(r.Key); err != nil {
			return err
		}
		expect = append(expect, queue.KVWrite{Key: r.Key})
		keys = append(keys, r.Key)
	}
	ok, err := rt.q.KVApply(ctx, queue.KVBatch{
		Expect: expect,
		Puts:   append([]queue.KVWrite{{Key: sigBufKey(key), Value: value}}, records...),
	})
	if err != nil {
		return fmt.Errorf("runtime: signal %q: buffer: %w", key, err)
	}
	if !ok {
		return fmt.Errorf("runtime: signal %q: %w: one of %s", key, ErrRecordExists, strings.Join(keys, ", "))
	}
	return nil
}

// SignalBuffered returns the signal value buffered under key, nil when
// none is, so a control plane can tell whether the signal it buffered is
// still there (a waiter registering consumes it, a later signal replaces
// it). It writes nothing. Cost: a memory read on the writer.
func (rt *Runtime) SignalBuffered(ctx context.Context, key string) ([]byte, error) {
	if err := validateSignalKey(key); err != nil {
		return nil, err
	}
	return kvGet(ctx, rt.q, sigBufKey(key))
}

// DeliverSignal wakes the step waiting on key with the signal value that
// BufferSignal buffered, consuming it from the buffer and writing record
// (the control plane's note of the outcome) in the same commit, only
// while the buffer still holds value. It returns signal.Delivered when it
// woke the waiter, or when value left the buffer for a waiter meanwhile
// (a registration consumed it, or its recheck woke its step; record is
// then not rewritten); signal.Buffered, writing nothing, when no step
// waits on key (the signal stays for the next waiter) or the buffer holds
// another signal by then; and signal.Buffered with an error when the wake
// failed: the signal stays buffered for the next waiter, as with
// SendSignal, unless the error wraps kv.ErrCommitUncertain (the wake may
// have committed). record.Key must lie under a ControlKVPrefix. Cost: one
// durable commit when a step waits; memory reads otherwise.
func (rt *Runtime) DeliverSignal(ctx context.Context, key string, value []byte, record queue.KVWrite) (signal.Outcome, error) {
	if err := validateSignalKey(key); err != nil {
		return signal.Buffered, err
	}
	if err := checkControlRecord(record.Key); err != nil {
		return signal.Buffered, err
	}
	payload, err := decodeSignal(value)
	if err != nil {
		return signal.Buffered, fmt.Errorf("runtime: signal %q: the buffered value: %w", key, err)
	}
	res, waiter, err := rt.wakeWaiter(ctx, key, payload, value, record)
	if err != nil {
		return signal.Buffered, fmt.Errorf("runtime: signal %q: wake its waiter: %w", key, err)
	}
	if res == queue.Woken {
		return signal.Delivered, nil
	}
	return rt.settledElsewhere(ctx, key, payload, value, waiter, res)
}

// ClearSignalWith discards the signal buffered under key, as ClearSignal
// does, and writes record in the same commit, only if record's key holds
// nothing yet. It reports whether a signal was discarded: false, with
// nothing written, when none is buffered, and false with an error wrapping
// ErrRecordExists when record's key is taken (an earlier attempt applied
// it). record.Key must lie under a ControlKVPrefix. Cost: one durable
// commit when a signal is buffered.
func (rt *Runtime) ClearSignalWith(ctx context.Context, key string, record queue.KVWrite) (bool, error) {
	if err := validateSignalKey(key); err != nil {
		return false, err
	}
	if err := checkControlRecord(record.Key); err != nil {
		return false, err
	}
	bufKey := sigBufKey(key)
	for {
		cur, err := kvGet(ctx, rt.q, bufKey)
		if err != nil || cur == nil {
			return false, err
		}
		ok, err := rt.q.KVApply(ctx, queue.KVBatch{
			Expect:  []queue.KVWrite{{Key: bufKey, Value: cur}, {Key: record.Key}},
			Puts:    []queue.KVWrite{record},
			Deletes: []string{bufKey},
		})
		if err != nil {
			return false, fmt.Errorf("runtime: clear signal %q: %w", key, err)
		}
		if ok {
			return true, nil
		}
		// The buffer changed, or the record was written meanwhile.
		taken, err := kvGet(ctx, rt.q, record.Key)
		if err != nil {
			return false, err
		}
		if taken != nil {
			return false, fmt.Errorf("runtime: clear signal %q: %w: %s", key, ErrRecordExists, record.Key)
		}
	}
}
