package kv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"weak"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// A value overwritten or deleted is garbage at once, not only after the
// next checkpoint: the writer remembers which chunks saw writes, not the
// written keys (which share their allocation with the values).
func TestReplacedValuesAreNotKeptUntilTheCheckpoint(t *testing.T) {
	opts := quietOpts()
	opts.DisableAutoCheckpoint = true
	db := mustOpen(t, mem.New(), opts)
	defer db.Close()
	for _, replace := range []string{"overwrite", "delete"} {
		key := "k-" + replace
		put(t, db, key, "the first value, which becomes garbage")
		v, err := db.Get(context.Background(), []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		first := weak.Make(&v[0])
		v = nil
		if err := db.Update(context.Background(), func(tx *Tx) error {
			if replace == "delete" {
				return tx.Delete([]byte(key))
			}
			return tx.Put([]byte(key), []byte("the second value"))
		}); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.GC()
		if first.Value() != nil {
			t.Errorf("%s: the first value is still reachable after it was replaced", replace)
		}
	}
}

// remap carries every written key's chunk over to the manifest a
// checkpoint switched to, whatever the two chunkings are.
func TestDirtySetRemapKeepsEveryWrittenKeyDirty(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	chunking := func() []chunkInfo {
		var cs []chunkInfo
		for k := 0; k < 100; k += 1 + rnd.IntN(30) {
			cs = append(cs, chunkInfo{first: fmt.Appendf(nil, "k%03d", k)})
		}
		if rnd.IntN(4) == 0 {
			return nil // a store with no chunks
		}
		return cs
	}
	for round := range 2000 {
		old, next := chunking(), chunking()
		d := newDirtySet(old)
		var keys [][]byte
		for range rnd.IntN(5) {
			k := fmt.Appendf(nil, "k%03d", rnd.IntN(110))
			keys = append(keys, k)
			d.mark(k)
		}
		r := d.remap(next)
		if r.any != (len(keys) > 0) {
			t.Fatalf("round %d: remapped any = %v after %d writes", round, r.any, len(keys))
		}
		for _, k := range keys {
			if !r.flags[chunkOf(next, k)] {
				t.Fatalf("round %d: key %s written, its chunk %d of %d not dirty after remap (old %d chunks)",
					round, k, chunkOf(next, k), len(next), len(old))
			}
		}
	}
}
