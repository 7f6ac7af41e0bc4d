package kv

import (
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
