package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

func quietOpts() Options {
	return Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func mustOpen(t testing.TB, s objstore.Store, opts Options) *DB {
	t.Helper()
	db, err := Open(context.Background(), s, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func put(t testing.TB, db *DB, k, v string) {
	t.Helper()
	if err := db.Update(context.Background(), func(tx *Tx) error { return tx.Put([]byte(k), []byte(v)) }); err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
}

func get(t testing.TB, db *DB, k string) (string, bool) {
	t.Helper()
	v, err := db.Get(context.Background(), []byte(k))
	if errors.Is(err, ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	return string(v), true
}

func dump(t testing.TB, scan func(context.Context, Range, func(k, v []byte) (bool, error)) error, r Range) string {
	t.Helper()
	var b bytes.Buffer
	err := scan(context.Background(), r, func(k, v []byte) (bool, error) {
		fmt.Fprintf(&b, "%s=%s ", k, v)
		return true, nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return b.String()
}

func TestPutGetScanReopen(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, quietOpts())
	for _, k := range []string{"b", "a", "d", "c"} {
		put(t, db, k, "v"+k)
	}
	if err := db.Update(ctx, func(tx *Tx) error { return tx.Delete([]byte("c")) }); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(t, db, "a"); !ok || v != "va" {
		t.Fatalf("get a = %q %v", v, ok)
	}
	if _, ok := get(t, db, "c"); ok {
		t.Fatal("c should be deleted")
	}
	if got, want := dump(t, db.Scan, Range{}), "a=va b=vb d=vd "; got != want {
		t.Fatalf("scan = %q, want %q", got, want)
	}
	if got, want := dump(t, db.Scan, Range{Reverse: true, Limit: 2}), "d=vd b=vb "; got != want {
		t.Fatalf("reverse scan = %q, want %q", got, want)
	}
	if got, want := dump(t, db.Scan, Range{Start: []byte("b"), End: []byte("d")}), "b=vb "; got != want {
		t.Fatalf("range scan = %q, want %q", got, want)
	}
	if got, want := dump(t, db.Scan, Range{Start: []byte("b"), End: []byte("d"), Reverse: true}), "b=vb "; got != want {
		t.Fatalf("reverse range scan = %q, want %q", got, want)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get(ctx, []byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
	db2 := mustOpen(t, s, quietOpts())
	defer db2.Close()
	if got, want := dump(t, db2.Scan, Range{}), "a=va b=vb d=vd "; got != want {
		t.Fatalf("after reopen scan = %q, want %q", got, want)
	}
	if db2.Epoch() != 2 {
		t.Fatalf("epoch = %d, want 2", db2.Epoch())
	}
}

func TestNonDurableBecomesDurableOnClose(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, quietOpts())
	for i := range 50 {
		if err := db.UpdateNonDurable(ctx, func(tx *Tx) error {
			return tx.Put(fmt.Appendf(nil, "k%03d", i), []byte("v"))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2 := mustOpen(t, s, quietOpts())
	defer db2.Close()
	if n := db2.Stats().Keys; n != 50 {
		t.Fatalf("keys after reopen = %d, want 50", n)
	}
}

func TestConflicts(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, mem.New(), quietOpts())
	defer db.Close()
	put(t, db, "x", "1")

	// Read-write conflict on a key.
	tx := db.Begin()
	if _, err := tx.Get(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	put(t, db, "x", "2")
	if err := tx.Put([]byte("y"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit = %v, want ErrConflict", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, ErrTxDone) {
		t.Fatalf("second commit = %v, want ErrTxDone", err)
	}
	if _, ok := get(t, db, "y"); ok {
		t.Fatal("conflicting commit was applied")
	}

	// Phantom: a key inserted into a scanned range.
	tx = db.Begin()
	if err := tx.Scan(ctx, PrefixRange([]byte("p/")), func(k, v []byte) (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	put(t, db, "p/new", "1")
	_ = tx.Put([]byte("z"), []byte("1"))
	if err := tx.Commit(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("phantom commit = %v, want ErrConflict", err)
	}

	// A write outside the range (and after the part actually scanned) does not conflict.
	put(t, db, "q/1", "1")
	put(t, db, "q/2", "1")
	tx = db.Begin()
	if err := tx.Scan(ctx, Range{Start: []byte("q/"), Limit: 1}, func(k, v []byte) (bool, error) { return true, nil }); err != nil {
		t.Fatal(err)
	}
	put(t, db, "q/3", "1")
	_ = tx.Put([]byte("z"), []byte("1"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after disjoint write = %v", err)
	}

	// Blind writes never conflict.
	tx = db.Begin()
	_ = tx.Put([]byte("x"), []byte("blind"))
	put(t, db, "x", "3")
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("blind write = %v", err)
	}
	if v, _ := get(t, db, "x"); v != "blind" {
		t.Fatalf("x = %q", v)
	}
	if db.Stats().Conflicts != 2 {
		t.Fatalf("Conflicts = %d, want 2", db.Stats().Conflicts)
	}
}

func TestCountersConcurrent(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, quietOpts())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				tx := db.Begin()
				_ = tx.Add([]byte("ctr"), 1)
				_ = tx.Put(fmt.Appendf(nil, "w%d/%d", w, i), nil)
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var n int64
	if err := db.View(ctx, func(tx *Tx) error {
		var err error
		n, err = tx.Counter(ctx, []byte("ctr"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != 400 {
		t.Fatalf("counter = %d, want 400", n)
	}
	if db.Stats().Conflicts != 0 {
		t.Fatalf("counter adds conflicted %d times", db.Stats().Conflicts)
	}
	db.Close()
	db = mustOpen(t, s, quietOpts())
	defer db.Close()
	v, _ := get(t, db, "ctr")
	if want := string([]byte{0, 0, 0, 0, 0, 0, 1, 144}); v != want {
		t.Fatalf("counter bytes after reopen = %x", v)
	}
}

func TestTxSeesOwnWrites(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t, mem.New(), quietOpts())
	defer db.Close()
	put(t, db, "a", "1")
	put(t, db, "c", "3")
	put(t, db, "n", string([]byte{0, 0, 0, 0, 0, 0, 0, 5}))
	err := db.Update(ctx, func(tx *Tx) error {
		_ = tx.Put([]byte("b"), []byte("2"))
		_ = tx.Delete([]byte("c"))
		_ = tx.Add([]byte("n"), 2)
		_ = tx.Add([]byte("m"), -1)
		if n, err := tx.Counter(ctx, []byte("n")); err != nil || n != 7 {
			return fmt.Errorf("counter n = %d, %v", n, err)
		}
		if got, want := dump(t, tx.Scan, Range{}), "a=1 b=2 m=\xff\xff\xff\xff\xff\xff\xff\xff n=\x00\x00\x00\x00\x00\x00\x00\x07 "; got != want {
			return fmt.Errorf("tx scan = %q, want %q", got, want)
		}
		if got, want := dump(t, tx.Scan, Range{Reverse: true, Limit: 3}), "n=\x00\x00\x00\x00\x00\x00\x00\x07 m=\xff\xff\xff\xff\xff\xff\xff\xff b=2 "; got != want {
			return fmt.Errorf("tx reverse scan = %q, want %q", got, want)
		}
		if _, err := tx.Get(ctx, []byte("c")); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("deleted c: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLargeValues(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	opts := quietOpts()
	opts.LargeValueThreshold = 100
	db := mustOpen(t, s, opts)
	big := bytes.Repeat([]byte("x"), 1000)
	put(t, db, "big", string(big))
	if db.Stats().LargeValuesWritten != 1 {
		t.Fatal("large value not offloaded")
	}
	if v, _ := get(t, db, "big"); v != string(big) {
		t.Fatal("large value mismatch")
	}
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = mustOpen(t, s, opts)
	if v, _ := get(t, db, "big"); v != string(big) {
		t.Fatal("large value mismatch after reopen")
	}
	put(t, db, "big", "small")
	if err := db.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	objs, err := s.List(ctx, "large/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 0 {
		t.Fatalf("dropped large value still stored: %v", objs)
	}
}

func TestFencing(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	old := mustOpen(t, s, quietOpts())
	put(t, old, "a", "old")
	nw := mustOpen(t, s, quietOpts())
	defer nw.Close()
	err := old.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("b"), []byte("old")) })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer commit = %v, want ErrFenced", err)
	}
	if _, err := old.Get(ctx, []byte("a")); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer Get = %v, want ErrFenced", err)
	}
	if err := old.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("c"), []byte("old")) }); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer later commit = %v, want ErrFenced", err)
	}
	put(t, nw, "d", "new")
	nw.Close()
	db := mustOpen(t, s, quietOpts())
	defer db.Close()
	if got, want := dump(t, db.Scan, Range{}), "a=old d=new "; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
}

func TestCheckpointReuseAndReader(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	opts := quietOpts()
	opts.ChunkBytes = 1000
	opts.DisableAutoCheckpoint = true
	db := mustOpen(t, s, opts)
	for i := range 200 {
		put(t, db, fmt.Sprintf("k%04d", i), "0123456789")
	}
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	first := db.Stats()
	if first.ChunksWritten < 4 {
		t.Fatalf("chunks written = %d, want several", first.ChunksWritten)
	}
	r, err := OpenReader(ctx, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	put(t, db, "k0100", "changed")
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	second := db.Stats()
	if second.ChunksReused == 0 || second.ChunksWritten-first.ChunksWritten > 2 {
		t.Fatalf("second checkpoint wrote %d chunks, reused %d", second.ChunksWritten-first.ChunksWritten, second.ChunksReused)
	}
	if v, _ := r.Get(ctx, []byte("k0100")); string(v) != "0123456789" {
		t.Fatalf("reader before refresh = %q", v)
	}
	put(t, db, "k0200", "after")
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Get(ctx, []byte("k0100")); string(v) != "changed" {
		t.Fatalf("reader after refresh = %q", v)
	}
	if v, _ := r.Get(ctx, []byte("k0200")); string(v) != "after" {
		t.Fatalf("reader after refresh = %q", v)
	}
	want := dump(t, db.Scan, Range{})
	db.Close()
	db = mustOpen(t, s, opts)
	defer db.Close()
	if got := dump(t, db.Scan, Range{}); got != want {
		t.Fatalf("after reopen:\n%s\nwant\n%s", got, want)
	}
	// Below the first live WAL sequence only fences remain, and only the
	// manifest's chunks exist.
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	m := db.manifest
	db.mu.Unlock()
	wals, _ := s.List(ctx, "wal/", "", 0)
	for _, o := range wals {
		seq, _ := db.o.walSeqOf(o.Key)
		data, _, _ := s.Get(ctx, o.Key)
		if h, _, err := decodeWALHeader(data); seq < m.firstLiveWAL && (err != nil || !h.fence) {
			t.Fatalf("%s below first live %d is not a fence", o.Key, m.firstLiveWAL)
		}
	}
	chunks, _ := s.List(ctx, "chunk/", "", 0)
	if len(chunks) != len(m.chunks) {
		t.Fatalf("%d chunk objects stored, manifest lists %d", len(chunks), len(m.chunks))
	}
}

func TestOpenCollectsLeftovers(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	db := mustOpen(t, s, quietOpts())         // fence at wal 1
	put(t, db, "a", strings.Repeat("1", 100)) // wal 2
	wal2, _, err := s.Get(ctx, "wal/00000000000000000002")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(ctx); err != nil { // deletes wal 2, keeps the fence
		t.Fatal(err)
	}
	db.Close()
	// What a crashed epoch-1 writer could leave: a large value no commit
	// references, a chunk no manifest lists, a WAL object the checkpoint
	// made obsolete but did not get to delete.
	orphans := map[string][]byte{
		"large/00000000000000000001-00000000000000000007":        []byte("orphan"),
		"chunk/00000000000000000001-00000000000000000009-000000": []byte("orphan"),
		"wal/00000000000000000002":                               wal2,
	}
	for k, v := range orphans {
		if _, err := s.Put(ctx, k, v, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	db = mustOpen(t, s, quietOpts()) // epoch 2 collects them in the background
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close() // waits for the collection
	for k := range orphans {
		if _, err := s.Head(ctx, k); !errors.Is(err, objstore.ErrNotExist) {
			t.Fatalf("leftover %s not collected: %v", k, err)
		}
	}
	if _, err := s.Head(ctx, "wal/00000000000000000001"); err != nil {
		t.Fatalf("fence deleted: %v", err)
	}
	db = mustOpen(t, s, quietOpts())
	defer db.Close()
	if v, _ := get(t, db, "a"); v != strings.Repeat("1", 100) {
		t.Fatal("live data lost")
	}
}

func TestLostManifestResponses(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 1)
	fs.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: "manifest", Rate: 1, LoseResponse: true})
	db := mustOpen(t, fs, quietOpts()) // create lost
	put(t, db, "a", "1")
	if err := db.Checkpoint(ctx); err != nil { // If-Match write lost
		t.Fatalf("checkpoint with a lost manifest response: %v", err)
	}
	db.Close()
	db = mustOpen(t, fs, quietOpts()) // epoch bump lost
	defer db.Close()
	if db.Epoch() != 2 {
		t.Fatalf("epoch %d, want 2", db.Epoch())
	}
	if v, _ := get(t, db, "a"); v != "1" {
		t.Fatal("data lost")
	}
}

func TestFencingConcurrentWriters(t *testing.T) {
	t.Run("clean", func(t *testing.T) { fencingConcurrent(t, false) })
	t.Run("lost responses", func(t *testing.T) { fencingConcurrent(t, true) })
}

// fencingConcurrent opens a second writer while the first commits from
// four goroutines; with lossy set, a third of all PUTs lose their response.
func fencingConcurrent(t *testing.T, lossy bool) {
	ctx := context.Background()
	inner := mem.New()
	fs := faults.New(inner, 3)
	if lossy {
		fs.Set(faults.Rule{Ops: faults.OpPut, Rate: 0.33, LoseResponse: true})
	}
	s := objstore.Store(fs)
	old := mustOpen(t, s, quietOpts())
	type outcome struct {
		key string
		err error
	}
	results := make(chan outcome, 10000)
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				k := fmt.Sprintf("old/%d/%05d", w, i)
				err := old.Update(ctx, func(tx *Tx) error { return tx.Put([]byte(k), []byte("x")) })
				results <- outcome{k, err}
				if i == 5 {
					once.Do(func() { close(started) })
				}
				if err != nil {
					return
				}
			}
		}()
	}
	<-started
	nw := mustOpen(t, s, quietOpts())
	wg.Wait()
	close(results)
	if err := old.Sync(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("old Sync = %v, want ErrFenced", err)
	}
	if err := old.Checkpoint(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("old Checkpoint = %v, want ErrFenced", err)
	}
	put(t, nw, "new", "1")
	nw.Close()
	fs.Clear()
	db := mustOpen(t, inner, quietOpts())
	defer db.Close()
	acked, fenced := 0, 0
	for r := range results {
		_, present := get(t, db, r.key)
		switch {
		case r.err == nil:
			acked++
			if !present {
				t.Fatalf("acknowledged commit %s lost", r.key)
			}
		case errors.Is(r.err, ErrFenced):
			fenced++
			if present {
				t.Fatalf("commit %s failed with ErrFenced but is visible", r.key)
			}
		default:
			t.Fatalf("commit %s: unexpected error %v", r.key, r.err)
		}
	}
	if fenced != 4 || acked < 6 {
		t.Fatalf("acked %d, fenced %d; want >= 6 and 4", acked, fenced)
	}
}

func TestReaderWritesNothing(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	db := mustOpen(t, inner, quietOpts())
	defer db.Close()
	put(t, db, "a", "1")
	cs := counting.New(inner)
	r, err := OpenReader(ctx, cs, quietOpts())
	if err != nil {
		t.Fatal(err)
	}
	put(t, db, "b", "2")
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, r.Scan, Range{}); got != "a=1 b=2 " {
		t.Fatalf("reader sees %q", got)
	}
	if c := cs.Counts(); c.Puts != 0 || c.Deletes != 0 {
		t.Fatalf("reader wrote: %+v", c)
	}
	// The writer was not disturbed: it still commits.
	put(t, db, "c", "3")
	r.Close()
	if _, err := r.Get(ctx, []byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get on closed reader = %v", err)
	}
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	opts := quietOpts()
	opts.MaxValueSize = 10
	db := mustOpen(t, mem.New(), opts)
	defer db.Close()
	tx := db.Begin()
	defer tx.Rollback()
	if err := tx.Put([]byte("k"), make([]byte, 11)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big value: %v", err)
	}
	if err := tx.Put(make([]byte, MaxKeySize+1), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big key: %v", err)
	}
	if _, err := db.Get(ctx, make([]byte, MaxKeySize+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big key get: %v", err)
	}
	if err := db.View(ctx, func(tx *Tx) error { return tx.Put([]byte("k"), nil) }); err == nil {
		t.Fatal("write in View succeeded")
	}
	put(t, db, "notctr", "abc")
	err := db.Update(ctx, func(tx *Tx) error { return tx.Add([]byte("notctr"), 1) })
	if err == nil || !strings.Contains(err.Error(), "not an 8-byte counter") {
		t.Fatalf("Add to a non-counter: %v", err)
	}
}
