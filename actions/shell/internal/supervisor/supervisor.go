package supervisor

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Env marks a process as a supervisor; its value is the protocol
// version, so a binary speaking another version fails clearly.
const (
	Env     = "TQW_SHELL_SUPERVISOR"
	Version = "1"
	// Arg0 is the supervisor's argv[0], what the process table shows
	// before the program and the command's argv.
	Arg0 = "tqw-shell-supervisor"
)

// File descriptors of the supervisor, in the order of exec.Cmd.ExtraFiles.
const (
	LifelineFD = 3 // read end: the command's environment, then EOF when the worker is gone
	StatusFD   = 4 // write end: one report per line
)

// MaxEnvBytes bounds the command's environment as sent on the lifeline,
// far above what an exec accepts (on Linux, a quarter of the stack limit).
const MaxEnvBytes = 64 << 20

// Reports the supervisor writes to StatusFD, one per line: the kind, a
// space, the detail.
const (
	ReportStartErr = "starterr" // why the command could not be started
	ReportExit     = "exit"     // the command's exit code
	ReportSignal   = "signal"   // the number of the signal that killed the command
	ReportFail     = "fail"     // the supervisor's own failure
)

// Exit codes of the supervisor when it cannot run the command. The worker
// reads the reports; these only tell a person what happened.
const (
	ExitFailed    = 125
	ExitNoCommand = 127
)

func init() {
	if _, ok := os.LookupEnv(Env); !ok {
		return
	}
	// syscall.Exit skips exit hooks: the supervisor ran none of the
	// program's code but init functions, so it has nothing to flush, and a
	// race-detector build would otherwise sleep a second at exit.
	syscall.Exit(run())
}

// run is the whole life of a supervisor process; it returns an exit code
// only when it could not start the command.
func run() int {
	status := os.NewFile(StatusFD, "status")
	report := func(kind, detail string) {
		// Best effort: when the worker is gone nobody reads it (EPIPE).
		_, _ = status.WriteString(kind + " " + strings.ReplaceAll(detail, "\n", " ") + "\n")
	}
	if v := os.Getenv(Env); v != Version {
		report(ReportFail, "supervisor protocol "+strconv.Quote(v)+", this binary speaks "+strconv.Quote(Version))
		return ExitFailed
	}
	if len(os.Args) < 3 {
		report(ReportFail, "supervisor started with "+strconv.Itoa(len(os.Args))+" arguments, want the program and its argv")
		return ExitFailed
	}
	// Neither pipe may reach the command.
	syscall.CloseOnExec(LifelineFD)
	syscall.CloseOnExec(StatusFD)
	// The group kills below are safe only in a group of our own.
	if syscall.Getpgrp() != os.Getpid() {
		report(ReportFail, "supervisor is not the leader of its process group")
		return ExitFailed
	}
	parent := os.Getppid()
	// The worker stops a command by SIGTERM to the whole group; the
	// supervisor must outlive it to report how the command ended. A handled
	// signal reverts to its default in the command; an ignored one (the
	// worker ran with SIGTERM ignored) stays ignored, as it would have been.
	term := make(chan os.Signal, 1)
	if !signal.Ignored(syscall.SIGTERM) {
		signal.Notify(term, syscall.SIGTERM)
	}
	// The command's environment comes first on the lifeline, then nothing
	// until EOF. It is not in the supervisor's own environment, so that the
	// command's GODEBUG, GOGC or GOTRACEBACK leave the supervisor alone.
	lifeline := bufio.NewReader(os.NewFile(LifelineFD, "lifeline"))
	env, err := ReadEnv(lifeline)
	if err != nil {
		// The worker died (or failed) before sending it; nothing started.
		report(ReportFail, "reading the command's environment: "+err.Error())
		return ExitFailed
	}
	orphaned := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, lifeline)
		close(orphaned)
	}()

	// The main goroutine is locked to the main thread during init, and the
	// main thread lives as long as the process: the command's parent-death
	// signal fires only when the supervisor dies.
	runtime.LockOSThread()
	proc, err := os.StartProcess(os.Args[1], os.Args[2:], &os.ProcAttr{
		Env:   env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   WithParentDeathSignal(nil, syscall.SIGKILL),
	})
	if err != nil {
		report(ReportStartErr, err.Error())
		return ExitNoCommand
	}
	// The command has its copy; a command that closes its stdin early then
	// gives the worker's writer EPIPE, as it would without a supervisor.
	os.Stdin.Close()
	ended := make(chan *os.ProcessState, 1)
	go func() {
		ps, err := proc.Wait() // reaps the command
		if err != nil {
			report(ReportFail, "waiting for the command: "+err.Error())
		}
		ended <- ps
	}()
	for {
		select {
		case ps := <-ended:
			if ps != nil {
				if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					report(ReportSignal, strconv.Itoa(int(ws.Signal())))
				} else {
					report(ReportExit, strconv.Itoa(ps.ExitCode()))
				}
			}
			killOwnGroup() // what the command left behind
		case <-orphaned:
			killOwnGroup()
		case <-term:
			if os.Getppid() != parent {
				killOwnGroup() // the parent-death signal: the worker is gone
			}
		}
	}
}

// AppendEnv appends env in the lifeline's encoding to b: each "NAME=value"
// followed by a NUL byte, then one more NUL. Entries never hold a NUL and
// are never empty.
func AppendEnv(b []byte, env []string) []byte {
	for _, kv := range env {
		b = append(append(b, kv...), 0)
	}
	return append(b, 0)
}

// ReadEnv reads an environment written by AppendEnv, at most MaxEnvBytes.
func ReadEnv(r *bufio.Reader) ([]string, error) {
	var env []string
	n := 0
	for {
		kv, err := r.ReadString(0)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if n += len(kv); n > MaxEnvBytes {
			return nil, errors.New("environment larger than " + strconv.Itoa(MaxEnvBytes) + " bytes")
		}
		if kv == "\x00" {
			return env, nil
		}
		env = append(env, kv[:len(kv)-1])
	}
}

// killOwnGroup SIGKILLs the supervisor's process group, the supervisor
// included; it does not return.
func killOwnGroup() {
	_ = syscall.Kill(-os.Getpid(), syscall.SIGKILL)
	syscall.Exit(128 + int(syscall.SIGKILL)) // not reached: the kill includes us
}
