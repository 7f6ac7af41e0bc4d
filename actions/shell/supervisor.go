package shell

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/shell/internal/supervisor"
)

// The worker's side of the supervisor (see internal/supervisor): it starts
// the supervisor in place of the command, holds the lifeline's write end
// until the supervisor is gone, and reads how the command ended.

// supervisorPath returns the executable to start supervisors from. On
// Linux it is /proc/self/exe, the very binary that runs, even when its
// file was replaced or deleted by an upgrade since (a new binary might
// speak another protocol); elsewhere os.Executable. A variable so tests can
// run without a supervisor.
var supervisorPath = sync.OnceValues(func() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
})

// testHookSupervised, set only by tests, gets the lifeline's write end of
// each supervised command once it started.
var testHookSupervised func(lifeline *os.File)

// supervision is the worker's side of one supervised command.
type supervision struct {
	lifeline *os.File // write end, held until the supervisor is gone
	status   *os.File // read end of the supervisor's reports
	// childEnds are the supervisor's ends, closed in the worker after Start.
	childEnds []*os.File
	env       []byte // the command's environment, as supervisor.AppendEnv encodes it
	reports   bytes.Buffer
}

// superviseCommand rewrites cmd to run under a supervisor started from
// exe. The command keeps its argv, environment, directory and standard
// streams; the supervisor gets the pipes, the group and, on Linux, SIGTERM
// as its parent-death signal.
func superviseCommand(cmd *exec.Cmd, exe string) (*supervision, error) {
	env := supervisor.AppendEnv(nil, cmd.Env)
	if len(env) > supervisor.MaxEnvBytes {
		return nil, actions.ValidationError("env", "the environment is %d bytes; a command's must stay under %d", len(env), supervisor.MaxEnvBytes)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, err
	}
	cmd.Args = append([]string{supervisor.Arg0, cmd.Path}, cmd.Args...)
	cmd.Path = exe
	cmd.Env = []string{supervisor.Env + "=" + supervisor.Version}
	cmd.ExtraFiles = []*os.File{lifeR, statusW} // supervisor.LifelineFD, supervisor.StatusFD
	cmd.SysProcAttr = supervisor.WithParentDeathSignal(cmd.SysProcAttr, syscall.SIGTERM)
	return &supervision{lifeline: lifeW, status: statusR, childEnds: []*os.File{lifeR, statusW}, env: env}, nil
}

// sendEnv writes the command's environment to the started supervisor. In
// its own goroutine: a large environment fills the pipe until the
// supervisor reads it; if the supervisor dies first the write fails, and
// the supervisor's end is what reports that.
func (s *supervision) sendEnv() {
	go func() { _, _ = s.lifeline.Write(s.env) }()
}

// closeChildEnds closes the worker's copies of the supervisor's pipe ends.
func (s *supervision) closeChildEnds() {
	for _, f := range s.childEnds {
		f.Close()
	}
}

// close releases the worker's ends. Closing the lifeline makes a
// supervisor that still runs kill its group.
func (s *supervision) close() {
	s.closeChildEnds()
	s.lifeline.Close()
	s.status.Close()
}

// readReports reads the supervisor's reports until it is gone; the
// reports are a few short lines, capped against a misbehaving writer.
func (s *supervision) readReports() {
	_, _ = io.Copy(&s.reports, io.LimitReader(s.status, 64<<10))
}

// outcome is how a supervised command ended, from the reports and the
// supervisor's own wait status.
type outcome struct {
	startErr string // the command could not be started
	code     int    // exit code, 128+signal for a signal death
}

// errSupervisor marks a supervisor that failed without saying how the
// command ended.
var errSupervisor = errors.New("shell: the command's supervisor failed")

func (s *supervision) outcome(ps *os.ProcessState) (outcome, error) {
	if ps == nil {
		return outcome{}, fmt.Errorf("%w: no wait status", errSupervisor)
	}
	o, ended, err := parseReports(s.reports.Bytes())
	if err != nil || o.startErr != "" {
		return o, err
	}
	if ended {
		return o, nil
	}
	// No final report: the supervisor was killed before it could write one,
	// by the worker's own SIGKILL to the group (which killed the command
	// too) or by someone else; its signal stands for the command's.
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return outcome{code: 128 + int(ws.Signal())}, nil
	}
	return o, fmt.Errorf("%w: it exited with code %d without reporting how the command ended", errSupervisor, ps.ExitCode())
}

// parseReports reads the supervisor's reports; ended says whether they
// include how the command ended.
func parseReports(data []byte) (o outcome, ended bool, err error) {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		kind, detail, _ := strings.Cut(line, " ")
		switch kind {
		case supervisor.ReportStartErr:
			return outcome{startErr: cmp.Or(detail, "unknown error")}, false, nil
		case supervisor.ReportFail:
			return o, false, fmt.Errorf("%w: %s", errSupervisor, detail)
		case supervisor.ReportExit, supervisor.ReportSignal:
			n, err := strconv.Atoi(detail)
			low, high := 0, 255 // an exit code
			if kind == supervisor.ReportSignal {
				low, high = 1, 127 // a signal number, reported as 128+n
			}
			if err != nil || n < low || n > high {
				return o, false, fmt.Errorf("%w: malformed report %q", errSupervisor, line)
			}
			if kind == supervisor.ReportSignal {
				n += 128
			}
			o.code, ended = n, true
		default:
			return o, false, fmt.Errorf("%w: unknown report %q", errSupervisor, line)
		}
	}
	return o, ended, nil
}
