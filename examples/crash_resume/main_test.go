package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
	"github.com/tqw-dsl/tqw/internal/crashtest"
)

// childArgs names the environment variable that makes the test binary run
// the example (its arguments, JSON-encoded) instead of the tests.
const childArgs = "CRASH_RESUME_CHILD_ARGS"

func TestMain(m *testing.M) {
	exampletest.RunIfChild(childArgs, run)
	os.Exit(m.Run())
}

// TestKillAndResume kills a process with SIGKILL in the middle of a stage,
// resumes the run in a second process, and checks from the effects file that
// no committed stage and no memoized unit ran again. It does so for a crash
// in the first, a middle and the last stage.
func TestKillAndResume(t *testing.T) {
	const stages, units = 3, 4
	for _, stop := range []struct{ stage, unit int }{{0, 0}, {1, 2}, {2, 3}} {
		t.Run(fmt.Sprintf("stage %d unit %d", stop.stage, stop.unit), func(t *testing.T) {
			killAndResume(t, stages, units, stop.stage, stop.unit)
		})
	}
}

func killAndResume(t *testing.T, stages, units, stopStage, stopUnit int) {
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	args := []string{"--store", "file://" + filepath.ToSlash(filepath.Join(dir, "store")), "--run-id", "crash-1",
		"--stages", strconv.Itoa(stages), "--units", strconv.Itoa(units), "--unit-delay", "0s", "--effects", effects}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := crashtest.Start(t, child(ctx, append(args, "--stop-after", fmt.Sprintf("%d.%d", stopStage, stopUnit))))
	var firstOut strings.Builder
	stopLine := fmt.Sprintf("stopping after stage %d unit %d", stopStage, stopUnit)
	for {
		line, ok := first.Line()
		if !ok {
			t.Fatalf("first process ended without reaching its stop point:\n%s", firstOut.String())
		}
		firstOut.WriteString(line + "\n")
		if strings.HasPrefix(line, stopLine) {
			break
		}
	}
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}

	second := child(ctx, args)
	var out bytes.Buffer
	second.Stdout = &out
	if err := second.Run(); err != nil {
		t.Fatalf("second process: %v\n%s", err, out.String())
	}
	got := out.String()
	wants := []string{
		fmt.Sprintf("resuming run crash-1 at stage %d\n", stopStage),
		fmt.Sprintf("stage %d: start (attempt 2)\n", stopStage),
		"run crash-1 succeeded: totals [10,20,30]\n",
	}
	for u := range units {
		how := "computed"
		if u <= stopUnit {
			how = "served from memo"
		}
		wants = append(wants, fmt.Sprintf("stage %d unit %d: %s (%d)\n", stopStage, u, how, (stopStage+1)*(u+1)))
	}
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("second process output lacks %q:\n%s", want, got)
		}
	}
	for s := range stopStage {
		if strings.Contains(got, fmt.Sprintf("stage %d:", s)) {
			t.Errorf("second process re-ran committed stage %d:\n%s", s, got)
		}
	}

	data, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for line := range strings.Lines(string(data)) {
		counts[strings.TrimSpace(line)]++
	}
	want := map[string]int{}
	for s := range stages {
		want["start stage="+strconv.Itoa(s)] = 1
		for u := range units {
			want["unit stage="+strconv.Itoa(s)+" unit="+strconv.Itoa(u)] = 1
		}
	}
	want["start stage="+strconv.Itoa(stopStage)] = 2
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("effect %q happened %d times, want %d", k, counts[k], n)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("effects file has unexpected lines:\n%s", data)
	}

	// A third invocation reports the finished run and does no work.
	third := child(ctx, args)
	out.Reset()
	third.Stdout = &out
	if err := third.Run(); err != nil {
		t.Fatalf("third process: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "run crash-1 already succeeded: totals [10,20,30]") {
		t.Errorf("third process output:\n%s", out.String())
	}
	if after, _ := os.ReadFile(effects); !bytes.Equal(after, data) {
		t.Errorf("third process did work:\n%s", after)
	}
}

// child runs the example with args in a new process.
func child(ctx context.Context, args []string) *exec.Cmd {
	return exampletest.Command(ctx, childArgs, args)
}
