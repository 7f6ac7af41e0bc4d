package golden

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var update = flag.Bool("update", false, "create missing golden fixtures (existing ones are never rewritten)")

// fixtureName is <kind>.v<N>.<ext>: the format version is part of the name,
// so a changed layout needs a new file rather than an edited one.
var fixtureName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*\.v[0-9]+\.[a-z0-9]+$`)

// checkName reports why path's file name is not a fixture name, or nil.
func checkName(path string) error {
	if name := filepath.Base(path); !fixtureName.MatchString(name) {
		return fmt.Errorf("golden: fixture name %q is not <kind>.v<N>.<ext> (for example wal.v1.bin)", name)
	}
	return nil
}

// Check compares got with the fixture at path. A missing fixture is created
// with -update and fails the test without it; an existing fixture is never
// rewritten, and a difference fails the test asking for a new format
// version. It returns the fixture's bytes, which a test then decodes.
func Check(t testing.TB, path string, got []byte) []byte {
	t.Helper()
	if err := checkName(path); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !*update {
			t.Fatalf("golden: fixture %s is missing; run the test with -update to create it from today's encoding", path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden: %v", err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("golden: %v", err)
		}
		t.Logf("golden: created %s (%d bytes)", path, len(got))
		return bytes.Clone(got)
	case err != nil:
		t.Fatalf("golden: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("golden: today's encoding differs from the fixture %s (-update never rewrites a fixture).\n"+
			"If the byte layout changed on purpose, bump the format version, add a fixture of the new name and keep "+
			"this one decoding if the format promises to read old objects.\n%s", path, diff(want, got))
	}
	return want
}

// Read returns the fixture at path, for a decode-only test of a format
// version today's code no longer writes.
func Read(t testing.TB, path string) []byte {
	t.Helper()
	if err := checkName(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v", err)
	}
	return b
}

// AddCorpus adds every fixture matching pattern (filepath.Glob) to the fuzz
// target's seed corpus; the target's only argument must be []byte. It fails
// when nothing matches, so a moved fixture does not silently shrink the
// corpus.
func AddCorpus(f *testing.F, pattern string) {
	f.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatalf("golden: %v", err)
	}
	if len(paths) == 0 {
		f.Fatalf("golden: no fixture matches %s", pattern)
	}
	for _, p := range paths {
		f.Add(Read(f, p))
	}
}

// diff describes where want and got first differ.
func diff(want, got []byte) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	window := func(b []byte) []byte {
		lo, hi := max(0, i-8), min(len(b), i+24)
		return b[lo:hi]
	}
	return fmt.Sprintf("fixture %d bytes, got %d; first difference at byte %d:\n  fixture: % x\n  got:     % x\n  fixture: %q\n  got:     %q",
		len(want), len(got), i, window(want), window(got), window(want), window(got))
}
