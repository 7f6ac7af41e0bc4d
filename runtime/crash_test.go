package runtime

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/memo"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The crash test: a child process (this test binary, re-executed) works
// crashRuns runs of 10 steps with sleeps, signals, transient failures and a
// memoized side effect on a file store; the parent SIGKILLs it at random
// moments crashKills times, restarting it each time, then lets a last child
// finish and checks every run from the store.

const (
	crashDirEnv    = "TQW_RUNTIME_CRASH_DIR"
	crashRunsEnv   = "TQW_RUNTIME_CRASH_RUNS"
	crashKillsEnv  = "TQW_RUNTIME_CRASH_KILLS"
	crashFinishEnv = "TQW_RUNTIME_CRASH_FINISH"
	crashReplayEnv = "TQW_RUNTIME_CRASH_REPLAY"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func crashRunID(i int) string { return fmt.Sprintf("run-%03d", i) }

// crashExpected is the result every run must end with.
func crashExpected(runID string) string {
	return runID + "|0|1|2|3|4:sig=a-" + runID + "|5:memo=" + runID + "|6|7|8:sig=b-" + runID + "|9"
}

func flaky(runID string, step int) bool {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", runID, step)
	return h.Sum32()%4 == 0
}

type crashRunner struct{ dir string }

func (c crashRunner) RunStep(ctx context.Context, s *Step) (StepOutcome, error) {
	p := string(s.Payload) + "|" + strconv.Itoa(s.Number)
	switch s.Number {
	case 4, 8:
		if s.Signal == nil {
			p += ":sig=<timeout>"
		} else {
			p += ":sig=" + string(s.Signal)
		}
	case 5:
		v, err := memo.Memoized(ctx, s.Memo, "effect", func(context.Context) (string, error) {
			if err := crashtest.AppendLine(filepath.Join(c.dir, "effects.log"), "effect "+s.RunID); err != nil {
				return "", err
			}
			return s.RunID, nil
		})
		if err != nil {
			return StepOutcome{}, err
		}
		if err := crashtest.AppendLine(filepath.Join(c.dir, "effects.log"), "memo-done "+s.RunID); err != nil {
			return StepOutcome{}, err
		}
		p += ":memo=" + v
	}
	if flaky(s.RunID, s.Number) && s.Attempt <= 2 {
		return StepOutcome{}, fmt.Errorf("flaky step %d attempt %d", s.Number, s.Attempt)
	}
	switch s.Number {
	case 1, 6:
		return ContinueAfter([]byte(p), time.Duration(5+rand.IntN(20))*time.Millisecond), nil
	case 3:
		return ContinueOnSignal([]byte(p), "s:"+s.RunID+":3", time.Hour), nil
	case 7:
		return ContinueOnSignal([]byte(p), "s:"+s.RunID+":7", 30*time.Second), nil
	case 9:
		return Succeed([]byte(p)), nil
	}
	return ContinueNow([]byte(p)), nil
}

type crashHook struct{ dir string }

func (crashHook) Observes(*runstate.Outcome) bool { return true }

func (h crashHook) OnTermination(_ context.Context, o *runstate.Outcome, _ *TerminalEffects) error {
	return crashtest.AppendLine(filepath.Join(h.dir, "terminal.log"), fmt.Sprintf("%s %s %s", o.RunID, o.Status, o.Result))
}

func crashQueueOptions() queue.Options {
	return queue.Options{Logger: quietLogger(), ReapInterval: 100 * time.Millisecond,
		DefaultConfig: queue.QueueConfig{MaxAttempts: 1000, BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, LeaseDuration: 10 * time.Second}}
}

// TestCrashChild is the child process; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the crash test's child process; runs only under TestCrashRecovery")
	}
	if err := crashChild(dir, envInt(crashRunsEnv, 200), os.Getenv(crashFinishEnv) != "", os.Getenv(crashReplayEnv) != ""); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(3)
	}
}

func crashChild(dir string, runs int, finish, replay bool) error {
	ctx := context.Background()
	store, err := file.Open(filepath.Join(dir, "store"))
	if err != nil {
		return err
	}
	q, err := queue.Open(ctx, store, crashQueueOptions())
	if err != nil {
		return err
	}
	rt, err := New(q, store, crashRunner{dir}, Options{TerminalHook: crashHook{dir}, Concurrency: 16, Logger: quietLogger(), ReconcileInterval: 50 * time.Millisecond, StepOutputReplay: replay})
	if err != nil {
		return err
	}
	w := rt.Spawn(ctx)
	fmt.Println("ready")
	// Submit what is not submitted yet, pre-buffering step 7's signal.
	for i := range runs {
		id := crashRunID(i)
		if _, err := rt.Status(ctx, id); err == nil {
			continue
		} else if !errors.Is(err, ErrRunNotFound) {
			return err
		}
		if _, err := rt.Signal(ctx, "s:"+id+":7", []byte("b-"+id)); err != nil {
			return err
		}
		if _, err := rt.Submit(ctx, RunSpec{RunID: id, Input: []byte(id)}); err != nil {
			return err
		}
	}
	// Signal the runs waiting at step 3 until every run terminated.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		waiting, err := rt.ListRuns(ctx, runstate.ListOptions{States: []runstate.State{runstate.StateWaiting}, Limit: 1000})
		if err != nil {
			return err
		}
		for _, st := range waiting {
			if strings.HasSuffix(st.SignalKey, ":3") {
				if _, err := rt.Signal(ctx, st.SignalKey, []byte("a-"+st.RunID)); err != nil {
					return err
				}
			}
		}
		if !finish {
			continue
		}
		done, err := rt.ListRuns(ctx, runstate.ListOptions{States: []runstate.State{runstate.StateSucceeded, runstate.StateFailed, runstate.StateCancelled}, Limit: 1000})
		if err != nil {
			return err
		}
		if len(done) == runs {
			break
		}
	}
	// Let pending notifications drain before stopping.
	for {
		s, err := q.Stats(ctx, rt.NotifyQueueName())
		if err != nil {
			return err
		}
		if s.Pending+s.Scheduled+s.Claimed == 0 {
			break
		}
		<-tick.C
	}
	if err := w.Shutdown(ctx); err != nil {
		return err
	}
	return q.Close()
}

func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	crashtest.Parent(t, crashDirEnv)
	runs, kills := envInt(crashRunsEnv, 200), crashtest.Count(t, crashKillsEnv, 100)
	dir := t.TempDir()
	rng := crashtest.Rand(t, 1)
	// Every other child records step outputs for replay: switching it on
	// and off across restarts must not change any result.
	child := func(ctx context.Context, finish, replay bool) *exec.Cmd {
		env := []string{crashDirEnv + "=" + dir, crashRunsEnv + "=" + strconv.Itoa(runs)}
		if finish {
			env = append(env, crashFinishEnv+"=1")
		}
		if replay {
			env = append(env, crashReplayEnv+"=1")
		}
		return crashtest.Command(ctx, "^TestCrashChild$", env...)
	}
	startupKills := 0
	for i := range kills {
		c := crashtest.Start(t, child(context.Background(), false, i%2 == 1))
		// A random moment: one kill in five during startup and recovery,
		// the others while steps run and settle.
		var delay time.Duration
		if rng.IntN(5) == 0 {
			startupKills++
			delay = crashtest.Delay(rng, 150*time.Millisecond)
		} else {
			if err := c.WaitReady("ready"); err != nil {
				t.Fatalf("child %d: %v", i, err)
			}
			delay = crashtest.Delay(rng, 200*time.Millisecond)
		}
		if killed, err := c.KillAfter(delay); !killed {
			t.Fatalf("child %d exited on its own: %v", i, err)
		}
	}
	before := 0
	if _, err := os.Stat(filepath.Join(dir, "terminal.log")); err == nil {
		before = len(crashtest.ReadLines(t, filepath.Join(dir, "terminal.log")))
	}
	t.Logf("%d kills (%d during startup); %d terminal notifications written before the final restart", kills, startupKills, before)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := child(ctx, true, true).Run(); err != nil {
		t.Fatalf("final child: %v", err)
	}
	verifyCrashRuns(t, dir, runs)
}

func verifyCrashRuns(t *testing.T, dir string, runs int) {
	ctx := context.Background()
	store, err := file.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	q, err := queue.Open(ctx, store, crashQueueOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	in := NewInspector(q)
	for i := range runs {
		id := crashRunID(i)
		st, err := in.Status(ctx, id)
		if err != nil {
			t.Fatalf("run %s: %v", id, err)
		}
		if st.State != runstate.StateSucceeded || string(st.Result) != crashExpected(id) {
			t.Errorf("run %s: %v %q %q, want succeeded %q", id, st.State, st.Result, st.Error, crashExpected(id))
		}
	}
	// Every notification of a run reports the same single terminal state.
	terms := map[string]map[string]bool{}
	for _, line := range crashtest.ReadLines(t, filepath.Join(dir, "terminal.log")) {
		id, rest, _ := strings.Cut(line, " ")
		if terms[id] == nil {
			terms[id] = map[string]bool{}
		}
		terms[id][rest] = true
	}
	for i := range runs {
		id := crashRunID(i)
		want := "succeeded " + crashExpected(id)
		if len(terms[id]) != 1 || !terms[id][want] {
			t.Errorf("run %s notifications %v, want only %q", id, terms[id], want)
		}
	}
	// A memoized side effect does not run again once its memo write completed.
	memoDone := map[string]bool{}
	effects := map[string]int{}
	for _, line := range crashtest.ReadLines(t, filepath.Join(dir, "effects.log")) {
		kind, id, _ := strings.Cut(line, " ")
		switch kind {
		case "effect":
			if memoDone[id] {
				t.Errorf("run %s: side effect ran again after its memo write completed", id)
			}
			effects[id]++
		case "memo-done":
			memoDone[id] = true
		}
	}
	reruns := 0
	for i := range runs {
		n := effects[crashRunID(i)]
		if n < 1 {
			t.Errorf("run %s: side effect never ran", crashRunID(i))
		}
		reruns += n - 1
	}
	t.Logf("%d runs verified; %d side effects re-ran after a kill before their memo write", runs, reruns)
}
