package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"wal.v1.bin":             true,
		"manifest-packed.v2.bin": true,
		"event.v12.json":         true,
		"wal.bin":                false,
		"wal.v1":                 false,
		"wal.vx.bin":             false,
		"Wal.v1.bin":             false,
	} {
		if err := checkName(filepath.Join("testdata", name)); (err == nil) != ok {
			t.Errorf("checkName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// fakeTB records a fatal failure instead of ending the test.
type fakeTB struct {
	testing.TB
	failed string
}

type fatal struct{}

func (f *fakeTB) Helper()             {}
func (f *fakeTB) Logf(string, ...any) {}
func (f *fakeTB) Fatal(args ...any)   { f.failed = fmt.Sprint(args...); panic(fatal{}) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(fatal{})
}

func run(tb *fakeTB, fn func()) (failed string) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatal); !ok {
				panic(r)
			}
		}
		failed = tb.failed
	}()
	fn()
	return ""
}

func TestCheckCreatesOnlyMissingFixtures(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "golden", "thing.v1.bin")

	*update = false
	tb := &fakeTB{TB: t}
	if msg := run(tb, func() { Check(tb, path, []byte("abc")) }); !strings.Contains(msg, "missing") {
		t.Fatalf("missing fixture without -update: %q, want a failure naming it missing", msg)
	}

	*update = true
	defer func() { *update = false }()
	tb = &fakeTB{TB: t}
	if msg := run(tb, func() { Check(tb, path, []byte("abc")) }); msg != "" {
		t.Fatalf("creating with -update failed: %s", msg)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "abc" {
		t.Fatalf("fixture = %q, %v; want abc", b, err)
	}

	tb = &fakeTB{TB: t}
	if msg := run(tb, func() { Check(tb, path, []byte("abd")) }); !strings.Contains(msg, "bump the format version") {
		t.Fatalf("changed encoding with -update: %q, want a failure asking for a new version", msg)
	}
	if b, _ := os.ReadFile(path); string(b) != "abc" {
		t.Fatalf("-update rewrote an existing fixture: %q", b)
	}

	tb = &fakeTB{TB: t}
	if msg := run(tb, func() {
		if got := Check(tb, path, []byte("abc")); string(got) != "abc" {
			t.Errorf("Check returned %q, want the fixture's bytes", got)
		}
	}); msg != "" {
		t.Fatalf("equal encoding failed: %s", msg)
	}
}

func TestCheckRefusesUnversionedNames(t *testing.T) {
	*update = true
	defer func() { *update = false }()
	path := filepath.Join(t.TempDir(), "thing.bin")
	tb := &fakeTB{TB: t}
	if msg := run(tb, func() { Check(tb, path, []byte("x")) }); !strings.Contains(msg, "<kind>.v<N>.<ext>") {
		t.Fatalf("unversioned name: %q, want a failure naming the rule", msg)
	}
	if _, err := os.Stat(path); err == nil {
		t.Fatal("an unversioned fixture was created")
	}
}

func TestDiffNamesTheFirstDifference(t *testing.T) {
	if d := diff([]byte("abcdef"), []byte("abcXef")); !strings.Contains(d, "byte 3") {
		t.Fatalf("diff = %s, want the offset 3", d)
	}
}
