package queue_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// A job's life: enqueue, claim, ack with an effect that enqueues a
// follow-up job and records a result, both in the ack's commit.
func Example() {
	ctx := context.Background()
	q, err := queue.Open(ctx, mem.New(), queue.Options{
		Clock:  clock.NewMock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	res, _ := q.Enqueue(ctx, "emails", []byte("to: ada"), queue.EnqueueOptions{DedupKey: "welcome-ada"})
	dup, _ := q.Enqueue(ctx, "emails", []byte("to: ada"), queue.EnqueueOptions{DedupKey: "welcome-ada"})
	fmt.Println("duplicate:", dup.Duplicate, dup.ID == res.ID)

	c, _ := q.Claim(ctx, "emails")
	fmt.Printf("claimed %q, attempt %d\n", c.Job.Payload, c.Job.Attempts)
	err = q.Ack(ctx, c, &queue.SettlementEffects{
		Enqueue: []queue.NewJob{{Queue: "audit", Payload: []byte("sent welcome to ada")}},
		KVPuts:  []queue.KVWrite{{Key: "sent/ada", Value: []byte("welcome")}},
	})
	fmt.Println("ack:", err)

	v, _ := q.KVGet(ctx, "sent/ada")
	s, _ := q.Stats(ctx, "audit")
	fmt.Printf("kv %s, audit pending %d\n", v, s.Pending)
	// Output:
	// duplicate: true true
	// claimed "to: ada", attempt 1
	// ack: <nil>
	// kv welcome, audit pending 1
}
