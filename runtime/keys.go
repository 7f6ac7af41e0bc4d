package runtime

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"
)

// Reserved names.
const (
	// reservedHeaderPrefix starts every header the runtime sets on step jobs;
	// Submit rejects user headers that start with it.
	reservedHeaderPrefix = "workflow."
	// ReservedKVPrefix starts every caller-KV key the runtime owns; Submit
	// and Step.Effects reject application keys that start with it.
	ReservedKVPrefix = "workflow/"
)

// Headers the runtime sets on step jobs.
const (
	// headerRunID carries the run id.
	headerRunID = "workflow.run_id"
	// headerStep carries the zero-based step number.
	headerStep = "workflow.step"
	// headerRunNonce names the run's incarnation, so a step job left over
	// from an earlier run under the same id is recognised and dropped.
	headerRunNonce = "workflow.run_nonce"
	// headerSignalWait carries the correlation key a scheduled step waits on.
	headerSignalWait = "workflow.signal_wait"
	// headerSignalDelivered marks a step whose signal was consumed from the
	// buffer at registration; the payload is in the delivered record.
	headerSignalDelivered = "workflow.signal_delivered"
)

// Caller-KV layout (all under ReservedKVPrefix). Invariants:
//   - runs/<id> and steps/<id> exist exactly while the run is active; the
//     terminating commit deletes both and writes results/<id>.
//   - steps/<id> names the run's one live step job; every transition
//     rewrites it in the commit that enqueues the next step.
//   - signals/wait/<key> maps a correlation key to the job waiting on it;
//     an entry whose job is no longer scheduled is stale and ignored.
//   - labels/<k>=<escaped v>/<id> indexes a run's labels from its
//     submission until its result expires; the value is the run's nonce.
//   - sealq/<finished>/<id> hands a finished run to the sealer once its
//     end is handled (Options.Sealing).
//   - resume/<id> holds a failed or cancelled run's last state, for
//     Redrive, from its end until its result goes (sealed with it).
//   - sealed/runs/<id> is a sealed run's row (nonce, segment, state);
//     sealed/seg/<seq> a segment's catalog entry; sealed/next the next
//     segment number.
const (
	kvRuns        = ReservedKVPrefix + "runs/"
	kvSteps       = ReservedKVPrefix + "steps/"
	kvCancel      = ReservedKVPrefix + "cancel/"
	kvResults     = ReservedKVPrefix + "results/"
	kvExpiry      = ReservedKVPrefix + "expiry/"
	kvTerminals   = ReservedKVPrefix + "terminals/"
	kvSigBuf      = ReservedKVPrefix + "signals/buf/"
	kvSigWait     = ReservedKVPrefix + "signals/wait/"
	kvSigDelivery = ReservedKVPrefix + "signals/delivered/"
	kvTotals      = ReservedKVPrefix + "totals/"
	kvLabels      = ReservedKVPrefix + "labels/"
	kvSealQ       = ReservedKVPrefix + "sealq/"
	kvSealed      = ReservedKVPrefix + "sealed/"
	// kvResume holds a failed or cancelled run's last state (redrive.go).
	kvResume = ReservedKVPrefix + "resume/"
)

// ownKVPrefixes are the prefixes above: ControlKVPrefix leaves none of
// their first segments to a control plane (TestControlKVPrefix checks
// every prefix constant of this file is listed).
var ownKVPrefixes = []string{kvRuns, kvSteps, kvCancel, kvResults, kvExpiry, kvTerminals, kvSigBuf, kvSigWait, kvSigDelivery, kvTotals, kvLabels, kvSealQ, kvSealed, kvResume}

func runKey(runID string) string    { return kvRuns + runID }
func stepKey(runID string) string   { return kvSteps + runID }
func cancelKey(runID string) string { return kvCancel + runID }
func resultKey(runID string) string { return kvResults + runID }
func sigBufKey(key string) string   { return kvSigBuf + key }
func sigWaitKey(key string) string  { return kvSigWait + key }
func deliveredKey(runID string, n int) string {
	return kvSigDelivery + runID + "/" + strconv.Itoa(n)
}

// timedKey is prefix + 16 hex digits of Unix milliseconds + "/" + runID, so a
// scan from the start of prefix visits markers oldest first.
func timedKey(prefix string, t time.Time, runID string) string {
	return fmt.Sprintf("%s%016x/%s", prefix, uint64(max(t.UnixMilli(), 0)), runID)
}

// parseTimedKey splits a timedKey back into its time and run id.
func parseTimedKey(prefix, key string) (time.Time, string, error) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) < 18 || rest[16] != '/' {
		return time.Time{}, "", fmt.Errorf("%w: marker key %q", ErrCorruptRecord, key)
	}
	ms, err := strconv.ParseUint(rest[:16], 16, 63)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: marker key %q: %w", ErrCorruptRecord, key, err)
	}
	return time.UnixMilli(int64(ms)), rest[17:], nil
}

func validateSignalKey(key string) error { return signal.CheckKey(key) }

// dedupKey is the dedup key of step n of a run.
func dedupKey(runID string, n int) string { return "run:" + runID + ":" + strconv.Itoa(n) }
