package interpreter

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// Concurrent first submissions of one workflow pin its definition once:
// one HEAD and one PUT, not one of each per submitter racing to find it
// missing (a server's first burst of submissions of a new workflow). On
// synctest's clock, so every submitter is inside the pin while the HEAD
// and the PUT are slow.
func TestConcurrentPinsOfADefinitionCostOneHeadAndOnePut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	src := "tqw: v1\nname: pinned-once\nsteps:\n  - {id: done, succeed: {}}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		slow := faults.New(mem.New(), 1)
		slow.Set(faults.Rule{Ops: faults.OpHead | faults.OpPut, Rate: 1, Latency: time.Millisecond})
		store := counting.New(slow)
		var pins pinSet
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if err := pinDefinitions(context.Background(), store, &pins, w); err != nil {
					t.Errorf("pin: %v", err)
				}
			})
		}
		wg.Wait()
		if c := store.Counts(); c.Heads != 1 || c.Puts != 1 {
			t.Fatalf("16 concurrent pins made %d HEADs and %d PUTs; want 1 and 1", c.Heads, c.Puts)
		}
		if err := pinDefinitions(context.Background(), store, &pins, w); err != nil {
			t.Fatal(err)
		}
		if c := store.Counts(); c.Heads != 1 || c.Puts != 1 {
			t.Fatalf("a pin after the first made requests: %d HEADs, %d PUTs in all", c.Heads, c.Puts)
		}
	})
}
