package runtime

import (
	"context"
	"fmt"
)

// durableBarrier is implemented by a reader whose reads may include
// commits not yet durable (the writer's queue): Sync returns once they
// are.
type durableBarrier interface {
	Sync(ctx context.Context) error
}

// AwaitDurable returns once everything read from r so far is durable: the
// read barrier of every report (Inspector's answers, the interpreter's
// History, the HTTP API), called after the last read of what is reported,
// never before it. A reader that sees durable state only (a queue.Reader,
// or any reader without a Sync method) returns at once; the writer's
// queue, whose reads include commits on their way to the store, returns
// once the WAL PUT holding them has landed: free when nothing is pending,
// else that PUT's wait, at most kv.Options.CommitDelay longer while
// running steps' settlements are about to share it. A read that only
// follows an id from a durable answer to an object that never changes
// (a step job's payload, a pinned definition) needs no barrier of its own.
func AwaitDurable(ctx context.Context, r any) error {
	if b, ok := r.(durableBarrier); ok {
		if err := b.Sync(ctx); err != nil {
			return fmt.Errorf("runtime: wait for the state read to be durable: %w", err)
		}
	}
	return nil
}
