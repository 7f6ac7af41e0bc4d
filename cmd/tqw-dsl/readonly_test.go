package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
)

// runBin runs the tqw-dsl binary in dir with env added to the test's
// environment (no --store added), as cred when it is set.
func runBin(t *testing.T, dir string, env []string, cred *syscall.Credential, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(tqwBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatalf("tqw-dsl %v: %v", args, err)
	}
	return 0, out.String(), errOut.String()
}

// treeOf lists every entry under root (folders too) with its mode, size
// and bytes, so two calls differ when anything was created, removed or
// changed; "" when root does not exist.
func treeOf(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return filepath.SkipAll
		}
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

// readVerbs are the commands that only read the store, with the exit
// code each has on the test's store.
func readVerbs(runID string) [][]string {
	return [][]string{
		{"status", runID}, {"status", runID, "--json"}, {"list"}, {"list", "--json"},
		{"history", runID}, {"history", runID, "--json"}, {"store", "check"}, {"store", "check", "--json"},
		{"status", "nope"}, {"history", "nope"},
	}
}

// TestReadOnlyVerbsOnAMistypedStore is the typo of issue 12: a store URL
// with nothing at it is an error naming the URL and where it came from,
// and nothing is created.
func TestReadOnlyVerbsOnAMistypedStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"list"}, {"list", "--json"}, {"status", "r1"}, {"history", "r1"}, {"store", "check"}, {"cancel", "r1"}} {
		code, out, errOut := runBin(t, dir, []string{"TQW_STORE="}, nil, append(args, "--store", "file://./stroe")...)
		if code != exitFailed || out != "" || !strings.Contains(errOut, "no store at file://./stroe (from --store): the folder "+filepath.Join(dir, "stroe")+" does not exist") {
			t.Errorf("tqw-dsl %s --store file://./stroe: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
		code, _, errOut = runBin(t, dir, []string{"TQW_STORE=file://./stroe"}, nil, args...)
		if code != exitFailed || !strings.Contains(errOut, "no store at file://./stroe (from TQW_STORE)") {
			t.Errorf("tqw-dsl %s with TQW_STORE=file://./stroe: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
		code, _, errOut = runBin(t, dir, []string{"TQW_STORE="}, nil, args...)
		if code != exitFailed || !strings.Contains(errOut, "no store at file://.tqw (the default: neither --store nor TQW_STORE is set)") {
			t.Errorf("tqw-dsl %s with the default store: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the read-only verbs created %v (%v)", ents, err)
	}
	// An empty folder is no store either.
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runBin(t, dir, []string{"TQW_STORE="}, nil, "list", "--store", "file://empty")
	if code != exitFailed || !strings.Contains(errOut, "no store at file://empty (from --store): the folder "+filepath.Join(dir, "empty")+" holds no object") {
		t.Fatalf("list of an empty folder: exit %d, %s", code, errOut)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "empty")); len(ents) != 0 {
		t.Fatalf("list wrote into the empty folder: %v", ents)
	}
}

// TestReadOnlyVerbsWriteNothing runs every read-only verb on a store made
// by real runs, whose lock folder and writer lock file were removed (the
// file store's writable open recreates them), then on the same store made
// read-only for the user running them: the store does not change, and the
// answers are the same.
func TestReadOnlyVerbsWriteNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.must(0, "run", abs(t, "../../workflows/hello.yaml"), "--run-id", "r1")
	c.must(0, "run", abs(t, testdata+"e2e_wait.yaml"), "--detach", "--run-id", "w1")
	root := filepath.Join(c.dir, "store")
	for _, name := range []string{`\locks`, lease.DefaultLockFile} {
		if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	before := treeOf(t, root)
	want := map[string]string{}
	for _, args := range readVerbs("r1") {
		code, out, errOut := c.run(args...)
		wantCode := exitOK
		if args[len(args)-1] == "nope" {
			wantCode = exitFailed
		}
		if code != wantCode {
			t.Fatalf("tqw-dsl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, out, errOut)
		}
		want[strings.Join(args, " ")] = fmt.Sprint(code, out)
	}
	if after := treeOf(t, root); after != before {
		t.Fatalf("a read-only verb changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// The same store, which the user running the verbs may only read.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// Root ignores permission bits: run the verbs as nobody, owning
		// the store without write permission.
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		for _, p := range []string{filepath.Dir(tqwBin), filepath.Dir(c.dir), c.dir} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	setTreeWritable(t, root, false, cred)
	t.Cleanup(func() { setTreeWritable(t, root, true, nil) })
	before = treeOf(t, root)
	for _, args := range readVerbs("r1") {
		code, out, errOut := runBin(t, c.dir, []string{"TQW_STORE="}, cred, append(args, "--store", c.store)...)
		if got := fmt.Sprint(code, out); got != want[strings.Join(args, " ")] {
			t.Errorf("tqw-dsl %s on a read-only store: exit %d\nstdout:\n%s\nstderr:\n%s\nwant (exit, stdout) %q", strings.Join(args, " "), code, out, errOut, want[strings.Join(args, " ")])
		}
	}
	if after := treeOf(t, root); after != before {
		t.Fatalf("a read-only verb changed the read-only store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// A writer cannot use it, and says why.
	// The workflow is copied beside the store: the checkout's folders need
	// not be readable by the user the verbs run as.
	hello, err := os.ReadFile(abs(t, "../../workflows/hello.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(c.dir, "hello.yaml")
	if err := os.WriteFile(wf, hello, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runBin(t, c.dir, []string{"TQW_STORE="}, cred, "run", wf, "--store", c.store)
	if code != exitFailed || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("run on a read-only store: exit %d, want %d and the cause\n%s", code, exitFailed, errOut)
	}
}

// setTreeWritable removes (writable false) or restores the owner's write
// bit of every entry under root; with cred it also hands the tree to
// cred's user.
func setTreeWritable(t *testing.T, root string, writable bool, cred *syscall.Credential) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if cred != nil {
			if err := os.Lchown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
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

// memObjects lists every object of a mem store with its bytes.
func memObjects(t *testing.T, s objstore.Store) string {
	t.Helper()
	var b strings.Builder
	after := ""
	for {
		page, err := s.List(context.Background(), "", after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			data, _, err := s.Get(context.Background(), o.Key)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %x\n", o.Key, data)
		}
		if len(page) < 1000 {
			return b.String()
		}
		after = page[len(page)-1].Key
	}
}

// TestReadOnlyVerbsInProcess runs the read-only verbs in this process on
// a mem:// store: the view they read through refuses every write, and the
// store's objects stay exactly as they were.
func TestReadOnlyVerbsInProcess(t *testing.T) {
	name := freshMemName("read-only-verbs")
	url := "mem://" + name
	if code, out, errOut := runCLI(t, "run", "../../workflows/hello.yaml", "--run-id", "r1", "--store", url); code != exitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	v, err := openView(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.store.Put(context.Background(), "x", []byte("x"), objstore.PutOptions{}); !errors.Is(err, storeurl.ErrReadOnly) {
		t.Fatalf("a write through the view: %v, want ErrReadOnly", err)
	}
	if err := v.store.Delete(context.Background(), "x"); !errors.Is(err, storeurl.ErrReadOnly) {
		t.Fatalf("a delete through the view: %v, want ErrReadOnly", err)
	}
	_ = v.Close()
	before := memObjects(t, mem.Named(name))
	for _, args := range readVerbs("r1") {
		code, out, errOut := runCLI(t, append(args, "--store", url)...)
		want := exitOK
		if args[len(args)-1] == "nope" {
			want = exitFailed
		}
		if code != want {
			t.Errorf("tqw-dsl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	if after := memObjects(t, mem.Named(name)); after != before {
		t.Fatal("a read-only verb changed the store")
	}
	if code, _, errOut := runCLI(t, "list", "--store", "mem://read-only-verbs-none"); code != exitFailed ||
		!strings.Contains(errOut, "no store at mem://read-only-verbs-none (from --store): it holds no object in this process") {
		t.Fatalf("list of an empty mem store: exit %d, %s", code, errOut)
	}
}
