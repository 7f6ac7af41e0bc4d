package shell_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/shell"
)

// TestSupervisedExitStatus checks that exit codes and signal deaths reach
// the step exactly as the command ended, including signals a Go process
// cannot simply die of itself (SIGSEGV, SIGABRT, SIGQUIT).
func TestSupervisedExitStatus(t *testing.T) {
	a := shell.New(shell.Options{})
	for _, c := range []struct {
		script string
		code   int
	}{
		{"exit 1", 1},
		{"exit 255", 255},
		{"kill -TERM $$", 128 + 15},
		{"kill -HUP $$", 128 + 1},
		{"kill -SEGV $$", 128 + 11},
		{"kill -ABRT $$", 128 + 6},
		{"kill -QUIT $$", 128 + 3},
		{"kill -PIPE $$", 128 + 13},
	} {
		_, err := run(t, a, map[string]any{"command": c.script})
		e := wantError(t, err, actions.TypeShellExit, false, c.code)
		if got := e.Output.(map[string]any)["exit_code"]; got != int64(c.code) {
			t.Errorf("%s: exit_code %v, want %d", c.script, got, c.code)
		}
		if stderr := e.Output.(map[string]any)["stderr"]; stderr != "" {
			t.Errorf("%s: stderr %q, want nothing (the supervisor must not write there)", c.script, stderr)
		}
	}
}

// TestSupervisorIsInvisibleToCommand checks what the command sees against
// a command the worker starts itself: the same open file descriptors (the
// supervisor's pipes are close-on-exec), the same signal mask and
// dispositions, no supervisor variable, and a process group shared with
// its parent.
func TestSupervisorIsInvisibleToCommand(t *testing.T) {
	a := shell.New(shell.Options{})
	fds := map[string]any{
		"command": `for n in 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do [ -e /proc/$$/fd/$n ] && echo "fd $n $(readlink /proc/$$/fd/$n)"; done
env | grep TQW_SHELL_SUPERVISOR
[ "$(cut -d' ' -f5 /proc/$$/stat)" = "$PPID" ] && echo "in the group of its parent"
true`,
		"stdin": "x",
	}
	// grep, started directly, shows the mask and dispositions it was given.
	signals := map[string]any{"command": []any{"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}}
	stdout := func(args map[string]any) string {
		t.Helper()
		out, err := run(t, a, args)
		if err != nil {
			t.Fatal(err)
		}
		return regexp.MustCompile(`pipe:\[\d+\]`).ReplaceAllString(out["stdout"].(string), "pipe")
	}
	supervisedFds, supervisedSignals := stdout(fds), stdout(signals)
	restore := shell.RunUnsupervisedForTest()
	directFds, directSignals := stdout(fds), stdout(signals)
	restore()
	if strings.Contains(supervisedFds, "TQW_SHELL_SUPERVISOR") {
		t.Errorf("the command sees the supervisor's variable:\n%s", supervisedFds)
	}
	want := directFds + "in the group of its parent\n" // its parent is the worker, in another group
	if supervisedFds != want {
		t.Errorf("supervised command:\n%s\nwant, as when started directly plus one group:\n%s", supervisedFds, want)
	}
	if !strings.Contains(supervisedSignals, "SigIgn") || supervisedSignals != directSignals {
		t.Errorf("signal mask or dispositions differ; supervised:\n%s\ndirect:\n%s", supervisedSignals, directSignals)
	}
	// The name is reserved in a step's env.
	_, err := run(t, a, map[string]any{"command": "true", "env": map[string]any{"TQW_SHELL_SUPERVISOR": "1"}})
	wantError(t, err, actions.TypeValidation, false, 0)
}

// TestGoVariablesDoNotReachSupervisor: the command's environment reaches
// the command only; the supervisor, a Go program, does not see its
// GODEBUG (which would make it trace its start on the command's stderr).
func TestGoVariablesDoNotReachSupervisor(t *testing.T) {
	out, err := run(t, shell.New(shell.Options{}), map[string]any{
		"command": `echo "$GODEBUG"`,
		"env":     map[string]any{"GODEBUG": "inittrace=1", "GOTRACEBACK": "crash"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "inittrace=1\n" || out["stderr"] != "" {
		t.Fatalf("stdout %q, stderr %q; want the variable in the command and nothing from the supervisor", out["stdout"], out["stderr"])
	}
}

// TestStartErrorThroughSupervisor: a program the supervisor cannot exec
// (not a valid executable) is a validation error, as a direct start was.
func TestStartErrorThroughSupervisor(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(bad, []byte{0x7f, 'E', 'L', 'F', 0, 0, 0}, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, shell.New(shell.Options{}), map[string]any{"command": []any{bad}})
	e := wantError(t, err, actions.TypeValidation, false, 0)
	if !strings.Contains(e.Message, bad) || !strings.Contains(e.Message, "exec format error") {
		t.Fatalf("message %q does not name the program and the reason", e.Message)
	}
}

// TestUnsupervisedFallbackWarns: without a supervisor the action still
// runs commands, and says what it lost in the log.
func TestUnsupervisedFallbackWarns(t *testing.T) {
	defer shell.RunUnsupervisedForTest()()
	var logs bytes.Buffer
	c := call(map[string]any{"command": `echo hi; exit 4`})
	c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, err := shell.New(shell.Options{}).Execute(t.Context(), c)
	e := wantError(t, err, actions.TypeShellExit, false, 4)
	if e.Output.(map[string]any)["stdout"] != "hi\n" {
		t.Fatalf("output %#v", e.Output)
	}
	if !strings.Contains(logs.String(), "without a supervisor") || !strings.Contains(logs.String(), "keep running") {
		t.Fatalf("no warning about the lost guarantee in the log:\n%s", logs.String())
	}
}

// TestSupervisorRefusesBadInvocation starts this binary as a supervisor by
// hand, the wrong way: it reports a failure and kills nothing.
func TestSupervisorRefusesBadInvocation(t *testing.T) {
	for _, c := range []struct {
		name    string
		version string
		setpgid bool
		want    string
	}{
		{"other protocol", "0", true, `fail supervisor protocol "0"`},
		{"not a group leader", shell.SupervisorVersionForTest, false, "fail supervisor is not the leader of its process group"},
		{"no environment sent", shell.SupervisorVersionForTest, true, "fail reading the command's environment: unexpected EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lifeR, lifeW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			lifeW.Close() // the worker is gone before it sent anything
			statusR, statusW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "tqw-shell-supervisor", "/bin/true", "true")
			cmd.Env = []string{shell.SupervisorEnvForTest + "=" + c.version}
			cmd.ExtraFiles = []*os.File{lifeR, statusW}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: c.setpgid}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lifeR.Close()
			statusW.Close()
			report, err := io.ReadAll(statusR)
			if err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 {
				t.Errorf("supervisor ended with %v, want exit code 125", err)
			}
			if !strings.HasPrefix(string(report), c.want) {
				t.Errorf("report %q, want it to start with %q", report, c.want)
			}
		})
	}
}
