package shell_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/shell"
	"github.com/tqw-dsl/tqw/internal/crashtest"
)

// workerChildEnv makes this test binary a worker that runs one shell step
// (the JSON arguments in the variable's value) until it is killed.
const workerChildEnv = "TQW_SHELL_TEST_WORKER"

// orphanDeadline is the promise under test: after the worker dies, every
// process of its step is gone within this long.
const orphanDeadline = time.Second

// readyDeadline bounds the wait for a step's processes to start; generous,
// for a 2-core host running every package's tests under -race.
const readyDeadline = time.Minute

func TestMain(m *testing.M) {
	crashtest.IfChild(workerChildEnv, workerChild)
	os.Exit(m.Run())
}

// workerChild runs the step; returning at all is a failure, since the
// parent kills it while the step runs.
func workerChild(value string) error {
	var req struct {
		Args map[string]any
		Mode string
	}
	if err := json.Unmarshal([]byte(value), &req); err != nil {
		return err
	}
	switch req.Mode {
	case modeSupervised:
	case modeUnsupervised:
		shell.RunUnsupervisedForTest()
	case modeLeakLifeline:
		// A process of the worker's that outlives it holds the lifeline
		// open, as a fork without exec would: only the supervisor's
		// parent-death signal can tell it that the worker died.
		shell.OnSupervisedForTest(func(lifeline *os.File) {
			holder := exec.Command("sleep", "300")
			holder.ExtraFiles = []*os.File{lifeline}
			if err := holder.Start(); err != nil {
				fmt.Println("holder failed:", err)
				return
			}
			fmt.Println("holder", holder.Process.Pid)
		})
	default:
		return fmt.Errorf("unknown mode %q", req.Mode)
	}
	_, err := shell.New(shell.Options{}).Execute(context.Background(), call(req.Args))
	return fmt.Errorf("the step ended before the worker was killed: %v", err)
}

// How a worker child runs its step.
const (
	modeSupervised   = ""
	modeUnsupervised = "unsupervised"
	modeLeakLifeline = "leak-lifeline"
)

// recorder writes a script that appends its own pid to $PIDS and then
// execs its arguments, so every process of interest reports itself.
func recorder(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rec")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho $$ > \"$PIDS\"\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// pidFIFO makes a FIFO the step's processes write their pids to. The test
// keeps it open for writing too, so a writer never blocks and the reader
// never sees EOF between two writers.
func pidFIFO(t *testing.T) (path string, read func(n int) []int) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "pids")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	lines := bufio.NewScanner(f)
	return path, func(n int) []int {
		t.Helper()
		if err := f.SetReadDeadline(time.Now().Add(readyDeadline)); err != nil {
			t.Fatal(err)
		}
		var pids []int
		for len(pids) < n {
			if !lines.Scan() {
				t.Fatalf("the step reported %d of its %d pids (%v) before %v", len(pids), n, lines.Err(), readyDeadline)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(lines.Text()))
			if err != nil {
				t.Fatalf("pid line %q: %v", lines.Text(), err)
			}
			pids = append(pids, pid)
		}
		return pids
	}
}

// ppid returns the parent pid of a live process.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	n, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return n
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// startWorker starts a worker child running the step; it returns the child
// and its pid.
func startWorker(t *testing.T, args map[string]any, mode string) (*crashtest.Child, int) {
	t.Helper()
	req, err := json.Marshal(map[string]any{"Args": args, "Mode": mode})
	if err != nil {
		t.Fatal(err)
	}
	c := crashtest.Start(t, crashtest.Command(context.Background(), "^$", workerChildEnv+"="+string(req)))
	return c, c.Pid()
}

// TestWorkerSIGKILLLeavesNoProcess kills a worker with SIGKILL while its
// shell step runs background jobs, pipelines and nested shells, and checks
// that every process of the step, and the step's supervisor, is gone within
// a second.
func TestWorkerSIGKILLLeavesNoProcess(t *testing.T) {
	crashtest.Parent(t, workerChildEnv)
	rec := recorder(t)
	const r = `"$REC" sleep 300` // one recorded process
	cases := []struct {
		name    string
		command any
		pids    int // how many processes record themselves
	}{
		{"background and foreground", `echo $$ > "$PIDS"; ` + r + ` & ` + r + `; wait`, 3},
		{"pipeline", `echo $$ > "$PIDS"; ` + r + ` | ` + r, 3},
		{"subshells and nested shells", `echo $$ > "$PIDS"; ( ` + r + ` & ` + r + ` ) & "$REC" sh -c '` + r + ` & wait'; wait`, 5},
		{"ignores TERM, HUP and INT", `trap '' TERM HUP INT; echo $$ > "$PIDS"; ` + r + ` & ` + r + `; wait`, 3},
		{"argv", []any{rec, "sh", "-c", r + ` & exec ` + r}, 3},
		{"argv without a shell", []any{rec, "sleep", "300"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fifo, readPids := pidFIFO(t)
			child, workerPid := startWorker(t, map[string]any{
				"command": tc.command,
				"env":     map[string]any{"PIDS": fifo, "REC": rec},
			}, modeSupervised)
			pids := readPids(tc.pids)
			// The first pid is the step's top process; its parent is the
			// supervisor, whose parent is the worker.
			supervisor := ppid(t, pids[0])
			if supervisor == workerPid {
				t.Fatalf("the step's process %d is the worker's own child: no supervisor in between", pids[0])
			}
			if got := ppid(t, supervisor); got != workerPid {
				t.Fatalf("the supervisor %d (%s) has parent %d, want the worker %d", supervisor, cmdline(supervisor), got, workerPid)
			}
			watched := []*proc{watch(t, supervisor)}
			for _, pid := range pids {
				watched = append(watched, watch(t, pid))
			}
			names := map[int]string{}
			for _, p := range watched {
				names[p.pid] = cmdline(p.pid)
			}
			if err := child.Kill(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(orphanDeadline)
			for _, p := range watched {
				if !p.exited(t, max(time.Until(deadline), 0)) {
					t.Errorf("process %d (%s) still runs %v after its worker was killed", p.pid, names[p.pid], orphanDeadline)
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// TestUnsupervisedParentDeathSignal runs a step without the supervisor (as
// when the worker's executable cannot be found): the direct child still
// dies with the worker, through the parent-death signal.
func TestUnsupervisedParentDeathSignal(t *testing.T) {
	crashtest.Parent(t, workerChildEnv)
	rec := recorder(t)
	fifo, readPids := pidFIFO(t)
	child, workerPid := startWorker(t, map[string]any{
		"command": []any{rec, "sleep", "300"},
		"env":     map[string]any{"PIDS": fifo, "REC": rec},
	}, modeUnsupervised)
	pid := readPids(1)[0]
	if got := ppid(t, pid); got != workerPid {
		t.Fatalf("unsupervised: the command's parent is %d, want the worker %d", got, workerPid)
	}
	p := watch(t, pid)
	if err := child.Kill(); err != nil {
		t.Fatal(err)
	}
	if !p.exited(t, orphanDeadline) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the unsupervised command %d still runs %v after its worker was killed", pid, orphanDeadline)
	}
}

// TestParentDeathSignalWithoutLifeline kills a worker whose lifeline pipe
// is held open by another process: the supervisor's parent-death signal
// alone must end the step.
func TestParentDeathSignalWithoutLifeline(t *testing.T) {
	crashtest.Parent(t, workerChildEnv)
	rec := recorder(t)
	fifo, readPids := pidFIFO(t)
	child, _ := startWorker(t, map[string]any{
		"command": `echo $$ > "$PIDS"; "$REC" sleep 300 & "$REC" sleep 300; wait`,
		"env":     map[string]any{"PIDS": fifo, "REC": rec},
	}, modeLeakLifeline)
	line, ok := child.Line()
	holderPid, err := strconv.Atoi(strings.TrimPrefix(line, "holder "))
	if !ok || err != nil {
		t.Fatalf("worker child printed %q, want the lifeline holder's pid", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(holderPid, syscall.SIGKILL) })
	holder := watch(t, holderPid)
	pids := readPids(3)
	watched := []*proc{watch(t, ppid(t, pids[0]))} // the supervisor
	for _, pid := range pids {
		watched = append(watched, watch(t, pid))
	}
	if err := child.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(orphanDeadline)
	for _, p := range watched {
		if !p.exited(t, max(time.Until(deadline), 0)) {
			t.Errorf("process %d (%s) still runs %v after its worker was killed", p.pid, cmdline(p.pid), orphanDeadline)
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	if holder.exited(t, 0) {
		t.Fatal("the lifeline holder died: the lifeline closed, so the parent-death signal went untested")
	}
}
