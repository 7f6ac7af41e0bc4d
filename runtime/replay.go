package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// loadReplay returns the replay record of step n of runID for payload, or
// nil. An undecodable record is ignored (the runner runs again).
func (rt *Runtime) loadReplay(ctx context.Context, runID string, n int, payload []byte) (*replayRecord, error) {
	key := rt.memo.ReplayKey(runID, n, payload)
	b, _, err := rt.store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replay record %s: %w", key, err)
	}
	rec, err := decodeReplayRecord(b)
	if err != nil {
		rt.log.Warn("ignoring undecodable replay record", "key", key, "err", err)
		return nil, nil
	}
	return rec, nil
}
