package exampletest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const childEnv = "EXAMPLETEST_CHILD_ARGS"

// echo is a stand-in example: it prints its arguments and fails when the
// first is "fail".
func echo(_ context.Context, args []string, out io.Writer) error {
	fmt.Fprintln(out, strings.Join(args, " "))
	if len(args) > 0 && args[0] == "fail" {
		return errors.New("asked to fail")
	}
	return nil
}

func TestMain(m *testing.M) {
	RunIfChild(childEnv, echo)
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	if got := MustRun(t, echo, "a", "b"); got != "a b\n" {
		t.Errorf("MustRun printed %q", got)
	}
	out, err := Run(echo, "fail", "now")
	if err == nil || out != "fail now\n" {
		t.Errorf("Run = %q, %v; want the output and the error", out, err)
	}
	deadline := func(ctx context.Context, _ []string, _ io.Writer) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		return nil
	}
	if _, err := Run(deadline); err != nil {
		t.Error(err)
	}
	Contains(t, "a b c", "a", "c")
	NotContains(t, "a b c", "d")
	if u := FileStore(t); !strings.HasPrefix(u, "file://") || u == FileStore(t) {
		t.Errorf("FileStore = %q; want a new file:// folder each time", u)
	}
}

func TestCommandRunsTheChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := Command(ctx, childEnv, []string{"x y", "z"}).Output()
	if err != nil || string(out) != "x y z\n" {
		t.Fatalf("child = %q, %v", out, err)
	}
	var exit *exec.ExitError
	cmd := Command(ctx, childEnv, []string{"fail"}, "EXTRA=1")
	cmd.Stderr = nil
	if _, err := cmd.Output(); !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(exit.Stderr), "asked to fail") {
		t.Fatalf("failing child: %v; want exit status 1 with the error on stderr", err)
	}
	if cmd.Env[len(cmd.Env)-1] != "EXTRA=1" {
		t.Errorf("env %q does not end with the extra variable", cmd.Env)
	}
}
