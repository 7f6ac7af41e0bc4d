package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An input over the limit is a usage error (exit 2) naming the limit,
// refused before it is decoded or anything is written; the same input
// pretty-printed under the limit once its whitespace is dropped runs
// (issue 23: a 30 MB input failed with exit 1 after 16 s on an internal
// queue message).
func TestRunRefusesAnInputOverTheLimit(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	big := filepath.Join(c.dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"name": "`+strings.Repeat("x", 30<<20)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr := c.must(exitUsage, "run", abs(t, "../../workflows/hello.yaml"), "--input", "@"+big)
	if !strings.Contains(stderr, "the input is too large") || !strings.Contains(stderr, "the limit is 4 MiB") {
		t.Errorf("stderr does not name the input limit:\n%s", stderr)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "store")); err == nil {
		t.Errorf("a refused input created the store")
	}
	_, stderr = c.must(exitUsage, "submit", abs(t, "../../workflows/hello.yaml"), "--input", "@"+big)
	if !strings.Contains(stderr, "the limit is 4 MiB") {
		t.Errorf("submit's stderr does not name the input limit:\n%s", stderr)
	}
	spaced := filepath.Join(c.dir, "spaced.json")
	if err := os.WriteFile(spaced, []byte(`{"name": "Ann"`+strings.Repeat(" ", 5<<20)+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := c.must(0, "run", abs(t, "../../workflows/hello.yaml"), "--input", "@"+spaced)
	if !strings.Contains(out, "Hello, Ann!") {
		t.Errorf("run with a spaced input: %s", out)
	}
}
