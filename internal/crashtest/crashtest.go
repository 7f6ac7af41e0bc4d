package crashtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SeedEnv names the environment variable that, when set to a whole number,
// replaces the time-based seed of [Rand], to repeat a kill schedule.
const SeedEnv = "TQW_CRASH_SEED"

// IfChild is for TestMain. When the environment variable envVar is set, it
// runs child with its value and exits: 0 when child returned nil, 3 (with
// the error on stderr) otherwise. When envVar is unset it returns and the
// tests run.
func IfChild(envVar string, child func(value string) error) {
	v := os.Getenv(envVar)
	if v == "" {
		return
	}
	if err := child(v); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// Parent skips the calling crash test inside a child process (childEnv is
// set: the child runs as a test of the same binary) and in -short mode.
func Parent(t testing.TB, childEnv string) {
	t.Helper()
	if os.Getenv(childEnv) != "" {
		t.Skip("inside the child")
	}
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
}

// Count returns the positive whole number in the environment variable
// name, or def when it is unset. A malformed value fails the test rather
// than silently running a different number of kills.
func Count(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive whole number", name, v)
	}
	return n
}

// Rand returns the source of kill moments: stream of a PCG seeded from the
// clock, or from SeedEnv when set. It logs the seed so a failing schedule
// can be repeated (the children's own timing still varies).
func Rand(t testing.TB, stream uint64) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a whole number", SeedEnv, v)
		}
		seed = s
	}
	t.Logf("kill schedule seed %d (%s)", seed, SeedEnv)
	return rand.New(rand.NewPCG(seed, stream))
}

// Delay returns a random duration in [0, max) drawn from rng.
func Delay(rng *rand.Rand, max time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(max)))
}

// Command returns a command that re-executes this test binary running only
// the tests matching run ("^$" for none, when TestMain dispatches the
// child), once, with env appended to this process's environment and the
// child's stderr on this process's stderr. The race detector's one-second
// sleep at exit is dropped from the child, keeping any other GORACE option.
func Command(ctx context.Context, run string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(append(os.Environ(), RaceNoExitSleep()), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// RaceNoExitSleep is the GORACE setting Command gives its children.
func RaceNoExitSleep() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

// Child is a started child process whose stdout is read line by line.
type Child struct {
	cmd      *exec.Cmd
	lines    *bufio.Scanner
	signaled bool
	reaped   bool
}

// Start starts cmd with its stdout piped to the returned Child; the
// caller reads it with Line or WaitReady, or leaves it to KillAfter.
// Setting cmd.Stderr beforehand is allowed; cmd.Stdout must be nil. A
// child not yet reaped when the test ends (it failed half-way) is killed
// and reaped then, so no child outlives its test.
func Start(t testing.TB, cmd *exec.Cmd) *Child {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{cmd: cmd, lines: bufio.NewScanner(out)}
	t.Cleanup(func() {
		if !c.reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Line returns the child's next stdout line, and false at the end of its
// output (it exited or was killed).
func (c *Child) Line() (string, bool) {
	if !c.lines.Scan() {
		return "", false
	}
	return c.lines.Text(), true
}

// WaitReady reads stdout until a line equal to marker. It returns an error
// when the output ends first (the child exited before it was ready).
func (c *Child) WaitReady(marker string) error {
	for {
		line, ok := c.Line()
		if !ok {
			return fmt.Errorf("child exited before it printed %q (%v)", marker, c.lines.Err())
		}
		if line == marker {
			return nil
		}
	}
}

// Signal sends SIGKILL to the child without reaping it, so the caller can
// still read what it printed before dying; call Reap afterwards.
func (c *Child) Signal() error {
	c.signaled = true
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill child: %w", err)
	}
	return nil
}

// Reap waits for the child, after Signal, and returns an error unless it
// died of SIGKILL: a child that ended on its own did not crash where the
// test meant it to.
func (c *Child) Reap() error {
	if !c.signaled {
		if err := c.Signal(); err != nil {
			return err
		}
	}
	err := c.cmd.Wait()
	c.reaped = true
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return fmt.Errorf("child ended on its own (%v) before the kill", err)
	}
	return nil
}

// Kill sends SIGKILL to the child and reaps it (see Reap).
func (c *Child) Kill() error {
	if err := c.Signal(); err != nil {
		return err
	}
	return c.Reap()
}

// KillAfter discards the child's further output and kills it after d,
// unless it exits first. It returns killed true once the child was killed
// and reaped; otherwise killed is false and err is how it exited (nil when
// it succeeded).
func (c *Child) KillAfter(d time.Duration) (killed bool, err error) {
	go func() {
		// Keep the pipe empty so the child never blocks writing to it.
		for c.lines.Scan() {
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		c.signaled = true
		_ = c.cmd.Process.Signal(syscall.SIGKILL) // it may have just exited; reaped below either way
		<-exited
		c.reaped = true
		return true, nil
	case err := <-exited:
		c.reaped = true
		return false, err
	}
}

// AppendLine appends line and a newline to the file at path, creating it,
// and syncs it: a child's log of what it did that survives SIGKILL (a
// small O_APPEND write is not torn by it).
func AppendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		return err
	}
	return f.Sync()
}

// ReadLines returns the lines of the file at path, such as a log written
// with AppendLine, failing the test when it cannot be read.
func ReadLines(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
