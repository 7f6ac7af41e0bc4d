package runtime

import (
	"errors"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// A fenced kv ends Run with kv.ErrFenced without a terminal hook (no
// notification loop) and with every worker slot busy, so no claim waits
// to notice it: Run watches the kv itself (issue 24).
func TestRunEndsWhenItsStoreIsFencedWithoutAHook(t *testing.T) {
	store := mem.New()
	e, done, cancelled := runWithEverySlotBusy(t, store)
	// A newer writer opens the store: the first one is fenced at its
	// next WAL write.
	newer, err := queue.Open(e.ctx, store, queue.Options{Logger: quietLogger(), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if _, err := e.rt.Submit(e.ctx, RunSpec{RunID: "fenced"}); !errors.Is(err, kv.ErrFenced) {
		t.Fatalf("Submit = %v; want kv.ErrFenced", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kv.ErrFenced) {
			t.Fatalf("Run = %v; want kv.ErrFenced", err)
		}
	case <-e.ctx.Done(): // failure guard only
		t.Fatal("Run did not return after its store was fenced")
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("Run returned without cancelling the running step")
	}
}
