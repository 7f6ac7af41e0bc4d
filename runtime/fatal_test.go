package runtime

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

func TestIsFatal(t *testing.T) {
	for _, err := range []error{queue.ErrClosed, kv.ErrFenced, kv.ErrClosed, kv.ErrStopped, lease.ErrLost, &lease.LostError{Where: "writer-lease"}} {
		if !IsFatal(fmt.Errorf("claim: %w", err)) {
			t.Errorf("IsFatal(%v) = false; want true", err)
		}
	}
	for _, err := range []error{nil, errors.New("503 slow down"), kv.ErrCommitUncertain, queue.ErrNotFound} {
		if IsFatal(err) {
			t.Errorf("IsFatal(%v) = true; want false", err)
		}
	}
}
