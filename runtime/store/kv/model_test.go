package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// model is the plain in-memory reference the DB is compared against.
type model map[string][]byte

func (m model) clone() model {
	c := model{}
	for k, v := range m {
		c[k] = v
	}
	return c
}

func (m model) scan(r Range) []string {
	var keys []string
	for k := range m {
		if r.contains([]byte(k)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if r.Reverse {
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
	}
	if r.Limit > 0 && len(keys) > r.Limit {
		keys = keys[:r.Limit]
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + string(m[k])
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func collect(t *testing.T, scan func(context.Context, Range, func(k, v []byte) (bool, error)) error, r Range) []string {
	t.Helper()
	var out []string
	if err := scan(context.Background(), r, func(k, v []byte) (bool, error) {
		out = append(out, string(k)+"="+string(v))
		return true, nil
	}); err != nil {
		t.Fatalf("scan %+v: %v", r, err)
	}
	return out
}

// TestModel runs random operation sequences (puts, deletes, scans,
// transactions with conflicts, counter adds, reopen, crash-reopen,
// checkpoints, readers) against the model, comparing after every step.
// KV_MODEL_SEEDS sets the number of seeds (default 3000, 300 under -race
// or -short).
func TestModel(t *testing.T) {
	t.Parallel()
	def := 3000
	if raceEnabled || testing.Short() {
		def = 300
	}
	seeds := envInt("KV_MODEL_SEEDS", def)
	first := 1
	if s := envInt("KV_MODEL_SEED", 0); s > 0 {
		first, seeds = s, s
	}
	for seed := first; seed <= seeds; seed++ {
		if os.Getenv("KV_MODEL_DEBUG") != "" {
			t.Logf("seed %d", seed)
		}
		runModel(t, uint64(seed), 40)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	store := mem.New()
	opts := quietOpts()
	opts.Rand = rand.New(rand.NewPCG(seed, 1))
	opts.ChunkBytes = 64 + rng.IntN(256)
	opts.LargeValueThreshold = 40
	opts.CheckpointWALObjects = 2 + rng.IntN(8)
	db := mustOpen(t, store, opts)
	m := model{}
	key := func() []byte { return fmt.Appendf(nil, "k%02d", rng.IntN(24)) }
	val := func() []byte {
		n := rng.IntN(8)
		if rng.IntN(8) == 0 {
			n = 41 + rng.IntN(60) // a large value
		}
		return bytes.Repeat([]byte{byte('a' + rng.IntN(26))}, n)
	}
	rangeOf := func() Range {
		r := Range{Reverse: rng.IntN(2) == 0}
		if rng.IntN(3) > 0 {
			r.Start = key()
		}
		if rng.IntN(3) > 0 {
			r.End = key()
		}
		if rng.IntN(3) == 0 {
			r.Limit = 1 + rng.IntN(5)
		}
		return r
	}
	check := func(step int, what string) {
		t.Helper()
		r := rangeOf()
		got, want := collect(t, db.Scan, r), m.scan(r)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d step %d after %s: scan %+v\n got %v\nwant %v", seed, step, what, r, got, want)
		}
		all := collect(t, db.Scan, Range{})
		if fmt.Sprint(all) != fmt.Sprint(m.scan(Range{})) {
			t.Fatalf("seed %d step %d after %s: full scan\n got %v\nwant %v", seed, step, what, all, m.scan(Range{}))
		}
	}
	var reader *Reader
	defer func() {
		db.Close()
		if reader != nil {
			reader.Close()
		}
	}()
	for step := 0; step < steps; step++ {
		var what string
		switch op := rng.IntN(100); {
		case op < 30:
			what = "put"
			k, v := key(), val()
			commit := db.Update
			if rng.IntN(2) == 0 {
				commit = db.UpdateNonDurable
			}
			if err := commit(ctx, func(tx *Tx) error { return tx.Put(k, v) }); err != nil {
				t.Fatal(err)
			}
			m[string(k)] = v
		case op < 40:
			what = "delete"
			k := key()
			if err := db.Update(ctx, func(tx *Tx) error { return tx.Delete(k) }); err != nil {
				t.Fatal(err)
			}
			delete(m, string(k))
		case op < 50:
			what = "add"
			k := fmt.Appendf(nil, "c%d", rng.IntN(3))
			d := int64(rng.IntN(20) - 5)
			if err := db.Update(ctx, func(tx *Tx) error { return tx.Add(k, d) }); err != nil {
				t.Fatal(err)
			}
			var n int64
			if v, ok := m[string(k)]; ok {
				n = int64(binary.BigEndian.Uint64(v))
			}
			m[string(k)] = binary.BigEndian.AppendUint64(nil, uint64(n+d))
		case op < 70:
			what = "tx"
			modelTx(t, rng, db, m, key, val, rangeOf)
		case op < 78:
			what = "conflict"
			modelConflict(t, rng, db, m, key, val, rangeOf)
		case op < 84:
			what = "reopen"
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = mustOpen(t, store, opts)
		case op < 88:
			what = "crash"
			// Abandon the DB without Close once everything is durable.
			if err := db.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			db = mustOpen(t, store, opts)
		case op < 94:
			what = "checkpoint"
			if err := db.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		default:
			what = "reader"
			if err := db.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			// Half the time a fresh Reader, else the long-lived one
			// catches up incrementally with Refresh.
			r := reader
			if r == nil || rng.IntN(2) == 0 {
				var err error
				if r, err = OpenReader(ctx, store, opts); err != nil {
					t.Fatal(err)
				}
			} else if err := r.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got, want := collect(t, r.Scan, Range{}), m.scan(Range{}); fmt.Sprint(got) != fmt.Sprint(want) {
				if os.Getenv("KV_MODEL_DEBUG") != "" {
					objs, _ := store.List(ctx, "", "", 0)
					for _, o := range objs {
						t.Logf("object %s %d", o.Key, o.Size)
					}
					mm, _, _ := r.o.readManifest(ctx)
					t.Logf("reader next %d; manifest %+v", r.next, mm)
				}
				t.Fatalf("seed %d step %d: reader\n got %v\nwant %v", seed, step, got, want)
			}
			if r != reader {
				if reader != nil {
					reader.Close()
				}
				reader = r
			}
		}
		if os.Getenv("KV_MODEL_DEBUG") != "" {
			t.Logf("step %d: %s", step, what)
		}
		check(step, what)
	}
}

// modelTx runs one random read-write transaction and mirrors its effect.
func modelTx(t *testing.T, rng *rand.Rand, db *DB, m model, key func() []byte, val func() []byte, rangeOf func() Range) {
	ctx := context.Background()
	local := m.clone()
	tx := db.Begin()
	for range 1 + rng.IntN(5) {
		switch rng.IntN(5) {
		case 0:
			k := key()
			got, err := tx.Get(ctx, k)
			want, ok := local[string(k)]
			if ok != (err == nil) || (ok && !bytes.Equal(got, want)) {
				t.Fatalf("tx get %s = %q %v, want %q %v", k, got, err, want, ok)
			}
		case 1:
			r := rangeOf()
			if got, want := collect(t, tx.Scan, r), local.scan(r); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("tx scan %+v\n got %v\nwant %v", r, got, want)
			}
		case 2:
			k := key()
			_ = tx.Delete(k)
			delete(local, string(k))
		default:
			k, v := key(), val()
			_ = tx.Put(k, v)
			local[string(k)] = v
		}
	}
	if rng.IntN(6) == 0 {
		tx.Rollback()
		return
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("uncontended tx commit: %v", err)
	}
	for k := range m {
		delete(m, k)
	}
	for k, v := range local {
		m[k] = v
	}
}

// modelConflict interleaves two transactions: the first reads, the second
// writes and commits, then the first must conflict exactly when the second
// wrote something the first read.
func modelConflict(t *testing.T, rng *rand.Rand, db *DB, m model, key func() []byte, val func() []byte, rangeOf func() Range) {
	ctx := context.Background()
	tx1 := db.Begin()
	var readKeys []string
	var scanned []Range
	if rng.IntN(2) == 0 {
		k := key()
		_, _ = tx1.Get(ctx, k)
		readKeys = append(readKeys, string(k))
	} else {
		r := rangeOf()
		var last []byte
		n := 0
		_ = tx1.Scan(ctx, r, func(k, v []byte) (bool, error) { last = bytes.Clone(k); n++; return true, nil })
		if r.Limit > 0 && n == r.Limit {
			if r.Reverse {
				r.Start = last
			} else {
				r.End = append(last, 0)
			}
		}
		scanned = append(scanned, r)
	}
	k1 := fmt.Appendf(nil, "t1-%d", rng.IntN(3))
	_ = tx1.Put(k1, []byte("1"))
	k2, v2 := key(), val()
	if err := db.Update(ctx, func(tx *Tx) error { return tx.Put(k2, v2) }); err != nil {
		t.Fatal(err)
	}
	m[string(k2)] = v2
	wantConflict := false
	for _, k := range readKeys {
		wantConflict = wantConflict || k == string(k2)
	}
	for _, r := range scanned {
		wantConflict = wantConflict || r.contains(k2)
	}
	err := tx1.Commit(ctx)
	if wantConflict != errors.Is(err, ErrConflict) {
		t.Fatalf("tx1 commit = %v, want conflict %v (wrote %s, read %v, scanned %+v)", err, wantConflict, k2, readKeys, scanned)
	}
	if err == nil {
		m[string(k1)] = []byte("1")
	} else if !errors.Is(err, ErrConflict) {
		t.Fatal(err)
	}
}
