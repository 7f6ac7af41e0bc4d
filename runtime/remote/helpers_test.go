package remote

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"time"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime"
)

// The runtime's caller-KV keys the tests read to check what a command
// did (docs/STORE-LAYOUT.md); the runtime does not export them.
func runKey(runID string) string    { return runtime.ReservedKVPrefix + "runs/" + runID }
func stepKey(runID string) string   { return runtime.ReservedKVPrefix + "steps/" + runID }
func cancelKey(runID string) string { return runtime.ReservedKVPrefix + "cancel/" + runID }
func sigBufKey(key string) string   { return runtime.ReservedKVPrefix + "signals/buf/" + key }
func sigWaitKey(key string) string  { return runtime.ReservedKVPrefix + "signals/wait/" + key }

// bufferHolds reports whether the buffer value b holds payload. A signal
// value is a format byte, then with format 2 the buffering time (8
// bytes), then the payload.
func bufferHolds(b []byte, payload string) bool {
	switch {
	case len(b) >= 1 && b[0] == 1:
		return string(b[1:]) == payload
	case len(b) >= 9 && b[0] == 2:
		return string(b[9:]) == payload
	}
	return false
}

// validatingWaiter waits at step 0 on "k:<run>" and is its own
// SignalValidator: it refuses the payload "bad" and cannot decide on
// "store-error".
type validatingWaiter struct{}

func (v *validatingWaiter) RunStep(_ context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	if s.Number == 0 {
		return runtime.ContinueOnSignal([]byte("p"), "k:"+s.RunID, time.Hour), nil
	}
	return runtime.Succeed(s.Signal), nil
}

func (v *validatingWaiter) ValidateSignal(_ context.Context, _ string, payload []byte) error {
	switch string(payload) {
	case "bad":
		return fmt.Errorf("%w: %q is not a decision", signal.ErrRejected, payload)
	case "store-error":
		return errors.New("the store is away")
	}
	return nil
}

// yield lets other goroutines run while a test spins on a condition.
func yield() { goruntime.Gosched() }
