package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// orphanWorkflow's shell step starts background and nested processes that
// each write their pid to $PIDS and then sleep, unless $MARK shows that an
// earlier attempt already ran: then it says "again" and ends.
const orphanWorkflow = `tqw: v1
name: orphans
input:
  type: object
  required: [pids, mark]
  properties: {pids: {type: string}, mark: {type: string}}
steps:
  - id: spawn
    action: shell
    with:
      env: {PIDS: "${ input.pids }", MARK: "${ input.mark }"}
      command: |
        if [ -e "$MARK" ]; then echo again; exit 0; fi
        : > "$MARK"
        echo $$ > "$PIDS"
        sh -c 'echo $$ > "$PIDS"; exec sleep 300' &
        sh -c 'echo $$ > "$PIDS"; exec sleep 300' | sh -c 'echo $$ > "$PIDS"; exec sleep 300' &
        sh -c 'sh -c '\''echo $$ > "$PIDS"; exec sleep 300'\'' & wait'
        wait
  - id: done
    succeed: "${ trim(output.stdout) }"
`

// orphanPids is how many processes of the step write their pid.
const orphanPids = 5

// TestSIGKILLedRunLeavesNoShellProcess SIGKILLs 'tqw-dsl run' while its
// shell step runs background jobs, a pipeline and nested shells, checks
// that every one of those processes is gone within a second, and then that
// running the same command again finishes the run.
func TestSIGKILLedRunLeavesNoShellProcess(t *testing.T) {
	c := newCLI(t)
	wf := filepath.Join(c.dir, "orphans.yaml")
	if err := os.WriteFile(wf, []byte(orphanWorkflow), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(c.dir, "pids")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Open for writing too: writers never block, and no EOF between them.
	pidsIn, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pidsIn.Close()
	input := fmt.Sprintf(`{"pids": %q, "mark": %q}`, fifo, filepath.Join(c.dir, "started"))
	args := []string{"run", wf, "--run-id", "orphans", "--input", input}

	p := c.start(args...)
	if err := pidsIn.SetReadDeadline(time.Now().Add(waitDeadline)); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(pidsIn)
	var watched []*pidWatch
	for len(watched) < orphanPids {
		if !lines.Scan() {
			t.Fatalf("the shell step reported %d of its %d pids (%v); tqw-dsl stderr:\n%s", len(watched), orphanPids, lines.Err(), p.stderr())
		}
		pid, err := strconv.Atoi(strings.TrimSpace(lines.Text()))
		if err != nil {
			t.Fatalf("pid line %q: %v", lines.Text(), err)
		}
		watched = append(watched, watchPid(t, pid))
	}

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	deadline := time.Now().Add(time.Second)
	for _, w := range watched {
		if !w.exitedBy(t, deadline) {
			t.Errorf("shell process %d (%s) still runs a second after tqw-dsl run was killed", w.pid, w.cmdline)
			_ = syscall.Kill(w.pid, syscall.SIGKILL)
		}
	}

	// The same command again finishes the interrupted run: the step runs
	// once more, sees its first attempt's mark and ends.
	c.must(0, args...)
	out, _ := c.must(0, "status", "orphans", "--json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if st.State != "succeeded" || string(st.Result) != `"again"` {
		t.Fatalf("after the second run: state %s, result %s; want succeeded with \"again\"", st.State, st.Result)
	}
}

// pidWatch watches a process that is not the test's child through a
// pidfd, which becomes readable when the process ends (a zombie counts)
// and is not fooled by the pid's reuse.
type pidWatch struct {
	pid     int
	fd      int
	cmdline string
}

func watchPid(t *testing.T, pid int) *pidWatch {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v (the process is already gone?)", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return &pidWatch{pid: pid, fd: fd, cmdline: strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))}
}

// exitedBy reports whether the process has ended by deadline.
func (w *pidWatch) exitedBy(t *testing.T, deadline time.Time) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(max(time.Until(deadline), 0).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		return n > 0
	}
}
