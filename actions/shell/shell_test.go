package shell_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/shell"
)

func call(args map[string]any) *actions.Call {
	return &actions.Call{RunID: "r", StepID: "s", Attempt: 1, Args: args}
}

// env is a fake worker environment.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func run(t *testing.T, a *shell.Action, args map[string]any) (map[string]any, error) {
	t.Helper()
	out, err := a.Execute(context.Background(), call(args))
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}

func wantError(t *testing.T, err error, typ string, retryable bool, status int) *actions.Error {
	t.Helper()
	e, ok := actions.AsError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want *actions.Error", err, err)
	}
	if e.Type != typ || e.Retryable != retryable || e.Status != status {
		t.Fatalf("err = %+v, want type %s retryable %v status %d", e, typ, retryable, status)
	}
	return e
}

func TestScriptAndArgv(t *testing.T) {
	a := shell.New(shell.Options{})
	if a.Name() != "shell" {
		t.Fatalf("Name = %q", a.Name())
	}
	out, err := run(t, a, map[string]any{"command": `echo "a b" | tr a-z A-Z; echo oops >&2`})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "A B\n" || out["stderr"] != "oops\n" || out["exit_code"] != int64(0) {
		t.Fatalf("script output = %#v", out)
	}
	// argv runs without a shell: metacharacters reach the program verbatim.
	out, err = run(t, a, map[string]any{"command": []any{"printf", "%s|", "$HOME", "a b", ";"}})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "$HOME|a b|;|" {
		t.Fatalf("argv output = %#v", out)
	}
	if out["stdout_truncated"] != false || out["stderr_truncated"] != false {
		t.Fatalf("flags = %#v", out)
	}
}

func TestEnvDirStdin(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	a := shell.New(shell.Options{
		Dir:       dir,
		LookupEnv: env(map[string]string{"PATH": os.Getenv("PATH"), "HOME": "/home/w", "AWS_SECRET_ACCESS_KEY": "leak", "LANG": "C.UTF-8"}),
	})
	out, err := run(t, a, map[string]any{
		"command": `env | sort; pwd; cat`,
		"env":     map[string]any{"TOKEN": "t0k", "LANG": "fr_FR.UTF-8"},
		"dir":     "sub",
		"stdin":   "from stdin",
	})
	if err != nil {
		t.Fatal(err)
	}
	stdout := out["stdout"].(string)
	for _, want := range []string{"HOME=/home/w\n", "TOKEN=t0k\n", "LANG=fr_FR.UTF-8\n", sub + "\n", "from stdin"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("a non-inherited variable leaked:\n%s", stdout)
	}
	// Without PATH in the worker's environment a default is used.
	a = shell.New(shell.Options{LookupEnv: env(nil)})
	out, err = run(t, a, map[string]any{"command": `echo $PATH`})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "/usr/local/bin:/usr/bin:/bin\n" {
		t.Fatalf("PATH = %q", out["stdout"])
	}
}

func TestLargeStdin(t *testing.T) {
	a := shell.New(shell.Options{})
	big := strings.Repeat("x", 1<<20)
	out, err := run(t, a, map[string]any{"command": "wc -c", "stdin": big})
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out["stdout"].(string)) != "1048576" {
		t.Fatalf("wc -c = %q", out["stdout"])
	}
	// A command that never reads its stdin still finishes.
	if _, err := run(t, a, map[string]any{"command": "true", "stdin": big}); err != nil {
		t.Fatal(err)
	}
	// No stdin given: the command reads an empty input.
	out, err = run(t, a, map[string]any{"command": "cat"})
	if err != nil || out["stdout"] != "" {
		t.Fatalf("cat without stdin: %#v, %v", out, err)
	}
}

func TestExitCode(t *testing.T) {
	a := shell.New(shell.Options{})
	_, err := run(t, a, map[string]any{"command": `echo partial; echo "it broke" >&2; exit 3`})
	e := wantError(t, err, actions.TypeShellExit, false, 3)
	out := e.Output.(map[string]any)
	if out["stdout"] != "partial\n" || out["stderr"] != "it broke\n" || out["exit_code"] != int64(3) {
		t.Fatalf("error output = %#v", out)
	}
	if !strings.Contains(e.Message, "it broke") {
		t.Fatalf("message %q does not quote stderr", e.Message)
	}
	// Killed by a signal: 128+signal, as shells report it.
	_, err = run(t, a, map[string]any{"command": `kill -9 $$`})
	wantError(t, err, actions.TypeShellExit, false, 128+9)
}

func TestOutputCap(t *testing.T) {
	a := shell.New(shell.Options{MaxOutputBytes: 10})
	out, err := run(t, a, map[string]any{"command": `printf 0123456789; printf abc >&2`})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "0123456789" || out["stdout_truncated"] != false {
		t.Fatalf("at the cap: %#v", out)
	}
	// 200 KiB through a 5-byte cap: the rest is drained, not blocking the writer.
	out, err = run(t, a, map[string]any{"command": `head -c 204800 /dev/zero | tr '\0' x; echo done >&2`, "max_output_bytes": 5})
	if err != nil {
		t.Fatal(err)
	}
	if out["stdout"] != "xxxxx" || out["stdout_truncated"] != true || out["stderr"] != "done\n" || out["stderr_truncated"] != false {
		t.Fatalf("over the cap: %#v", out)
	}
}

func TestStartErrors(t *testing.T) {
	a := shell.New(shell.Options{})
	cases := []struct {
		args  map[string]any
		field string
	}{
		{map[string]any{}, "command"},
		{map[string]any{"command": ""}, "command"},
		{map[string]any{"command": []any{}}, "command"},
		{map[string]any{"command": []any{"echo", 1}}, "command[1]"},
		{map[string]any{"command": 7}, "command"},
		{map[string]any{"command": []any{"/no/such/program"}}, "command"},
		{map[string]any{"command": []any{"no-such-program-tqw"}}, "command"},
		{map[string]any{"command": "true", "dir": "/no/such/dir"}, "dir"},
		{map[string]any{"command": "true", "env": map[string]any{"A=B": "x"}}, "env.A=B"},
		{map[string]any{"command": "true", "env": map[string]any{"A": 1}}, "env.A"},
		{map[string]any{"command": "true", "stdin": []any{}}, "stdin"},
		{map[string]any{"command": "true", "max_output_bytes": -1}, "max_output_bytes"},
		{map[string]any{"command": "true", "timeout": "1 minute"}, "timeout"},
		{map[string]any{"command": "true", "cwd": "/"}, "cwd"},
	}
	for _, c := range cases {
		_, err := run(t, a, c.args)
		wantError(t, err, actions.TypeValidation, false, 0)
		var ae *actions.ArgError
		if !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("%v: %v, want field %q", c.args, err, c.field)
		}
	}
}

// timers is an injectable After: each call is reported on calls, and the
// returned channel fires when the test calls fire(d) for that duration.
type timers struct {
	mu    sync.Mutex
	chans map[time.Duration]chan time.Time
	calls chan time.Duration
}

func newTimers() *timers {
	return &timers{chans: map[time.Duration]chan time.Time{}, calls: make(chan time.Duration, 16)}
}

func (tm *timers) ch(d time.Duration) chan time.Time {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	c, ok := tm.chans[d]
	if !ok {
		c = make(chan time.Time)
		tm.chans[d] = c
	}
	return c
}

func (tm *timers) After(d time.Duration) <-chan time.Time {
	c := tm.ch(d)
	tm.calls <- d
	return c
}

func (tm *timers) fire(d time.Duration) { close(tm.ch(d)) }

// waitCall waits until After(d) has been called.
func (tm *timers) waitCall(t *testing.T, d time.Duration) {
	t.Helper()
	for got := range tm.calls {
		if got == d {
			return
		}
	}
}

const (
	grace   = 7 * time.Second
	timeout = 90 * time.Second
)

// groupScript starts a grandchild and reports both pids through a FIFO,
// which the test reads (blocking) so it knows the processes exist.
func groupScript(t *testing.T, trapTerm bool) (script string, pids func() (sh, grandchild int)) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pids")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	trap := ""
	if trapTerm {
		trap = "trap '' TERM; "
	}
	script = fmt.Sprintf("%ssleep 60 & echo $$ $! > %s; wait", trap, fifo)
	return script, func() (int, int) {
		data, err := os.ReadFile(fifo) // blocks until the script writes
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(data))
		sh, _ := strconv.Atoi(f[0])
		gc, _ := strconv.Atoi(f[1])
		return sh, gc
	}
}

// proc watches a process that is not our child through a pidfd, which
// becomes readable when the process exits and cannot be fooled by pid reuse.
type proc struct {
	pid, fd int
}

func watch(t *testing.T, pid int) *proc {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v (the process is already gone?)", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &proc{pid, fd}
}

// exited reports whether the process has exited, waiting up to wait for it.
// SIGKILL is delivered asynchronously, so a killed process may take a moment
// to finish dying; the bound only limits how long a failing test hangs.
func (p *proc) exited(t *testing.T, wait time.Duration) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(wait.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			return false
		}
		// Exited: kill(pid, 0) now fails, or finds only the zombie left for init.
		if err := syscall.Kill(p.pid, 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("kill(%d, 0): %v", p.pid, err)
		}
		return true
	}
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	tm := newTimers()
	a := shell.New(shell.Options{Grace: grace, After: tm.After})
	script, pids := groupScript(t, false)
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(context.Background(), call(map[string]any{"command": script, "timeout": "90s"}))
		done <- err
	}()
	shPid, gcPid := pids()
	sh, gc := watch(t, shPid), watch(t, gcPid)
	if gc.exited(t, 0) {
		t.Fatal("grandchild not running before the timeout")
	}
	tm.waitCall(t, timeout)
	tm.fire(timeout)
	e := wantError(t, <-done, actions.TypeTimeout, true, 0)
	if e.Output == nil {
		t.Fatal("timeout error carries no output")
	}
	if !sh.exited(t, 10*time.Second) || !gc.exited(t, 10*time.Second) {
		t.Fatal("the process group survived the timeout")
	}
}

func TestCancelEscalatesToSIGKILL(t *testing.T) {
	tm := newTimers()
	a := shell.New(shell.Options{Grace: grace, After: tm.After})
	script, pids := groupScript(t, true) // ignores SIGTERM
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Execute(ctx, call(map[string]any{"command": script}))
		done <- err
	}()
	shPid, gcPid := pids()
	sh, gc := watch(t, shPid), watch(t, gcPid)
	cancel()
	tm.waitCall(t, grace) // SIGTERM sent, grace period started
	select {
	case err := <-done:
		t.Fatalf("returned before the grace period ended, although TERM is ignored: %v", err)
	default:
	}
	if sh.exited(t, 0) || gc.exited(t, 0) {
		t.Fatal("processes that ignore SIGTERM died before SIGKILL")
	}
	tm.fire(grace)
	wantError(t, <-done, actions.TypeCancelled, false, 0)
	if !sh.exited(t, 10*time.Second) || !gc.exited(t, 10*time.Second) {
		t.Fatal("the process group survived SIGKILL")
	}
}

func TestLeftoverBackgroundProcessIsKilled(t *testing.T) {
	dir := t.TempDir()
	out, in := filepath.Join(dir, "out"), filepath.Join(dir, "in")
	for _, f := range []string{out, in} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The script reports the background pid, then waits for the test's go-ahead
	// so the test can watch the pid before the script exits.
	script := fmt.Sprintf("sleep 60 & echo $! > %s; read go < %s; echo started", out, in)
	done := make(chan error, 1)
	var result map[string]any
	go func() {
		var err error
		result, err = run(t, shell.New(shell.Options{}), map[string]any{"command": script})
		done <- err
	}()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	bg := watch(t, pid)
	if err := os.WriteFile(in, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if result["stdout"] != "started\n" {
		t.Fatalf("stdout = %q", result["stdout"])
	}
	if !bg.exited(t, 10*time.Second) {
		t.Fatalf("background process %d survived the step", pid)
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := shell.New(shell.Options{}).Execute(ctx, call(map[string]any{"command": "true"}))
	wantError(t, err, actions.TypeCancelled, false, 0)
}

// FuzzArgs decodes arbitrary JSON as shell arguments (without running
// anything): no panic, and every failure names a field.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{`{"command":"echo hi","env":{"A":"b"},"stdin":"x"}`, `{"command":["ls","-l",3]}`,
		`{"command":[],"timeout":"1s"}`, `{"command":"","max_output_bytes":1.5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		var args shell.Args
		err := actions.DecodeArgs(m, &args)
		if err == nil {
			if args.Command.Script == "" && len(args.Command.Argv) == 0 {
				t.Fatalf("accepted an empty command: %s", data)
			}
			return
		}
		var ae *actions.ArgError
		if !actions.IsType(err, actions.TypeValidation) || !errors.As(err, &ae) {
			t.Fatalf("not a validation error with a field: %v", err)
		}
	})
}
