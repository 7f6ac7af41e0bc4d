package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/leasetest"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// TestLeaseGateInbox: the inbox applies no command while the lease is not
// valid, and stops with the lost lease.
func TestLeaseGateInbox(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	g := leasetest.New(false)
	w := ibxOpen(t, store, nil, nil, runtime.Options{LeaseGate: g, LeaseMargin: time.Second})
	t.Cleanup(func() { _ = w.q.Close() })
	id := ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k", Payload: []byte("1")})
	drained := make(chan error, 1)
	go func() {
		_, err := DrainInbox(ctx, w.rt, InboxOptions{})
		drained <- err
	}()
	g.WaitBlocked(t)
	if _, ok := ibxAnswer(t, store, id); ok || w.kv(sigBufKey("k")) != nil {
		t.Fatal("a command was applied while the lease was not valid")
	}
	g.Set(true)
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	if a, ok := ibxAnswer(t, store, id); !ok || a.Code != "" {
		t.Fatalf("answer %+v, %v", a, ok)
	}

	id = ibxSend(t, store, inboxCommand{Kind: CommandSignal, Key: "k2", Payload: []byte("2")})
	g.Lose()
	err := ServeInbox(ctx, w.rt, InboxOptions{})
	if !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ServeInbox with a lost lease: %v", err)
	}
	if _, ok := ibxAnswer(t, store, id); ok || w.kv(sigBufKey("k2")) != nil {
		t.Fatal("a command was applied after the lease was lost")
	}
}
