package exampletest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"

	"github.com/tqw-dsl/tqw/internal/crashtest"
)

// RunIfChild is for TestMain. When the environment variable envVar is set,
// it runs run with the arguments it holds (a JSON array of strings) and
// stdout, then exits: 0 when run succeeded, 1 (with the error on stderr)
// when it failed, 3 when envVar is not a JSON array. Otherwise it returns
// and the tests run.
func RunIfChild(envVar string, run RunFunc) {
	enc := os.Getenv(envVar)
	if enc == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		os.Exit(3)
	}
	if err := run(context.Background(), args, os.Stdout); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// Command returns a command that runs this test binary as the example with
// args (see RunIfChild), no test, the child's stderr on this process's
// stderr, and env appended to this process's environment (see
// crashtest.Command, which also drops the race detector's exit sleep).
func Command(ctx context.Context, envVar string, args []string, env ...string) *exec.Cmd {
	enc, _ := json.Marshal(args) // a []string always encodes
	return crashtest.Command(ctx, "^$", append([]string{envVar + "=" + string(enc)}, env...)...)
}
