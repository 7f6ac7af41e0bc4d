package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// plainOnly hides the file store's Packer, as a store written by a build
// before packed folders looks.
type plainOnly struct{ objstore.Store }

func openFile(t *testing.T, dir string) *file.Store {
	t.Helper()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// walFiles returns the names in the WAL folder of a file store at dir.
func walFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func manifestVersion(t *testing.T, dir string) byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest"))
	if err != nil {
		t.Fatal(err)
	}
	return b[len(magicManifest)]
}

// On a file store the WAL lives in a packed folder: no WAL object is a
// file, and the manifest says so, so builds that cannot read packed
// folders refuse the store rather than take it for a shorter log.
func TestPackedWALLayout(t *testing.T) {
	dir := t.TempDir()
	db := mustOpen(t, openFile(t, dir), quietOpts())
	for i := range 20 {
		put(t, db, fmt.Sprintf("k%02d", i), "v")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if names := walFiles(t, dir); len(names) != 1 || names[0] != `\log` {
		t.Fatalf("WAL folder holds %v, want only the log", names)
	}
	if v := manifestVersion(t, dir); v != manifestPackedVersion {
		t.Fatalf("manifest version %d, want %d", v, manifestPackedVersion)
	}
	db = mustOpen(t, openFile(t, dir), quietOpts())
	defer db.Close()
	if v, ok := get(t, db, "k19"); !ok || v != "v" {
		t.Fatalf("k19 after reopen = %q, %v", v, ok)
	}
}

// A store whose WAL objects are files (written before packing) opens
// with packing: the old objects replay, new ones go to the log, a
// checkpoint deletes the old files, and Check and a Reader read both.
func TestPackedWALUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := quietOpts()
	opts.DisableAutoCheckpoint = true
	old := mustOpen(t, plainOnly{openFile(t, dir)}, opts)
	for i := range 10 {
		put(t, old, fmt.Sprintf("old%02d", i), "v")
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if v := manifestVersion(t, dir); v != formatVersion {
		t.Fatalf("manifest version %d before packing, want %d", v, formatVersion)
	}
	plain := len(walFiles(t, dir))

	s := openFile(t, dir)
	db := mustOpen(t, s, opts)
	for i := range 10 {
		put(t, db, fmt.Sprintf("new%02d", i), "v")
	}
	if names := walFiles(t, dir); len(names) != plain+1 {
		t.Fatalf("WAL folder holds %d names after packing, want the %d files and the log", len(names), plain)
	}
	rep, err := Check(ctx, openFile(t, dir), opts)
	if err != nil || !rep.Healthy() || rep.Keys != 20 {
		t.Fatalf("Check across both layouts: %+v, %v", rep, err)
	}
	r, err := OpenReader(ctx, openFile(t, dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, k := range []string{"old00", "new09"} {
		if _, err := r.Get(ctx, []byte(k)); err != nil {
			t.Fatalf("Reader Get(%s): %v", k, err)
		}
	}
	if err := db.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, db, "after", "v")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The old files below the checkpoint are gone, except the fence.
	if names := walFiles(t, dir); len(names) != 2 {
		t.Fatalf("WAL folder after the checkpoint holds %v, want the old fence and the log", names)
	}
	db = mustOpen(t, openFile(t, dir), opts)
	defer db.Close()
	if got := dump(t, db.Scan, Range{}); got != dumpWant(t, []string{"after"}, "old", "new") {
		t.Fatalf("after reopen: %s", got)
	}
}

func dumpWant(t *testing.T, extra []string, prefixes ...string) string {
	t.Helper()
	keys := extra
	for _, p := range prefixes {
		for i := range 10 {
			keys = append(keys, fmt.Sprintf("%s%02d", p, i))
		}
	}
	slices.Sort(keys)
	want := ""
	for _, k := range keys {
		want += k + "=v "
	}
	return want
}

// Two writers on one packed WAL in two handles (two processes): the newer
// one's fence takes the older one's next slot, so the older one's next
// commit fails with ErrFenced and never lands, and a Reader in a third
// handle sees the newer writer's commits without its help.
func TestPackedWALFencedWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := quietOpts()
	a := mustOpen(t, openFile(t, dir), opts)
	put(t, a, "a1", "v")
	b := mustOpen(t, openFile(t, dir), opts) // fences a
	defer b.Close()
	err := a.Update(ctx, func(tx *Tx) error { return tx.Put([]byte("a2"), []byte("v")) })
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced writer's commit = %v, want ErrFenced", err)
	}
	a.Close()
	put(t, b, "b1", "v")
	r, err := OpenReader(ctx, openFile(t, dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	put(t, b, "b2", "v")
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]bool{"a1": true, "a2": false, "b1": true, "b2": true} {
		_, err := r.Get(ctx, []byte(k))
		if got := err == nil; got != want || (err != nil && !errors.Is(err, ErrNotFound)) {
			t.Fatalf("Reader Get(%s) = %v, want present %v", k, err, want)
		}
	}
	rep, err := Check(ctx, openFile(t, dir), opts)
	if err != nil || !rep.Healthy() || rep.Fences != 2 {
		t.Fatalf("Check: %+v, %v", rep, err)
	}
}

// segmentWith returns the segment file of the packed WAL at dir that
// holds key, and where key's name starts in it.
func segmentWith(t *testing.T, dir, key string) (string, int) {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "wal", `\log`))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		p := filepath.Join(dir, "wal", `\log`, de.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte(key)); i >= 0 {
			return p, i
		}
	}
	t.Fatalf("no segment holds %s", key)
	return "", 0
}

func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
}

// Damage to a record in the middle of a packed WAL loses that WAL object
// only: kv sees it missing while later ones exist, a gap, and refuses to
// open naming it, as for a deleted object. A record torn at the end (its
// PUT never returned, so its commit was never acknowledged) is no object:
// the log ends before it and the store opens.
func TestPackedWALDamageIsAGap(t *testing.T) {
	ctx := context.Background()
	opts := quietOpts()
	opts.DisableAutoCheckpoint = true
	build := func() string {
		dir := t.TempDir()
		db := mustOpen(t, openFile(t, dir), opts) // fence at 1
		for i := range 8 {
			put(t, db, fmt.Sprintf("k%d", i), "v") // WAL 2..9
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	walKey := func(seq int) string { return fmt.Sprintf("wal/%020d", seq) }

	dir := build()
	seg, at := segmentWith(t, dir, walKey(5))
	flipByte(t, seg, at+len(walKey(5))+10) // inside the WAL object's bytes
	_, err := Open(ctx, openFile(t, dir), opts)
	wantCorrupt(t, "Open", err, walKey(5), walKey(4))
	rep, err := Check(ctx, openFile(t, dir), opts)
	if err != nil || rep.BreakAt != 5 || rep.Problems[0].Kind != ProblemMissing {
		t.Fatalf("Check: %+v, %v", rep, err)
	}

	dir = build()
	seg, at = segmentWith(t, dir, walKey(9))
	flipByte(t, seg, at+len(walKey(9))+10)
	db, err := Open(ctx, openFile(t, dir), opts)
	if err != nil {
		t.Fatalf("Open after a torn last record: %v", err)
	}
	defer db.Close()
	if _, ok := get(t, db, "k7"); ok {
		t.Fatal("the torn record's commit was replayed")
	}
	if _, ok := get(t, db, "k6"); !ok {
		t.Fatal("a commit before the torn record is lost")
	}
	put(t, db, "after", "v") // writes on past the torn record
}
