package interpreter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/dsl"
)

const leafYAML = "tqw: v1\nname: leaf\nsteps:\n  - id: done\n    succeed: {ok: true}\n"

func callerYAML(path string) string {
	return fmt.Sprintf("tqw: v1\nname: caller\nsteps:\n  - id: c\n    call:\n      workflow: %q\n", path)
}

func writeFile(t *testing.T, path, src string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInFolderConfinesCalls: a load confined to a folder reads files of
// the folder (subfolders and symlinks inside it too) and refuses an
// absolute path, a .. out and a symlink out with the message of a
// missing file; without a folder an inline workflow calls nothing.
func TestInFolderConfinesCalls(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "wf")
	writeFile(t, filepath.Join(dir, "leaf.yaml"), leafYAML)
	writeFile(t, filepath.Join(dir, "sub", "mid.yaml"), callerYAML("../leaf.yaml"))
	writeFile(t, filepath.Join(top, "outside.yaml"), leafYAML)
	if err := os.Symlink("leaf.yaml", filepath.Join(dir, "inside-link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(top, "outside.yaml"), filepath.Join(dir, "out-link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	in := InFolder(dir)
	for _, path := range []string{"leaf.yaml", "./sub/mid.yaml", "inside-link.yaml"} {
		w, err := LoadSource("(inline)", []byte(callerYAML(path)), dsl.Options{}, in)
		if err != nil {
			t.Fatalf("call %s: %v", path, err)
		}
		if len(w.all) < 2 {
			t.Fatalf("call %s loaded %d workflows", path, len(w.all))
		}
	}
	if _, err := Load("sub/mid.yaml", dsl.Options{}, in); err != nil {
		t.Fatalf("Load of a file in a subfolder: %v", err)
	}
	_, err := LoadSource("(inline)", []byte(callerYAML("missing.yaml")), dsl.Options{}, in)
	if !errors.Is(err, ErrNotInFolder) {
		t.Fatalf("a missing file: %v", err)
	}
	want := strings.ReplaceAll(err.Error(), "missing.yaml", "PATH")
	for _, path := range []string{"/etc/hostname", filepath.Join(top, "outside.yaml"), "../outside.yaml", "sub/../../outside.yaml", "out-link.yaml", "up/outside.yaml"} {
		_, err := LoadSource("(inline)", []byte(callerYAML(path)), dsl.Options{}, in)
		if !errors.Is(err, ErrNotInFolder) || strings.ReplaceAll(err.Error(), path, "PATH") != want {
			t.Errorf("call %s: %v; want %q", path, err, want)
		}
		if err != nil && strings.Contains(strings.ReplaceAll(err.Error(), path, "PATH"), "outside") {
			t.Errorf("call %s: the error names the file outside: %v", path, err)
		}
	}
	for _, path := range []string{"../outside.yaml", "/etc/hostname", "out-link.yaml"} {
		if _, err := Load(path, dsl.Options{}, in); !errors.Is(err, ErrNotInFolder) {
			t.Errorf("Load %s: %v", path, err)
		}
	}
	if _, err := LoadSource("(inline)", []byte(callerYAML("leaf.yaml")), dsl.Options{}, InFolder("")); !errors.Is(err, ErrNotInFolder) {
		t.Fatalf("no folder: %v", err)
	}
	// Unconfined (the CLI): relative to the calling file, absolute allowed.
	writeFile(t, filepath.Join(top, "abs.yaml"), callerYAML(filepath.Join(top, "outside.yaml")))
	if _, err := Load(filepath.Join(top, "abs.yaml"), dsl.Options{}); err != nil {
		t.Fatalf("the CLI's absolute call: %v", err)
	}
}

// TestLoadReadsRegularFilesOnly: a FIFO (with no writer: opening it
// without O_NONBLOCK would block for ever), a device and a /proc entry are
// refused at once with an error naming the file, confined or not.
func TestLoadReadsRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	writeFile(t, filepath.Join(dir, "calls-fifo.yaml"), callerYAML("fifo.yaml"))
	done := make(chan error, 4)
	go func() {
		_, err := Load(fifo, dsl.Options{})
		done <- err
		_, err = Load(filepath.Join(dir, "calls-fifo.yaml"), dsl.Options{})
		done <- err
		_, err = LoadSource("(inline)", []byte(callerYAML("fifo.yaml")), dsl.Options{}, InFolder(dir))
		done <- err
		_, err = Load("fifo.yaml", dsl.Options{}, InFolder(dir))
		done <- err
	}()
	for i := range 4 {
		select {
		case err := <-done:
			if !errors.Is(err, dsl.ErrNotRegular) || !strings.Contains(err.Error(), "fifo.yaml") || !strings.Contains(err.Error(), "a FIFO") {
				t.Errorf("load %d of a FIFO: %v", i, err)
			}
		case <-time.After(time.Minute):
			t.Fatal("loading a FIFO did not return: the open waits for a writer")
		}
	}
	for _, path := range []string{"/dev/null", "/proc/self/status", dir} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		_, err := Load(path, dsl.Options{})
		if !errors.Is(err, dsl.ErrNotRegular) || !strings.Contains(err.Error(), path) {
			t.Errorf("load %s: %v", path, err)
		}
	}
}

// TestLoadBoundsTheCallTree: recursion through another name of a file
// (a symlink) is refused, and a tree of more than MaxCallTree workflows
// is refused instead of read.
func TestLoadBoundsTheCallTree(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), callerYAML("alias.yaml"))
	if err := os.Symlink("a.yaml", filepath.Join(dir, "alias.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "a.yaml"), dsl.Options{}); !errors.Is(err, ErrRecursiveCall) {
		t.Fatalf("recursion through a symlink: %v", err)
	}
	// A folder that is its own subfolder: names never repeat, the file does.
	writeFile(t, filepath.Join(dir, "deep.yaml"), callerYAML("loop/deep.yaml"))
	if err := os.Symlink(".", filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("deep.yaml", dsl.Options{}, InFolder(dir)); !errors.Is(err, ErrRecursiveCall) {
		t.Fatalf("recursion through a folder loop: %v", err)
	}
	// Each level calls the next 10 times: 1+10+100+1000 workflows.
	writeFile(t, filepath.Join(dir, "l3.yaml"), leafYAML)
	for _, lv := range []string{"l2", "l1", "l0"} {
		var b strings.Builder
		b.WriteString("tqw: v1\nname: " + lv + "\nsteps:\n")
		next := map[string]string{"l2": "l3", "l1": "l2", "l0": "l1"}[lv]
		for i := range 10 {
			fmt.Fprintf(&b, "  - id: c%d\n    call: {workflow: %s.yaml}\n", i, next)
		}
		writeFile(t, filepath.Join(dir, lv+".yaml"), b.String())
	}
	if _, err := Load("l1.yaml", dsl.Options{}, InFolder(dir)); err != nil {
		t.Fatalf("a tree of 111 workflows: %v", err)
	}
	_, err := Load("l0.yaml", dsl.Options{}, InFolder(dir))
	if !errors.Is(err, ErrCallTreeTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(MaxCallTree)) {
		t.Fatalf("a tree of 1111 workflows: %v", err)
	}
}

// TestDefinitionCacheBounded: parsing more unique definitions than
// DefinitionCacheSize (or bytes than DefinitionCacheBytes) keeps the
// cache at its bound.
func TestDefinitionCacheBounded(t *testing.T) {
	v := newView(nil, dsl.Options{})
	for i := range DefinitionCacheSize + 50 {
		wf, _, err := dsl.Parse("x.yaml", fmt.Appendf(nil, "tqw: v1\nname: w%d\nsteps:\n  - id: done\n    succeed: {}\n", i))
		if err != nil {
			t.Fatal(err)
		}
		v.cache(wf)
		if n := v.defs.len(); n > DefinitionCacheSize {
			t.Fatalf("after %d definitions the cache holds %d", i+1, n)
		}
	}
	if n := v.defs.len(); n != DefinitionCacheSize {
		t.Fatalf("the cache holds %d, want %d", n, DefinitionCacheSize)
	}
	c := newDefCache(100, 1000)
	for i := range 20 {
		src := fmt.Sprintf("tqw: v1\nname: big%d\ndescription: %q\nsteps:\n  - id: done\n    succeed: {}\n", i, strings.Repeat("x", 200))
		wf, _, err := dsl.Parse("x.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		c.add(wf.Hash, newDefinition(wf))
		if c.bytes > 1000 && c.len() > 1 {
			t.Fatalf("%d bytes in %d definitions, over the bound of 1000", c.bytes, c.len())
		}
	}
}
