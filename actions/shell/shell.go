package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/shell/internal/supervisor"
)

// Name is the action's name in workflows.
const Name = "shell"

// Defaults used when Options leave a field zero.
const (
	DefaultMaxOutputBytes = 1 << 20
	DefaultGrace          = 5 * time.Second
	defaultPath           = "/usr/local/bin:/usr/bin:/bin"
)

// DefaultInherit lists the environment variables a command inherits from
// the worker when Options.Inherit is nil.
var DefaultInherit = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"}

// Options configure the action.
type Options struct {
	// Dir is the working directory for commands without `dir`, and the base
	// for a relative `dir`; "" means the worker's working directory.
	Dir string
	// Inherit names the variables taken from the worker's environment; nil
	// means DefaultInherit.
	Inherit []string
	// LookupEnv reads the worker's environment; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Timeout bounds an attempt when the step gives no timeout; 0 means the
	// attempt is bounded only by its context.
	Timeout time.Duration
	// MaxOutputBytes is the default cap per stream; 0 means DefaultMaxOutputBytes.
	MaxOutputBytes int64
	// Grace is how long a process group has between SIGTERM and SIGKILL; 0
	// means DefaultGrace.
	Grace time.Duration
	// After returns a channel that fires after d; nil means time.After.
	// Tests inject it to fire timeouts and grace periods on demand.
	After func(d time.Duration) <-chan time.Time
}

// Action is the "shell" action. Create it with New.
type Action struct {
	opts Options
}

// New returns the action configured by opts.
func New(opts Options) *Action {
	if opts.Inherit == nil {
		opts.Inherit = DefaultInherit
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.After == nil {
		opts.After = time.After
	}
	return &Action{opts: opts}
}

// Name returns "shell".
func (a *Action) Name() string { return Name }

// Args are the action's arguments, decoded with actions.DecodeArgs.
type Args struct {
	Command        Command           `arg:"command,required"`
	Env            map[string]string `arg:"env"`
	Dir            string            `arg:"dir"`
	Stdin          *string           `arg:"stdin"`
	Timeout        time.Duration     `arg:"timeout"`
	MaxOutputBytes *int64            `arg:"max_output_bytes"`
}

// Command is a script (run by /bin/sh -c) or an argv list (run directly).
type Command struct {
	// Script is set when the command was a string.
	Script string
	// Argv is set when the command was a list.
	Argv []string
}

// DecodeArg accepts a non-empty string or a non-empty list of strings.
func (c *Command) DecodeArg(v any) error {
	switch x := v.(type) {
	case string:
		if strings.TrimSpace(x) == "" {
			return errors.New("empty command")
		}
		*c = Command{Script: x}
		return nil
	case []any:
		if len(x) == 0 {
			return errors.New("empty argv list; give at least the program")
		}
		argv := make([]string, len(x))
		for i, it := range x {
			s, ok := it.(string)
			if !ok {
				return &actions.ArgError{Field: fmt.Sprintf("[%d]", i), Problem: fmt.Sprintf("want a string, got %T", it)}
			}
			if strings.IndexByte(s, 0) >= 0 {
				return &actions.ArgError{Field: fmt.Sprintf("[%d]", i), Problem: "contains a NUL byte"}
			}
			argv[i] = s
		}
		if argv[0] == "" {
			return &actions.ArgError{Field: "[0]", Problem: "empty program name"}
		}
		*c = Command{Argv: argv}
		return nil
	case []string:
		l := make([]any, len(x))
		for i, s := range x {
			l[i] = s
		}
		return c.DecodeArg(l)
	}
	return fmt.Errorf("want a script string or a list of strings (argv), got %T", v)
}

// Execute runs the command once.
func (a *Action) Execute(ctx context.Context, call *actions.Call) (any, error) {
	var args Args
	if err := actions.DecodeArgs(call.Args, &args); err != nil {
		return nil, err
	}
	cmd, err := a.command(&args)
	if err != nil {
		return nil, err
	}
	maxOut := a.opts.MaxOutputBytes
	if args.MaxOutputBytes != nil {
		if *args.MaxOutputBytes <= 0 {
			return nil, actions.ValidationError("max_output_bytes", "want a positive number of bytes, got %d", *args.MaxOutputBytes)
		}
		maxOut = *args.MaxOutputBytes
	}
	timeout := a.opts.Timeout
	if args.Timeout > 0 {
		timeout = args.Timeout
	}
	if e := actions.ContextError(ctx, "shell"); e != nil {
		return nil, e
	}

	path := cmd.Path // the program, whatever process runs it
	log := call.Log().With("action", Name)
	var sup *supervision
	if exe, err := supervisorPath(); err != nil {
		log.Warn("shell: running the command without a supervisor: if this worker dies, the command and its process group keep running", "err", err)
		cmd.SysProcAttr = supervisor.WithParentDeathSignal(cmd.SysProcAttr, syscall.SIGKILL) // covers the direct child, at least
	} else {
		if sup, err = superviseCommand(cmd, exe); err != nil {
			if _, ok := actions.AsError(err); ok {
				return nil, err
			}
			return nil, fmt.Errorf("shell: %w", err)
		}
		defer sup.close()
	}

	stdout := &capBuffer{max: maxOut}
	stderr := &capBuffer{max: maxOut}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("shell: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("shell: %w", err)
	}
	// The child gets pipe ends directly (no copying goroutines inside
	// os/exec), so cmd.Wait returns when the leader exits even while
	// grandchildren still hold the pipes.
	cmd.Stdout, cmd.Stderr = outW, errW
	var inW *os.File
	if args.Stdin != nil {
		inR, w, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			errR.Close()
			errW.Close()
			return nil, fmt.Errorf("shell: %w", err)
		}
		cmd.Stdin, inW = inR, w
	}
	// The parent-death signal fires when the thread that started the child
	// exits, and Go ends a thread when a goroutine exits while locked to it;
	// so one goroutine, locked to its thread for as long as the child lives,
	// both starts the child and waits for it to exit. It waits without
	// reaping: while the leader is a zombie its pid, and so the process
	// group id, cannot be reused, so the group signals below can never
	// reach an unrelated process.
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		defer close(exited)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	startErr := <-started
	outW.Close()
	errW.Close()
	if f, ok := cmd.Stdin.(*os.File); ok {
		f.Close() // the child has its own copy
	}
	if sup != nil {
		sup.closeChildEnds()
		if startErr == nil {
			sup.sendEnv()
		}
	}
	if startErr != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		return nil, actions.ValidationError("command", "cannot start %q: %v", path, startErr)
	}
	if inW != nil {
		// A command that exits without reading makes the write fail with
		// EPIPE; closing inW below unblocks a write nobody will read.
		go func() {
			_, _ = io.Copy(inW, strings.NewReader(*args.Stdin))
			inW.Close()
		}()
		defer inW.Close()
	}
	if sup != nil && testHookSupervised != nil {
		testHookSupervised(sup.lifeline)
	}
	pgid := cmd.Process.Pid // Setpgid with Pgid 0: the group id is the leader's pid
	log = log.With("pgid", pgid)
	log.Debug("shell started", "path", path, "supervised", sup != nil)

	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); drain(outR, stdout) }()
	go func() { defer copies.Done(); drain(errR, stderr) }()
	if sup != nil {
		copies.Add(1)
		go func() { defer copies.Done(); sup.readReports() }()
	}

	var timer <-chan time.Time
	if timeout > 0 {
		timer = a.opts.After(timeout)
	}
	var stopped *actions.Error // why we killed the group, if we did
	select {
	case <-exited:
	case <-ctx.Done():
		stopped = actions.ContextError(ctx, "shell")
		a.stopGroup(pgid, exited, log)
	case <-timer:
		stopped = actions.NewError(actions.TypeTimeout, true, "shell: timed out after %s", timeout)
		a.stopGroup(pgid, exited, log)
	}
	// Leftover processes in the group would hold the pipes open; end them,
	// then reap the leader.
	killGroup(pgid, syscall.SIGKILL)
	_ = cmd.Wait() // the exit status is read from cmd.ProcessState below

	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-a.opts.After(a.opts.Grace):
		// Someone outside the group still holds a pipe; stop reading.
		log.Warn("shell: output pipes still open after the command exited; a process left its process group")
		outR.Close()
		errR.Close()
		if sup != nil {
			sup.status.Close()
		}
		<-copied
	}
	outR.Close()
	errR.Close()

	code := exitCode(cmd.ProcessState)
	if sup != nil {
		o, err := sup.outcome(cmd.ProcessState)
		if err != nil {
			return nil, err
		}
		if o.startErr != "" {
			return nil, actions.ValidationError("command", "cannot start %q: %s", path, o.startErr)
		}
		code = o.code
	}
	out := map[string]any{
		"exit_code":        int64(code),
		"stdout":           stdout.String(),
		"stderr":           stderr.String(),
		"stdout_truncated": stdout.truncated,
		"stderr_truncated": stderr.truncated,
	}
	if stopped != nil {
		return nil, stopped.WithOutput(out)
	}
	if code != 0 {
		return nil, actions.NewError(actions.TypeShellExit, false, "command exited with code %d%s", code, stderrTail(stderr.String())).
			WithStatus(code).WithOutput(out)
	}
	return out, nil
}

// stopGroup sends SIGTERM to the group, waits for the leader to exit up to
// the grace period, then sends SIGKILL and waits for the leader to exit.
func (a *Action) stopGroup(pgid int, exited <-chan struct{}, log *slog.Logger) {
	killGroup(pgid, syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-a.opts.After(a.opts.Grace):
	}
	log.Debug("shell: grace period over; killing the process group")
	killGroup(pgid, syscall.SIGKILL)
	<-exited
}

func killGroup(pgid int, sig syscall.Signal) {
	// ESRCH (the group is already gone) is the expected outcome, not an error.
	_ = syscall.Kill(-pgid, sig)
}

func (a *Action) command(args *Args) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if args.Command.Argv != nil {
		cmd = exec.Command(args.Command.Argv[0], args.Command.Argv[1:]...)
	} else {
		cmd = exec.Command("/bin/sh", "-c", args.Command.Script)
	}
	if cmd.Err != nil {
		return nil, actions.ValidationError("command", "cannot run %q: %v", args.Command.Argv[0], cmd.Err)
	}
	dir := a.opts.Dir
	if args.Dir != "" {
		if filepath.IsAbs(args.Dir) || dir == "" {
			dir = args.Dir
		} else {
			dir = filepath.Join(dir, args.Dir)
		}
	}
	if dir != "" {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, actions.ValidationError("dir", "%v", err)
		}
		if !fi.IsDir() {
			return nil, actions.ValidationError("dir", "%s is not a directory", dir)
		}
		cmd.Dir = dir
	}
	env, err := a.environ(args.Env)
	if err != nil {
		return nil, err
	}
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

func (a *Action) environ(extra map[string]string) ([]string, error) {
	vars := map[string]string{}
	for _, name := range a.opts.Inherit {
		if name == supervisor.Env {
			continue
		}
		if v, ok := a.opts.LookupEnv(name); ok {
			vars[name] = v
		}
	}
	if _, ok := vars["PATH"]; !ok {
		vars["PATH"] = defaultPath
	}
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, actions.ValidationError("env."+k, "not a valid variable name")
		}
		if k == supervisor.Env {
			return nil, actions.ValidationError("env."+k, "reserved for the shell action's supervisor; use another name")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, actions.ValidationError("env."+k, "value contains a NUL byte")
		}
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env, nil
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// stderrTail quotes the last line of stderr for the error message.
func stderrTail(stderr string) string {
	s := strings.TrimRight(stderr, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return ": " + s
}

// capBuffer keeps the first max bytes written and counts the rest.
type capBuffer struct {
	buf       bytes.Buffer
	max       int64
	truncated bool
}

// Write keeps what fits and drops the rest; it never fails, so the
// command is never blocked or broken by the cap.
func (b *capBuffer) Write(p []byte) (int, error) {
	room := b.max - int64(b.buf.Len())
	if int64(len(p)) > room {
		b.truncated = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// String returns the kept bytes.
func (b *capBuffer) String() string { return b.buf.String() }

// drain copies r into w until EOF or until r is closed.
func drain(r io.Reader, w io.Writer) {
	_, _ = io.Copy(w, r)
}
