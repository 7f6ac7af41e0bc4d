package runtime

import (
	"context"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// sleepClock waits d on clock; false when ctx ended first.
func sleepClock(ctx context.Context, clock queue.Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
