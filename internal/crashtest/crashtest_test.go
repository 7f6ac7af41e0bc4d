package crashtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

const selfChildEnv = "TQW_CRASHTEST_SELF_CHILD" // what the child does; set only in the child

func TestMain(m *testing.M) {
	switch os.Getenv(selfChildEnv) {
	case "":
		os.Exit(m.Run())
	case "block":
		fmt.Println("noise")
		fmt.Println("ready")
		time.Sleep(time.Hour) // until killed
	case "exit0":
		fmt.Println("done")
		os.Exit(0)
	case "exit1":
		os.Exit(1)
	}
	os.Exit(2)
}

func start(t *testing.T, mode string) *Child {
	return Start(t, Command(context.Background(), "^$", selfChildEnv+"="+mode))
}

func TestKillReapsBlockedChild(t *testing.T) {
	c := start(t, "block")
	if err := c.WaitReady("ready"); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill of a blocked child: %v", err)
	}
}

func TestKillReportsChildThatExitedOnItsOwn(t *testing.T) {
	c := start(t, "exit0")
	if line, ok := c.Line(); !ok || line != "done" {
		t.Fatalf("Line = %q, %v; want \"done\", true", line, ok)
	}
	if _, ok := c.Line(); ok {
		t.Fatal("Line after the child's last line reported more output")
	}
	err := c.Kill()
	if err == nil || !strings.Contains(err.Error(), "ended on its own") {
		t.Fatalf("Kill after the child exited: %v, want an error saying it ended on its own", err)
	}
}

func TestWaitReadyFailsWhenChildExitsFirst(t *testing.T) {
	c := start(t, "exit1")
	if err := c.WaitReady("ready"); err == nil {
		t.Fatal("WaitReady succeeded for a child that never printed the marker")
	}
	_ = c.Kill()
}

func TestKillAfter(t *testing.T) {
	c := start(t, "block")
	if err := c.WaitReady("ready"); err != nil {
		t.Fatal(err)
	}
	if killed, err := c.KillAfter(time.Millisecond); !killed {
		t.Fatalf("KillAfter on a blocked child: not killed (%v)", err)
	}
	c = start(t, "exit0")
	if killed, err := c.KillAfter(time.Hour); killed || err != nil {
		t.Fatalf("KillAfter on a child exiting with 0: killed %v, err %v; want false, nil", killed, err)
	}
	c = start(t, "exit1")
	if killed, err := c.KillAfter(time.Hour); killed || err == nil {
		t.Fatalf("KillAfter on a failing child: killed %v, err %v; want false and its exit error", killed, err)
	}
}

// fatalRecorder records Fatalf instead of stopping the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) { f.msg = fmt.Sprintf(format, args...) }

func TestCount(t *testing.T) {
	const name = "TQW_CRASHTEST_SELF_COUNT"
	t.Setenv(name, "")
	if n := Count(t, name, 7); n != 7 {
		t.Fatalf("unset: Count = %d, want the default 7", n)
	}
	t.Setenv(name, "12")
	if n := Count(t, name, 7); n != 12 {
		t.Fatalf("%s=12: Count = %d", name, n)
	}
	for _, bad := range []string{"0", "-3", "x"} {
		t.Setenv(name, bad)
		r := &fatalRecorder{TB: t}
		Count(r, name, 7)
		if !strings.Contains(r.msg, "positive whole number") {
			t.Fatalf("%s=%q: Count failed with %q, want it to fail saying what is wanted", name, bad, r.msg)
		}
	}
}

func TestRandHonorsSeedEnv(t *testing.T) {
	t.Setenv(SeedEnv, "42")
	a, b := Rand(t, 1), Rand(t, 1)
	for range 8 {
		if x, y := a.Uint64(), b.Uint64(); x != y {
			t.Fatalf("same seed, different draws: %d, %d", x, y)
		}
	}
	if d := Delay(a, time.Millisecond); d < 0 || d >= time.Millisecond {
		t.Fatalf("Delay = %v, want within [0, 1ms)", d)
	}
}

func TestAppendLineReadLines(t *testing.T) {
	path := t.TempDir() + "/log"
	for _, l := range []string{"a 1", "b 2", "c 3"} {
		if err := AppendLine(path, l); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(ReadLines(t, path), ","); got != "a 1,b 2,c 3" {
		t.Fatalf("ReadLines = %q, want the three appended lines in order", got)
	}
}

// A child the test never killed dies with the test.
func TestStartKillsLeftoverChildAtCleanup(t *testing.T) {
	var pid int
	t.Run("leaves its child running", func(t *testing.T) {
		c := start(t, "block")
		if err := c.WaitReady("ready"); err != nil {
			t.Fatal(err)
		}
		pid = c.Pid()
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("child %d not running: %v", pid, err)
		}
	})
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("child %d after its test ended: signal 0 = %v; want ESRCH (killed and reaped)", pid, err)
	}
}
