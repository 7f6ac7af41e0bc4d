package file_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// tree lists every entry under root with its type, mode, size and bytes,
// so two calls differ when anything was created, removed or changed.
func tree(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d", strings.TrimPrefix(p, root), fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", b)
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestReadOnlyReadsWhatStoreWrote(t *testing.T) {
	w := openTemp(t)
	for i := range 30 {
		put(t, w, fmt.Sprintf("d%d/k%02d", i%3, i), fmt.Sprint("v", i))
	}
	put(t, w, "top", "x")
	// A temp file whose writer is dead: Open would sweep it, OpenReadOnly
	// leaves it to the next writer.
	stale := filepath.Join(w.Root(), "d0", `\tmp.999999999.abc.1`)
	if err := os.WriteFile(stale, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := tree(t, w.Root())

	r, err := file.OpenReadOnly(w.Root())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Root() != w.Root() {
		t.Fatalf("root %q, want %q", r.Root(), w.Root())
	}
	for _, page := range []struct {
		prefix, after string
		limit         int
	}{{"", "", 0}, {"d1/", "", 4}, {"d", "d1/k13", 5}, {"nope/", "", 0}} {
		got, err := r.List(bg, page.prefix, page.after, page.limit)
		if err != nil {
			t.Fatal(err)
		}
		want, err := w.List(bg, page.prefix, page.after, page.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("List(%q, %q, %d) = %v, want %v", page.prefix, page.after, page.limit, got, want)
		}
	}
	data, info, err := r.Get(bg, "d2/k05")
	if err != nil || string(data) != "v5" {
		t.Fatalf("Get = %q, %v", data, err)
	}
	if h, err := r.Head(bg, "d2/k05"); err != nil || h != info {
		t.Fatalf("Head = %+v, %v; want %+v", h, err, info)
	}
	if _, _, err := r.Get(bg, "d2/missing"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Get of a missing key: %v", err)
	}

	if _, err := r.Put(bg, "new", []byte("x"), objstore.PutOptions{}); !errors.Is(err, file.ErrReadOnly) {
		t.Errorf("Put: %v, want ErrReadOnly", err)
	}
	if _, err := r.Put(bg, "top", []byte("y"), objstore.IfMatch(info.ETag)); !errors.Is(err, file.ErrReadOnly) {
		t.Errorf("Put If-Match: %v, want ErrReadOnly", err)
	}
	if err := r.Delete(bg, "top"); !errors.Is(err, file.ErrReadOnly) {
		t.Errorf("Delete: %v, want ErrReadOnly", err)
	}
	if after := tree(t, w.Root()); after != before {
		t.Fatalf("the read-only store changed the folder:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestReadOnlyCreatesNothing opens folders with no lock folder, missing
// folders and files: nothing appears on disk.
func TestReadOnlyCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "obj"), []byte("v"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := tree(t, dir)
	r, err := file.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.List(bg, "", "", 0); err != nil || len(got) != 1 || got[0].Key != "obj" {
		t.Fatalf("List = %v, %v", got, err)
	}
	if tree(t, dir) != before {
		t.Fatal("OpenReadOnly created something (the lock folder?)")
	}

	missing := filepath.Join(dir, "no", "such")
	if _, err := file.OpenReadOnly(missing); !errors.Is(err, file.ErrNoFolder) || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Fatalf("missing folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("OpenReadOnly created the missing folder: %v", err)
	}
	if _, err := file.OpenReadOnly(filepath.Join(dir, "obj")); !errors.Is(err, file.ErrNoFolder) || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("a file as the folder: %v", err)
	}
	if _, err := file.OpenReadOnly(""); err == nil {
		t.Fatal("empty folder name accepted")
	}
}

// TestReadOnlyOnAReadOnlyFolder reads a store whose folder and files have
// no write permission. Root ignores permission bits, so as root the test
// still checks that nothing is written.
func TestReadOnlyOnAReadOnlyFolder(t *testing.T) {
	w := openTemp(t)
	put(t, w, "a/b", "1")
	put(t, w, "c", "2")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	root := w.Root()
	chmodTree(t, root, false)
	t.Cleanup(func() { chmodTree(t, root, true) })
	before := tree(t, root)
	r, err := file.OpenReadOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.List(bg, "", "", 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("List = %v, %v", got, err)
	}
	if b, _, err := r.Get(bg, "a/b"); err != nil || string(b) != "1" {
		t.Fatalf("Get = %q, %v", b, err)
	}
	if tree(t, root) != before {
		t.Fatal("reading changed the folder")
	}
}

// TestReadOnlyReadsAPackedFolder reads kv's kind of WAL folder, packed,
// with no lock file in it (no writer opened it since the last one went):
// the reader creates none, and catches up with what a writer adds later.
func TestReadOnlyReadsAPackedFolder(t *testing.T) {
	w := openTemp(t)
	if err := w.Pack(bg, "wal/"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := w.Put(bg, fmt.Sprintf("wal/%d", i), []byte(fmt.Sprint("v", i)), objstore.CreateOnly()); err != nil {
			t.Fatal(err)
		}
	}
	root := w.Root()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "wal", `\log`, "lock")); err != nil {
		t.Fatal(err)
	}
	before := tree(t, root)
	r, err := file.OpenReadOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.List(bg, "wal/", "", 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("List = %v, %v; want the 3 packed objects", got, err)
	}
	if b, _, err := r.Get(bg, "wal/1"); err != nil || string(b) != "v1" {
		t.Fatalf("Get = %q, %v", b, err)
	}
	if after := tree(t, root); after != before {
		t.Fatalf("reading a packed folder changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	w2, err := file.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if _, err := w2.Put(bg, "wal/3", []byte("v3"), objstore.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	if b, _, err := r.Get(bg, "wal/3"); err != nil || string(b) != "v3" {
		t.Fatalf("Get of an object written after the reader opened = %q, %v", b, err)
	}
}

// chmodTree removes (writable false) or restores the write bits of every
// entry under root.
func chmodTree(t *testing.T, root string, writable bool) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm() &^ 0o222
		if writable {
			mode |= 0o200
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func put(t *testing.T, s *file.Store, key, data string) {
	t.Helper()
	if _, err := s.Put(bg, key, []byte(data), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}
