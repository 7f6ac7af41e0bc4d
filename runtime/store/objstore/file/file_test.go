package file_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

var bg = context.Background()

func TestLayoutAndPermissions(t *testing.T) {
	s := openTemp(t)
	if _, err := s.Put(bg, "a/b/c", []byte("data"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// A key maps 1:1 to a path below the root.
	b, err := os.ReadFile(filepath.Join(s.Root(), "a", "b", "c"))
	if err != nil || string(b) != "data" {
		t.Fatalf("object file: %q %v", b, err)
	}
	for p, want := range map[string]fs.FileMode{"a": 0o700, "a/b": 0o700, "a/b/c": 0o600} {
		fi, err := os.Stat(filepath.Join(s.Root(), p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	// Deleting the last object removes the folders it emptied.
	if err := s.Delete(bg, "a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty folder left after delete: %v", err)
	}
}

func TestKeyConflict(t *testing.T) {
	s := openTemp(t)
	if _, err := s.Put(bg, "a/b", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []objstore.PutOptions{{}, objstore.CreateOnly()} {
		if _, err := s.Put(bg, "a", []byte("y"), opts); !errors.Is(err, file.ErrKeyConflict) {
			t.Fatalf("Put(a) over folder a/ = %v, want ErrKeyConflict", err)
		}
	}
	if _, err := s.Put(bg, "a/b/c", []byte("y"), objstore.PutOptions{}); !errors.Is(err, file.ErrKeyConflict) {
		t.Fatalf("Put(a/b/c) under object a/b = %v, want ErrKeyConflict", err)
	}
	if _, _, err := s.Get(bg, "a"); !errors.Is(err, objstore.ErrNotExist) {
		t.Fatalf("Get of a folder = %v, want ErrNotExist", err)
	}
	if err := s.Delete(bg, "a"); err != nil {
		t.Fatalf("Delete of a folder = %v, want nil (no object)", err)
	}
	if _, err := os.Stat(filepath.Join(s.Root(), "a", "b")); err != nil {
		t.Fatal("Delete of a folder name removed its contents")
	}
}

func TestETagFromContent(t *testing.T) {
	s := openTemp(t)
	a, err := s.Put(bg, "k", []byte("same"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A file placed by hand (no cached ETag) gets the content's ETag.
	if err := os.WriteFile(filepath.Join(s.Root(), "hand"), []byte("same"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := s.Head(bg, "hand")
	if err != nil || h.ETag != a.ETag {
		t.Fatalf("hand-placed file ETag %q %v, want %q", h.ETag, err, a.ETag)
	}
	if _, err := s.Put(bg, "hand", []byte("new"), objstore.IfMatch(a.ETag)); err != nil {
		t.Fatalf("If-Match on a hand-placed file: %v", err)
	}
}

func tempFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), `\tmp.`) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestStaleTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(bg, "d/k", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Leftovers: a dead pid, this pid from an earlier process, a live
	// writer (pid 1 is always alive) and a malformed name.
	stale := []string{`\tmp.999999999.abc.1`, fmt.Sprintf(`\tmp.%d.000000000000.2`, os.Getpid()), `\tmp.junk`}
	live := `\tmp.1.abc.3`
	for _, n := range append(stale, live) {
		if err := os.WriteFile(filepath.Join(dir, "d", n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	l, err := s2.List(bg, "", "", 0)
	if err != nil || len(l) != 1 || l[0].Key != "d/k" {
		t.Fatalf("List = %v, %v; want only d/k", l, err)
	}
	left := tempFiles(t, dir)
	if len(left) != 1 || filepath.Base(left[0]) != live {
		t.Fatalf("temp files after Open: %v, want only the live writer's", left)
	}
	// An old temp file goes even when its writer looks alive.
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(left[0], old, old); err != nil {
		t.Fatal(err)
	}
	s3, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s3.Close()
	if left := tempFiles(t, dir); len(left) != 0 {
		t.Fatalf("old temp file not removed: %v", left)
	}
}

// Two Stores on one root stand for two processes: they share nothing in
// memory, so If-Match and create-only rest on the file locks and link(2).
func TestTwoStoresOneRoot(t *testing.T) {
	dir := t.TempDir()
	var stores []*file.Store
	for range 2 {
		s, err := file.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	if _, err := stores[0].Put(bg, "n", []byte("0"), objstore.CreateOnly()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%2]
			for range 50 {
				for {
					b, info, err := s.Get(bg, "n")
					if err != nil {
						errc <- err
						return
					}
					n, _ := strconv.Atoi(string(b))
					_, err = s.Put(bg, "n", []byte(strconv.Itoa(n+1)), objstore.IfMatch(info.ETag))
					if err == nil {
						break
					}
					if !errors.Is(err, objstore.ErrPrecondition) {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	b, _, err := stores[1].Get(bg, "n")
	if err != nil || string(b) != "400" {
		t.Fatalf("counter = %q %v, want 400", b, err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := file.Open(""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, nil, 0o600)
	if _, err := file.Open(f); err == nil {
		t.Fatal("Open of a regular file succeeded")
	}
}

// A folder another process removed (its last object deleted) and made
// again must not swallow the next Put: the cached folder handle names the
// removed folder, so the Put has to notice and use the live one.
func TestFolderRemovedByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	a, b := openAt(t, dir), openAt(t, dir)
	for round := range 3 {
		if _, err := a.Put(bg, "d/x", []byte("1"), objstore.CreateOnly()); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(bg, "d/x"); err != nil { // removes folder d
			t.Fatal(err)
		}
		if round == 1 { // b makes the folder again behind a's back
			if _, err := b.Put(bg, "d/other", []byte("o"), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Put(bg, "d/y", []byte("2"), objstore.CreateOnly()); err != nil {
			t.Fatalf("round %d: create-only into a removed folder: %v", round, err)
		}
		if _, err := a.Put(bg, "d/z", []byte("3"), objstore.PutOptions{}); err != nil {
			t.Fatalf("round %d: overwrite into a removed folder: %v", round, err)
		}
		for k, want := range map[string]string{"d/y": "2", "d/z": "3"} {
			got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(k)))
			if err != nil || string(got) != want {
				t.Fatalf("round %d: %s on disk = %q, %v; want %q", round, k, got, err, want)
			}
			if got, _, err := b.Get(bg, k); err != nil || string(got) != want {
				t.Fatalf("round %d: other store reads %s = %q, %v", round, k, got, err)
			}
		}
		if round == 1 {
			if err := a.Delete(bg, "d/other"); err != nil {
				t.Fatal(err)
			}
		}
		// a deletes through its cached handle, b sees it gone.
		for _, k := range []string{"d/y", "d/z"} {
			if err := a.Delete(bg, k); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Head(bg, k); !errors.Is(err, objstore.ErrNotExist) {
				t.Fatalf("round %d: %s after delete: %v", round, k, err)
			}
		}
	}
}

// A create-only Put leaves no name behind but the object's, also while it
// runs: the temp file has none (O_TMPFILE) where the file system allows.
func TestCreateOnlyLeavesNoTempNames(t *testing.T) {
	s := openTemp(t)
	for i := range 20 {
		if _, err := s.Put(bg, fmt.Sprintf("w/%02d", i), []byte("x"), objstore.CreateOnly()); err != nil {
			t.Fatal(err)
		}
	}
	des, err := os.ReadDir(filepath.Join(s.Root(), "w"))
	if err != nil || len(des) != 20 {
		t.Fatalf("folder holds %d names (%v), want the 20 objects", len(des), err)
	}
}

func openAt(t *testing.T, dir string) *file.Store {
	t.Helper()
	s, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
