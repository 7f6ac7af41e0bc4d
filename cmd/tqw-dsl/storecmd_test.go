package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// walObjects lists the WAL object names of the queue's kv in the file
// store at root, through the store: kv packs its WAL folder there, so the
// objects are records of a log, not files.
func walObjects(t *testing.T, root string) []string {
	t.Helper()
	r, err := file.OpenReadOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	infos, err := r.List(context.Background(), "queue/wal/", "", 0) // in key order: 20-digit sequences sort in order
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, info := range infos {
		names = append(names, strings.TrimPrefix(info.Key, "queue/wal/"))
	}
	return names
}

// TestStoreWithAHole deletes one WAL object in the middle of a store made
// by real runs: every command that reads the store fails naming it (none
// shows half the runs with exit 0, none writes into the hole), store check
// reports it with exit 1, and store truncate --yes makes the store usable
// again, reporting what it discarded.
func TestStoreWithAHole(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	hello := abs(t, "../../workflows/hello.yaml")
	root := filepath.Join(c.dir, "store")
	c.must(0, "run", hello, "--run-id", "before1")
	c.must(0, "run", hello, "--run-id", "before2")
	kept := walObjects(t, root)
	c.must(0, "run", hello, "--run-id", "after1")
	c.must(0, "run", hello, "--run-id", "after2")
	all := walObjects(t, root)
	// all[len(kept)] is the fence of the process that ran after1; the
	// object after it holds after1's first commits.
	hole, lastGood := "queue/wal/"+all[len(kept)+1], "queue/wal/"+all[len(kept)]
	func() { // deleted by hand, through the store
		s, err := file.Open(root)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Delete(context.Background(), hole); err != nil {
			t.Fatal(err)
		}
	}()

	for _, args := range [][]string{{"list"}, {"status", "before1"}, {"run", hello, "--run-id", "later"}} {
		code, out, errOut := c.run(args...)
		if code != exitFailed || !strings.Contains(errOut, "kv: corrupt object") || !strings.Contains(errOut, hole) ||
			!strings.Contains(errOut, lastGood) || !strings.Contains(errOut, "tqw-dsl store check") {
			t.Fatalf("tqw-dsl %s on a store with a hole: exit %d, want %d and the corruption named\nstdout:\n%s\nstderr:\n%s",
				strings.Join(args, " "), code, exitFailed, out, errOut)
		}
	}
	if r, err := file.OpenReadOnly(root); err != nil {
		t.Fatal(err)
	} else if _, err := r.Head(context.Background(), hole); !errors.Is(err, objstore.ErrNotExist) {
		r.Close()
		t.Fatalf("a refused writer wrote into the hole: %v", err)
	} else {
		r.Close()
	}

	before := c.snapshot()
	out, _ := c.must(exitFailed, "store", "check")
	if !strings.HasPrefix(out, hole+": missing while ") || !strings.Contains(out, "the log is good up to \""+lastGood+"\"") {
		t.Fatalf("store check does not report the hole first:\n%s", out)
	}
	out, _ = c.must(exitFailed, "store", "check", "--json")
	var rep struct {
		Healthy  bool
		BreakAt  uint64 `json:"break_at"`
		Problems []struct{ Object, Kind string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Healthy || rep.BreakAt == 0 || len(rep.Problems) != 1 || rep.Problems[0].Object != hole || rep.Problems[0].Kind != "missing" {
		t.Fatalf("store check --json: %+v", rep)
	}

	out, errOut := c.must(exitUsage, "store", "truncate")
	if !strings.Contains(out, "would discard") || !regexp.MustCompile(regexp.QuoteMeta(hole)+` +missing`).MatchString(out) ||
		!strings.Contains(errOut, "nothing changed: run again with --yes") {
		t.Fatalf("store truncate without --yes:\n%s\n%s", out, errOut)
	}
	if c.snapshot() != before {
		t.Fatal("store check or store truncate without --yes changed the store")
	}

	out, _ = c.must(exitOK, "store", "truncate", "--yes")
	total := regexp.MustCompile(`total: (\d+) WAL objects \(sequences \d+ to \d+\), (\d+) commits, \d+ bytes, epochs [\d, ]+; 1 missing`)
	if !strings.Contains(out, "truncated the log at WAL sequence") || !total.MatchString(out) || !strings.Contains(out, "opens again") {
		t.Fatalf("store truncate --yes:\n%s", out)
	}
	if m := total.FindStringSubmatch(out); m[1] != strconv.Itoa(len(all)-len(kept)-1) {
		t.Fatalf("discarded %s WAL objects, want every slot from the hole on (%d):\n%s", m[1], len(all)-len(kept)-1, out)
	}
	out, _ = c.must(exitOK, "store", "check")
	if !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("store check after the truncation:\n%s", out)
	}
	out, _ = c.must(exitOK, "list")
	if !strings.Contains(out, "before1") || !strings.Contains(out, "before2") || strings.Contains(out, "after2") {
		t.Fatalf("list after the truncation shows\n%s\nwant before1 and before2, not after2", out)
	}
	if out, _ := c.must(exitOK, "run", hello, "--run-id", "later"); out != "Hello, world!\n" {
		t.Fatalf("run after the truncation: %q", out)
	}
	c.must(exitOK, "store", "check")
	out, _ = c.must(exitOK, "store", "truncate")
	if !strings.Contains(out, "nothing to truncate") {
		t.Fatalf("store truncate on a whole log:\n%s", out)
	}
	if _, errOut := c.must(exitUsage, "store", "truncate", "--at", "1"); !strings.Contains(errOut, "below the checkpoint") {
		t.Fatalf("store truncate --at below the checkpoint:\n%s", errOut)
	}
}

func TestStoreCommandUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-store")
	code, _, errOut := runCLI(t, "store", "check", "--store", "file://"+missing)
	if code != exitFailed || !strings.Contains(errOut, "file://"+missing) {
		t.Fatalf("store check of a missing folder: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("store check created the folder: %v", err)
	}
	if code, _, errOut := runCLI(t, "store", "truncate", "--yes", "--store", "file://"+missing); code != exitFailed || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("store truncate of a missing folder: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "store", "check", "--store", "mem://store-cmd-usage-empty"); code != exitFailed || !strings.Contains(errOut, "no store at mem://store-cmd-usage-empty") {
		t.Fatalf("store check of an empty store: exit %d\n%s", code, errOut)
	}
	for _, args := range [][]string{
		{"store"},
		{"store", "nosuch"},
		{"store", "check", "extra"},
		{"store", "check", "--bogus"},
		{"store", "truncate", "--at", "x"},
		{"store", "check", "--store", "nosuchscheme://x"},
	} {
		if code, out, errOut := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d; want %d\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
}
