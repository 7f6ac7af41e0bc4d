package lease

import (
	"context"
	"time"
)

// Gate is what work consults before it starts under a writer lease: the
// runtime's worker before it claims or runs a step, the inbox of
// runtime/remote before it applies a command. *Lease implements it; a
// test passes a fake (internal/leasetest).
type Gate interface {
	// AwaitValid returns nil once the lease is valid for at least atLeast
	// from now, blocks while it is not, and returns an error wrapping
	// ErrLost once it is lost for good (or ctx's error).
	AwaitValid(ctx context.Context, atLeast time.Duration) error
	// Lost is closed when the lease is lost for good.
	Lost() <-chan struct{}
}

var _ Gate = (*Lease)(nil)
