package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// guardCtx bounds a test that would hang on a broken Inbox; a failure
// guard only.
func guardCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestInboxStopsWhenStopped(t *testing.T) {
	ctx := guardCtx(t)
	mock := clock.NewMock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := ibxOpen(t, mem.New(), mock, nil)
	defer w.q.Close()
	in, err := NewInbox(w.rt, InboxOptions{NoNotify: true, BellEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mock.WaitForTimers(ctx, 1); err != nil { // waiting for its next pass
		t.Fatal(err)
	}
	in.Stop()
	select {
	case <-in.Stopped():
	default:
		t.Fatal("Stopped open after Stop returned")
	}
	if in.Err() != nil {
		t.Fatalf("Err = %v after Stop; want nil", in.Err())
	}
	if err := in.Start(ctx); err == nil {
		t.Fatal("a stopped Inbox started again")
	}
}

// An error that makes writing impossible ends the Inbox by itself:
// Stopped closes without a Stop and Err says why.
func TestInboxEndsByItselfWhenItsQueueCloses(t *testing.T) {
	ctx := guardCtx(t)
	mock := clock.NewMock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := ibxOpen(t, mem.New(), mock, nil)
	in, err := NewInbox(w.rt, InboxOptions{NoNotify: true, BellEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := in.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.Stopped():
	case <-ctx.Done():
		t.Fatal("the Inbox went on serving a closed queue")
	}
	if !errors.Is(in.Err(), queue.ErrClosed) {
		t.Fatalf("Err = %v; want queue.ErrClosed", in.Err())
	}
	in.Stop() // returns at once
}
