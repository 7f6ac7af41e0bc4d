package exampletest

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RunFunc is an example's run function: it parses args, works and prints
// to out.
type RunFunc func(ctx context.Context, args []string, out io.Writer) error

// FileStore returns the URL of a file store in a new temporary folder of t.
func FileStore(t testing.TB) string {
	return "file://" + filepath.ToSlash(t.TempDir())
}

// Run runs the example in this process with args and at most 30 seconds,
// and returns what it printed and its error.
func Run(run RunFunc, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, args, &out)
	return out.String(), err
}

// MustRun is Run that fails the test, with the output, when run fails.
func MustRun(t testing.TB, run RunFunc, args ...string) string {
	t.Helper()
	out, err := Run(run, args...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	return out
}

// Contains reports, as a test error, each of wants that out lacks.
func Contains(t testing.TB, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// NotContains reports, as a test error, each of unwanted that out has.
func NotContains(t testing.TB, out string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(out, w) {
			t.Errorf("output has %q:\n%s", w, out)
		}
	}
}
