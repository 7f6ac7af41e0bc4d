package main

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
	"github.com/tqw-dsl/tqw/internal/crashtest"
)

// childArgs names the environment variable that makes the test binary run
// the example (its arguments, JSON-encoded) instead of the tests.
const childArgs = "LLM_AGENT_CHILD_ARGS"

func TestMain(m *testing.M) {
	exampletest.RunIfChild(childArgs, run)
	os.Exit(m.Run())
}

// child runs the example with args in a new process, with no OpenAI
// settings from this environment.
func child(ctx context.Context, args []string) *exec.Cmd {
	return exampletest.Command(ctx, childArgs, args, "OPENAI_API_KEY=", "OPENAI_BASE_URL=", "OPENAI_MODEL=")
}

// turnOf is the turn a request belongs to: the number of assistant replies
// already in its transcript.
func turnOf(r llmfake.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// TestCrashDoesNotRepeatPaidCalls kills the agent with SIGKILL while its
// third call is in flight, resumes it in a new process, and counts the
// calls at the fake: every answered turn was paid for exactly once.
func TestCrashDoesNotRepeatPaidCalls(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	reached := make(chan struct{})
	never := make(chan struct{})
	var blocked atomic.Bool
	fake.Handle(func(r llmfake.Request) llmfake.Reply {
		switch turn := turnOf(r); {
		case turn == 2 && blocked.CompareAndSwap(false, true):
			close(reached)
			return llmfake.Reply{Content: "never delivered", Block: never}
		case turn == 3:
			return llmfake.Reply{Content: "FINAL: 101, 103, 107"}
		default:
			return llmfake.Reply{Content: "thinking " + strconv.Itoa(turn)}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--store", "file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "store")),
		"--run-id", "agent-t", "--base-url", fake.URL(), "--model", "test-model", "--api-key", "sk-test"}

	first := crashtest.Start(t, child(ctx, args))
	var firstOut strings.Builder
	ended := make(chan struct{}) // its stdout closed: it exited
	go func() {
		defer close(ended)
		for line, ok := first.Line(); ok; line, ok = first.Line() {
			firstOut.WriteString(line + "\n")
		}
	}()
	select {
	case <-reached:
	case <-ended:
		t.Fatalf("first process exited before its third call:\n%s", firstOut.String())
	case <-ctx.Done():
		t.Fatal("the third call never came")
	}
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	<-ended

	second := child(ctx, args)
	out, err := second.Output()
	if err != nil {
		t.Fatalf("second process: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{"resuming run agent-t at turn ", "turn 2: thinking 2\n",
		"turn 3: FINAL: 101, 103, 107\n", "run agent-t succeeded: 101, 103, 107\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("second process output lacks %q:\n%s", want, got)
		}
	}
	// The second process may replay turn 0 or 1 if the kill beat their
	// commits to durability (steps are at least once); a replayed turn is
	// served from the memo, which the per-turn call counts below prove.

	// Turns 0 and 1 were answered once and never asked again; turn 2 was
	// asked twice because its first request was never answered.
	perTurn := map[int]int{}
	for _, r := range fake.Requests() {
		perTurn[turnOf(r)]++
		if r.Authorization != "Bearer sk-test" || r.Model != "test-model" {
			t.Errorf("request with Authorization %q, model %q", r.Authorization, r.Model)
		}
	}
	if want := map[int]int{0: 1, 1: 1, 2: 2, 3: 1}; !maps.Equal(perTurn, want) {
		t.Errorf("calls per turn = %v, want %v", perTurn, want)
	}

	third := child(ctx, args)
	out, err = third.Output()
	if err != nil {
		t.Fatalf("third process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "run agent-t already succeeded: 101, 103, 107") {
		t.Errorf("third process output:\n%s", out)
	}
	if n := fake.Calls(); n != 5 {
		t.Errorf("fake got %d calls in all, want 5", n)
	}
}

// TestFailedCallIsRetried answers the first call with a 500: the step fails
// transiently, its retry calls again, and nothing answered is asked twice.
func TestFailedCallIsRetried(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	fake.Handle(func(r llmfake.Request) llmfake.Reply {
		if turnOf(r) == 1 {
			return llmfake.Reply{Content: "FINAL: done"}
		}
		return llmfake.Reply{Content: "step one"}
	})
	fake.FailNext(1, 500)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := child(ctx, []string{"--store", "file://" + filepath.ToSlash(t.TempDir()),
		"--run-id", "agent-1", "--base-url", fake.URL(), "--model", "m"}).Output()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "run agent-1 succeeded: done\n") {
		t.Errorf("output:\n%s", out)
	}
	// The 500 costs one call; each answered turn is then paid once.
	if n := fake.Calls(); n != 3 {
		t.Errorf("fake got %d calls, want 3 (a failed one, then one per turn)", n)
	}
}
