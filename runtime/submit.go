package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// RunSpec describes a run to submit.
type RunSpec struct {
	// RunID names the run; empty means a fresh ULID. See runstate.ValidateRunID.
	RunID string
	// Input is step 0's payload.
	Input []byte
	// Headers thread through every step and reach the terminal hook; names
	// under "workflow." are rejected.
	Headers map[string]string
	// Labels tag the run for ListRuns filters (ListOptions.Labels), which
	// find them through an index; they are kept with the run's status, not
	// sent with each step. See runstate.ValidateLabels.
	Labels map[string]string
	// KVWrites are caller-KV writes committed atomically with step 0's
	// enqueue; a duplicate submission drops them. Keys under "workflow/"
	// are rejected.
	KVWrites map[string][]byte
	// CancelHandlers makes the run's first Cancel go to the runner rather
	// than end the run: the step the run is at is discarded, and the run
	// goes on to a step whose deliveries carry Step.Cancelled, to run its
	// handlers and end the run. A Cancel while that runs ends the run.
	CancelHandlers bool
}

// SubmitOutcome reports a Submit.
type SubmitOutcome struct {
	RunID string
	// JobID is the queue job of the run's current step.
	JobID string
	// NewlySubmitted is false when an active run with the same id and the
	// same input already existed; nothing was written then.
	NewlySubmitted bool
}

// Validate checks spec as Submit does, without a request: the run id
// (runstate.ValidateRunID; an empty one passes, Submit picks a fresh one), headers
// outside the reserved "workflow." prefix, labels (runstate.ValidateLabels) and KV writes outside ReservedKVPrefix
// (ErrReserved) of at most queue.MaxKVValueSize (ErrValueTooLarge), so a
// process that submits through another (runtime/remote's Client) refuses
// a spec before it sends it.
func (spec RunSpec) Validate() error {
	if spec.RunID != "" {
		if err := runstate.ValidateRunID(spec.RunID); err != nil {
			return err
		}
	}
	if err := validateUserHeaders(spec.Headers); err != nil {
		return fmt.Errorf("submit run %s: %w", spec.RunID, err)
	}
	if err := runstate.ValidateLabels(spec.Labels); err != nil {
		return fmt.Errorf("submit run %s: %w", spec.RunID, err)
	}
	for k, v := range spec.KVWrites {
		if err := validateAppKey(k); err != nil {
			return fmt.Errorf("submit run %s: RunSpec.KVWrites: %w", spec.RunID, err)
		}
		if len(v) > queue.MaxKVValueSize {
			return fmt.Errorf("submit run %s: %w: RunSpec.KVWrites[%q] is %d bytes, the limit is %d",
				spec.RunID, ErrValueTooLarge, k, len(v), queue.MaxKVValueSize)
		}
	}
	return nil
}

// Submit starts a run. It is idempotent on (run id, input): submitting an
// active run again with the same input returns NewlySubmitted == false;
// with a different input it fails with ErrInputMismatch, also across
// restarts (the durable run record holds the input's SHA-256). A run id
// whose run terminated is free again. Cost: one durable commit.
func (rt *Runtime) Submit(ctx context.Context, spec RunSpec) (SubmitOutcome, error) {
	runID := spec.RunID
	if runID == "" {
		runID = rt.newID()
	}
	spec.RunID = runID
	if err := spec.Validate(); err != nil {
		return SubmitOutcome{}, err
	}
	sum := sha256.Sum256(spec.Input)
	if out, ok, err := rt.existingRun(ctx, runID, sum[:]); err != nil || ok {
		return out, err
	}

	nonce, jobID := rt.newID(), rt.newID()
	headers := userHeaders(spec.Headers)
	rec, err := encodeRecord(&runRecord{Nonce: nonce, InputHash: sum[:], SubmittedMs: rt.clock.Now().UnixMilli(), Headers: headers,
		Labels: copyLabels(spec.Labels), CancelHandlers: spec.CancelHandlers})
	if err != nil {
		return SubmitOutcome{}, err
	}
	ptr, err := encodeRecord(&stepPointer{Nonce: nonce, Step: 0, JobID: jobID})
	if err != nil {
		return SubmitOutcome{}, err
	}
	puts := []queue.KVWrite{{Key: runKey(runID), Value: rec}, {Key: stepKey(runID), Value: ptr}}
	puts = append(puts, labelWrites(spec.Labels, runID, nonce)...)
	appKeys := make([]string, 0, len(spec.KVWrites))
	for k := range spec.KVWrites {
		appKeys = append(appKeys, k)
	}
	sort.Strings(appKeys)
	for _, k := range appKeys {
		puts = append(puts, queue.KVWrite{Key: k, Value: spec.KVWrites[k]})
	}
	res, err := rt.q.EnqueueWithKV(ctx, rt.cfg.queueName, spec.Input, queue.EnqueueOptions{
		ID: jobID, DedupKey: dedupKey(runID, 0), MaxAttempts: rt.cfg.maxAttempts,
		Headers: stepHeaders(headers, runID, nonce, 0),
	}, puts)
	if err != nil {
		return SubmitOutcome{}, fmt.Errorf("submit run %s: %w", runID, err)
	}
	if res.Duplicate {
		// A concurrent Submit of the same id won the dedup key; its record
		// decides between duplicate and mismatch.
		if out, ok, err := rt.existingRun(ctx, runID, sum[:]); err != nil || ok {
			return out, err
		}
		return SubmitOutcome{RunID: runID, JobID: res.ID}, nil
	}
	// The submission's share of its WAL PUT goes into the run's totals
	// with its first settlement.
	rt.pending.add(runID, &totalsRecord{Puts: res.WALShare})
	return SubmitOutcome{RunID: runID, JobID: jobID, NewlySubmitted: true}, nil
}

// existingRun checks the durable run record of runID against inputHash.
func (rt *Runtime) existingRun(ctx context.Context, runID string, inputHash []byte) (SubmitOutcome, bool, error) {
	rec, err := loadRun(ctx, rt.q, runID)
	if err != nil || rec == nil {
		return SubmitOutcome{}, false, err
	}
	if !bytes.Equal(rec.InputHash, inputHash) {
		return SubmitOutcome{}, false, fmt.Errorf("submit run %s: %w; choose a fresh run id for a new run", runID, ErrInputMismatch)
	}
	out := SubmitOutcome{RunID: runID}
	if ptr, err := loadPointer(ctx, rt.q, runID); err != nil {
		return SubmitOutcome{}, false, err
	} else if ptr != nil {
		out.JobID = ptr.JobID
	}
	return out, true, nil
}

// kvGetter is the read surface shared by queue.Queue and queue.Reader.
type kvGetter interface {
	KVGet(ctx context.Context, key string) ([]byte, error)
}

func kvGet(ctx context.Context, r kvGetter, key string) ([]byte, error) {
	v, err := r.KVGet(ctx, key)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: read %s: %w", key, err)
	}
	return v, nil
}

// loadRun returns the run record of runID, or nil when the run is not active.
func loadRun(ctx context.Context, r kvGetter, runID string) (*runRecord, error) {
	b, err := kvGet(ctx, r, runKey(runID))
	if err != nil || b == nil {
		return nil, err
	}
	rec, err := decodeRunRecord(b)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", runID, err)
	}
	return rec, nil
}

// loadPointer returns the step pointer of runID, or nil.
func loadPointer(ctx context.Context, r kvGetter, runID string) (*stepPointer, error) {
	b, err := kvGet(ctx, r, stepKey(runID))
	if err != nil || b == nil {
		return nil, err
	}
	p, err := decodeStepPointer(b)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", runID, err)
	}
	return p, nil
}

// stepHeaders returns the headers of step n: the user's plus the runtime's.
func stepHeaders(user map[string]string, runID, nonce string, n int, extra ...string) map[string]string {
	h := make(map[string]string, len(user)+3+len(extra)/2)
	for k, v := range user {
		h[k] = v
	}
	h[headerRunID] = runID
	h[headerStep] = strconv.Itoa(n)
	h[headerRunNonce] = nonce
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}
