// Command llm_agent runs an agent loop as a durable run: one LLM call per
// step, against any OpenAI-compatible chat completions endpoint.
//
//	OPENAI_API_KEY=sk-... go run ./examples/llm_agent --task "Plan a 3-day trip to Lisbon"
//	go run ./examples/llm_agent --base-url http://localhost:11434/v1 --model llama3.2   # Ollama, no key
//
// Each step sends the transcript so far to the model through the built-in
// llm action (actions/llm) and appends the reply. A reply that starts with
// "FINAL:" ends the run with the answer; otherwise the run continues with
// the longer transcript, up to --max-turns. The transcript is the payload
// that each step's commit carries to the next.
//
// The llm action memoizes every paid reply in the step's memo (keyed by the
// request, never by the key) before returning it, so a step that is retried
// or redelivered after a crash gets the reply back without calling the
// model again. On a persistent store (the default, file://) a killed
// process resumes the run at its current turn.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/storage"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/examples/internal/exampleenv"
	"github.com/tqw-dsl/tqw/runtime"
)

func main() { exampleenv.Main("llm_agent", run) }

// systemPrompt tells the model the loop's protocol.
const systemPrompt = `You are an agent working on a task in short turns. In each turn, reason about one step of the task in a few sentences. When you have the complete answer, reply with a single message that starts with "FINAL:" followed by the answer.`

// finalPrefix marks the model's last reply.
const finalPrefix = "FINAL:"

// message is one chat message of the transcript.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// transcript is the run's payload.
type transcript struct {
	Messages []message `json:"messages"`
}

// agent is the step runner: one LLM call per step.
type agent struct {
	out      io.Writer
	llm      *llm.Action
	model    string
	baseURL  string
	apiKey   string
	maxTurns int
	log      *slog.Logger
}

func (a agent) RunStep(ctx context.Context, s *runtime.Step) (runtime.StepOutcome, error) {
	var t transcript
	if s.Number == 0 {
		t.Messages = []message{{Role: "system", Content: systemPrompt}, {Role: "user", Content: string(s.Payload)}}
	} else if err := json.Unmarshal(s.Payload, &t); err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(fmt.Errorf("turn %d transcript: %w", s.Number, err))
	}
	msgs := make([]any, len(t.Messages))
	for i, m := range t.Messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	args := map[string]any{"model": a.model, "messages": msgs}
	if a.baseURL != "" {
		args["base_url"] = a.baseURL
	}
	// The call may take a while: keep the step's lease past its timeout.
	if err := s.Lease.EnsureAtLeast(ctx, llm.DefaultTimeout+30*time.Second); err != nil {
		return runtime.StepOutcome{}, err
	}
	out, err := a.llm.Execute(ctx, &actions.Call{
		RunID: s.RunID, StepID: "turn-" + strconv.Itoa(s.Number), Attempt: s.Attempt,
		Args: args, Memo: s.Memo, Logger: a.log,
		Secret: func(name string) (string, bool) {
			return a.apiKey, name == "OPENAI_API_KEY" && a.apiKey != ""
		},
	})
	if err != nil {
		if e, ok := actions.AsError(err); ok && !e.Retryable {
			return runtime.StepOutcome{}, runtime.Permanent(err)
		}
		return runtime.StepOutcome{}, err
	}
	reply, _ := out.(map[string]any)["text"].(string)
	fmt.Fprintf(a.out, "turn %d: %s\n", s.Number, oneLine(reply))
	if answer, ok := strings.CutPrefix(strings.TrimSpace(reply), finalPrefix); ok {
		return runtime.Succeed([]byte(strings.TrimSpace(answer))), nil
	}
	if s.Number+1 >= a.maxTurns {
		return runtime.Fail(fmt.Sprintf("no final answer after %d turns", a.maxTurns)), nil
	}
	t.Messages = append(t.Messages, message{Role: "assistant", Content: reply},
		message{Role: "user", Content: "Continue with the next step, or give the final answer."})
	next, err := json.Marshal(t)
	if err != nil {
		return runtime.StepOutcome{}, runtime.Permanent(err)
	}
	return runtime.ContinueNow(next), nil
}

// oneLine shortens a reply for the log line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 160 {
		return string(r[:157]) + "..."
	}
	return s
}

// run parses args and runs (or resumes) the agent's run to its end.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("llm_agent", flag.ContinueOnError)
	storeURL := fs.String("store", "file://.tqw-examples/llm_agent", "store URL; file:// or s3:// resumes after a crash")
	runID := fs.String("run-id", "", "the run to start or resume (default: agent-<hash of the task>, so the same task resumes)")
	task := fs.String("task", "Name three prime numbers greater than 100 and check each.", "the agent's task")
	baseURL := fs.String("base-url", os.Getenv("OPENAI_BASE_URL"), "OpenAI-compatible API base URL (default $OPENAI_BASE_URL, else "+llm.DefaultBaseURL+")")
	model := fs.String("model", cmp.Or(os.Getenv("OPENAI_MODEL"), "gpt-4o-mini"), "model name (default $OPENAI_MODEL, else gpt-4o-mini)")
	apiKey := fs.String("api-key", "", "API key (default $OPENAI_API_KEY; none for local servers)")
	maxTurns := fs.Int("max-turns", 6, "turns (LLM calls) before the run fails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *maxTurns < 1 {
		return errors.New("--max-turns must be at least 1")
	}
	if *runID == "" {
		sum := sha256.Sum256([]byte(*task))
		*runID = "agent-" + hex.EncodeToString(sum[:6])
	}
	key := cmp.Or(*apiKey, os.Getenv("OPENAI_API_KEY"))
	out = exampleenv.SyncWriter(out)
	env, err := exampleenv.Open(ctx, exampleenv.Config{StoreURL: *storeURL, LogLevel: slog.LevelError,
		Queue: storage.Options{QueueConfigs: map[string]storage.QueueConfig{
			runtime.DefaultQueueName: {BackoffBase: 500 * time.Millisecond, BackoffMax: 30 * time.Second},
		}}})
	if err != nil {
		return err
	}
	defer env.Close()
	runner := agent{out: out, llm: llm.New(llm.Options{}), model: *model, baseURL: *baseURL, apiKey: key, maxTurns: *maxTurns, log: env.Log}
	rt, err := env.NewRuntime(runner, *runID, runtime.Options{ResultRetention: 7 * 24 * time.Hour})
	if err != nil {
		return err
	}
	st, err := exampleenv.Status(ctx, rt, *runID)
	if err != nil {
		return err
	}
	if st.State.Terminal() {
		fmt.Fprintf(out, "run %s already %s: %s%s (use --run-id to start another)\n", *runID, st.State, st.Result, st.Error)
		return nil
	}
	sub, err := rt.Submit(ctx, runtime.RunSpec{RunID: *runID, Input: []byte(*task)})
	if err != nil {
		return fmt.Errorf("submit %s: %w (a different --task needs another --run-id)", *runID, err)
	}
	if sub.NewlySubmitted {
		fmt.Fprintf(out, "submitted run %s\n", *runID)
	} else {
		st, _ = rt.Status(ctx, *runID)
		fmt.Fprintf(out, "resuming run %s at turn %d\n", *runID, st.Step)
	}
	worker := rt.Spawn(ctx)
	defer worker.Shutdown(context.WithoutCancel(ctx))
	o, err := env.Await(ctx)
	if err != nil {
		fmt.Fprintf(out, "interrupted; run %s resumes at the next invocation\n", *runID)
		return nil
	}
	fmt.Fprintf(out, "run %s %s: %s%s\n", o.RunID, o.Status, o.Result, o.Error)
	return exampleenv.Succeeded(o)
}
