package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// onTerminal is a tqw-dsl process whose stderr is a terminal (a pty).
type onTerminal struct {
	t     *testing.T
	cmd   *exec.Cmd
	out   lockedBuffer
	mu    sync.Mutex
	lines []string
	line  chan string
	done  chan struct{}
	code  int
}

// startOnTerminal runs tqw-dsl args... --store with stderr on a pty.
func (c *cli) startOnTerminal(args ...string) *onTerminal {
	c.t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		c.t.Skipf("no pseudo-terminal: %v", err)
	}
	p := &onTerminal{t: c.t, line: make(chan string, 1000), done: make(chan struct{})}
	p.cmd = exec.Command(tqwBin, append(args, "--store", c.store)...)
	p.cmd.Dir = c.dir
	p.cmd.Env = append(os.Environ(), c.env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, tty
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	_ = tty.Close() // the child holds it
	exited := make(chan struct{})
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(exited)
	}()
	go func() {
		// Reading the master fails (EIO) once the child closed the tty.
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			l := strings.TrimRight(sc.Text(), "\r")
			p.mu.Lock()
			p.lines = append(p.lines, l)
			p.mu.Unlock()
			select {
			case p.line <- l:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, master)
		<-exited
		_ = master.Close()
		close(p.done)
		close(p.line)
	}()
	c.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// lineAfter waits for a terminal line containing want and returns the
// line after it.
func (p *onTerminal) lineAfter(want string) string {
	p.t.Helper()
	timeout := time.NewTimer(waitDeadline)
	defer timeout.Stop()
	found := false
	for {
		select {
		case l, ok := <-p.line:
			if !ok {
				p.t.Fatalf("%v exited (%d) before printing %q:\n%s", p.cmd.Args, p.code, want, p.terminal())
			}
			if found {
				return l
			}
			found = strings.Contains(l, want)
		case <-timeout.C:
			p.t.Fatalf("%v did not print %q in %v:\n%s", p.cmd.Args, want, waitDeadline, p.terminal())
		}
	}
}

func (p *onTerminal) terminal() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *onTerminal) wait() (int, string, string) {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * waitDeadline):
		p.t.Fatalf("%v did not exit:\n%s", p.cmd.Args, p.terminal())
	}
	return p.code, p.out.String(), p.terminal()
}

// paste runs a command line tqw-dsl printed, as a user pasting it in a
// shell would, with tqw-dsl on the PATH.
func (c *cli) paste(line string) (int, string, string) {
	c.t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(tqwBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		c.t.Fatalf("sh -c %q: %v", line, err)
	}
	return 0, out.String(), errOut.String()
}

// TestRunOnATerminal runs a workflow that waits for a signal with stderr
// on a terminal, working the store itself and sending the run to a
// worker: run prints the exact command that sends the signal, which
// works when pasted in a shell, and at the end the run id with the
// command that shows its history, which works too.
func TestRunOnATerminal(t *testing.T) {
	for _, mode := range []string{"local", "worker"} {
		t.Run(mode, func(t *testing.T) {
			c := newCLI(t)
			if mode == "worker" {
				w := c.start("worker", "--inbox-poll", "200ms")
				w.waitLine("working")
				defer func() {
					_ = w.cmd.Process.Signal(os.Interrupt)
					w.wait()
				}()
			}
			p := c.startOnTerminal("run", abs(t, testdata+"e2e_wait.yaml"), "--run-id", "t1")
			send := strings.TrimSpace(p.lineAfter("waiting for the signal t1:ask; send it with (fill in the values; the step's schema checks them):"))
			want := `tqw-dsl signal t1:ask '{"approved":true}' --store ` + c.store
			if send != want {
				t.Fatalf("the printed command is\n%s\nwant\n%s", send, want)
			}
			if code, out, errOut := c.paste(send); code != exitOK || !strings.Contains(out, "delivered") {
				t.Fatalf("pasting %q: exit %d\n%s%s", send, code, out, errOut)
			}
			code, out, term := p.wait()
			if code != exitOK || out != "approved\n" {
				t.Fatalf("run: exit %d, stdout %q\nterminal:\n%s", code, out, term)
			}
			lines := strings.Split(strings.TrimSpace(term), "\n")
			last := lines[len(lines)-1]
			history := "tqw-dsl history t1 --store " + c.store
			if last != "run t1 succeeded; its steps: "+history {
				t.Fatalf("the last terminal line is %q, want the run id and %q\n%s", last, history, term)
			}
			if code, out, errOut := c.paste(history); code != exitOK || !strings.Contains(out, "ask") || !strings.Contains(out, "approved") {
				t.Fatalf("pasting %q: exit %d\n%s%s", history, code, out, errOut)
			}
		})
	}
}
