package interpreter

import (
	"context"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions/builtin"
	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
	"github.com/tqw-dsl/tqw/dsl"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/clock"
	rtmemo "github.com/tqw-dsl/tqw/runtime/memo"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// ledgerYAML asks for structured output and retries an invalid reply.
const ledgerYAML = `
tqw: v1
name: ledger
secrets: [OPENAI_API_KEY]
steps:
  - id: ask
    action: llm
    with:
      model: gpt-4o-mini
      prompt: "classify it"
      response_schema: {type: object, required: [label], properties: {label: {type: string}}}
    retry: {max_attempts: 3, initial: 1s, on: [llm.invalid_output]}
  - id: done
    succeed: "${ output.json.label }"
`

// The two scripted replies: the first fails the schema, the second answers.
var (
	invalidReply = llmfake.Reply{Content: `not json`, Usage: llmfake.Usage{PromptTokens: 5, CompletionTokens: 2}}
	validReply   = llmfake.Reply{Content: `{"label": "bug"}`, Usage: llmfake.Usage{PromptTokens: 7, CompletionTokens: 3}}
	// ledgerTokens and ledgerCost are both replies' usage at gpt-4o-mini's price.
	ledgerTokens = 5.0 + 2 + 7 + 3
	ledgerCost   = (12*llm.DefaultPrices["gpt-4o-mini"].PromptPerMillion + 5*llm.DefaultPrices["gpt-4o-mini"].CompletionPerMillion) / 1e6
)

func wantLedger(t *testing.T, what string, tokens, cost float64) {
	t.Helper()
	if tokens != ledgerTokens || math.Abs(cost-ledgerCost) > 1e-12 {
		t.Errorf("%s: %v tokens, $%v; want %v tokens, $%v (both replies)", what, tokens, cost, ledgerTokens, ledgerCost)
	}
}

// sumLLM adds up the model calls end events report (what metrics count).
func sumLLM(evs []Event) (tokens, cost float64) {
	for _, ev := range evs {
		if ev.Kind != "end" {
			continue
		}
		for _, u := range ev.LLM {
			tokens += float64(u.PromptTokens + u.CompletionTokens)
			cost += u.CostUSD
		}
	}
	return tokens, cost
}

// An llm step whose first reply fails response_schema is paid twice: the
// run's totals and the end events (metrics) count both replies.
func TestLLMLedgerCountsTheFailedAttempt(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	fake.Enqueue(invalidReply, validReply)
	e := newTestEnv(t, withLLM(fake.URL()), withEnv("OPENAI_API_KEY", "sk-test-key"))
	ch := e.submit(e.write("ledger.yaml", ledgerYAML), map[string]any{}, "l1")
	e.start()
	evs := []Event{e.waitEvent("ask", OutcomeRetry)}
	e.clock.Advance(time.Second)
	wantSucceeded(t, e.await(ch), `"bug"`)
	for {
		select {
		case ev := <-e.events:
			evs = append(evs, ev)
			continue
		default:
		}
		break
	}
	if n := fake.Calls(); n != 2 {
		t.Fatalf("the model was called %d times; want 2", n)
	}
	st, err := e.rt.Inspector().Status(e.ctx, "l1")
	if err != nil || st.Totals == nil {
		t.Fatalf("status: %+v, %v", st, err)
	}
	wantLedger(t, "status totals", st.Totals.Counters[TotalLLMTokens], st.Totals.Counters[TotalLLMCostUSD])
	tokens, cost := sumLLM(evs)
	wantLedger(t, "end events", tokens, cost)
}

// A set that fails after a paid answer retries the step, which replays
// the answer from the memo: the answer is counted once, with the attempt
// that paid for it.
func TestLLMLedgerCountsAReplayedAnswerOnce(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	fake.Enqueue(validReply)
	e := newTestEnv(t, withLLM(fake.URL()), withEnv("OPENAI_API_KEY", "sk-test-key"))
	p := e.write("replay.yaml", `
tqw: v1
name: replay
secrets: [OPENAI_API_KEY]
steps:
  - id: ask
    action: llm
    with: {model: gpt-4o-mini, prompt: "classify it"}
    retry: {max_attempts: 2, initial: 1s, on: [expression]}
    set: {x: "${ run.attempt == 1 ? vars.boom.x : 1 }"}
  - id: done
    succeed: "${ vars.x }"
`)
	ch := e.submitUntil(p, map[string]any{}, "l2", "ask", OutcomeRetry)
	e.clock.Advance(time.Second)
	wantSucceeded(t, e.await(ch), `1`)
	st, err := e.rt.Inspector().Status(e.ctx, "l2")
	if err != nil || st.Totals == nil || st.Totals.Counters[TotalLLMTokens] != 10 || fake.Calls() != 1 {
		t.Fatalf("totals %+v, %v after %d calls; want 10 tokens after 1 call", st.Totals, err, fake.Calls())
	}
}

// A writer dies after paying for the invalid first reply, while the
// settlement of its retry is not durable (its WAL PUT hangs; a new writer
// fences it). The new writer replays that reply from the memo instead of
// paying again, and the totals count each paid reply exactly once.
func TestLLMLedgerIsExactAfterACrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	walPrefix := ""
	faulty := faults.New(mem.New(), 1)
	// Once the paid reply's memo entry has landed, the next WAL PUT (the
	// one carrying the retry's settlement, or a commit queued before it)
	// hangs. Armed at the reply instead, it could catch an earlier commit
	// and kill the writer before the memo entry is written: a crash whose
	// reply no store has seen.
	fs := &armAfterPut{Store: faulty, prefix: rtmemo.DefaultPrefix + "/", arm: func() {
		faulty.Set(faults.Rule{Ops: faults.OpPut, KeyPrefix: walPrefix, Nth: 1, Hang: true})
	}}
	fake := llmfake.New()
	defer fake.Close()
	var calls sync.Mutex
	n := 0
	fake.Handle(func(llmfake.Request) llmfake.Reply {
		calls.Lock()
		defer calls.Unlock()
		n++
		if n == 1 {
			return invalidReply
		}
		return validReply
	})
	clk := clock.NewMock(t0)
	type proc struct {
		q      *queue.Queue
		it     *Interpreter
		w      *runtime.Worker
		mu     sync.Mutex
		events []Event
		ends   chan Event
	}
	open := func(requestTimeout time.Duration) *proc {
		p := &proc{ends: make(chan Event, 100)}
		q, err := queue.Open(ctx, fs, queue.Options{Clock: clk, Logger: quiet(), SweepInterval: -1, KV: kv.Options{RequestTimeout: requestTimeout},
			DefaultConfig: queue.QueueConfig{LeaseDuration: time.Minute, MaxAttempts: 3}})
		if err != nil {
			t.Fatal(err)
		}
		it, err := New(q, fs, Options{Actions: builtin.New(builtin.Options{LLM: llm.Options{BaseURL: fake.URL()}}), Logger: quiet(),
			Getenv: func(k string) string { return map[string]string{"OPENAI_API_KEY": "sk-test-key"}[k] },
			Events: func(ev Event) {
				p.mu.Lock()
				p.events = append(p.events, ev)
				p.mu.Unlock()
				if ev.Kind == "end" {
					p.ends <- ev
				}
			}, Runtime: runtime.Options{Logger: quiet(), ShutdownTimeout: -1}})
		if err != nil {
			t.Fatal(err)
		}
		p.q, p.it = q, it
		return p
	}
	path := t.TempDir() + "/ledger.yaml"
	if err := os.WriteFile(path, []byte(ledgerYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path, dsl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := open(2 * time.Second)
	if _, err := a.it.Submit(ctx, w, map[string]any{}, "c1"); err != nil {
		t.Fatal(err)
	}
	walPrefix = a.q.Prefix() + "/wal/"
	actx, acancel := context.WithCancel(ctx)
	a.w = a.it.Runtime().Spawn(actx)
	if err := faulty.WaitInjected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b := open(0) // fences a: its retry's settlement is lost
	acancel()
	sctx, scancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_ = a.w.Shutdown(sctx)
	scancel()
	_ = a.q.Close()
	defer b.q.Close()
	if fake.Calls() != 1 {
		t.Fatalf("the dead writer called the model %d times; want 1", fake.Calls())
	}
	done, unwatch := b.it.Watch("c1")
	defer unwatch()
	b.w = b.it.Runtime().Spawn(ctx)
	defer func() { _ = b.w.Shutdown(context.Background()) }()
	clk.Advance(2 * time.Minute) // the dead writer's claim expires
	var o *runstate.Outcome
	for o == nil {
		select {
		case ev := <-b.ends:
			if ev.Step == "ask" && ev.Status == OutcomeRetry {
				clk.Advance(time.Second) // the retry's delay
			}
		case o = <-done:
		case <-ctx.Done():
			t.Fatal("the run did not end on the new writer")
		}
	}
	wantSucceeded(t, o, `"bug"`)
	if got := fake.Calls(); got != 2 {
		t.Errorf("the model was called %d times; want 2 (the invalid reply replayed from the memo)", got)
	}
	st, err := b.it.Runtime().Inspector().Status(ctx, "c1")
	if err != nil || st.Totals == nil {
		t.Fatalf("status: %+v, %v", st, err)
	}
	wantLedger(t, "status totals after the crash", st.Totals.Counters[TotalLLMTokens], st.Totals.Counters[TotalLLMCostUSD])
	b.mu.Lock()
	tokens, cost := sumLLM(b.events)
	b.mu.Unlock()
	wantLedger(t, "end events after the crash", tokens, cost)
}

// armAfterPut is a store that calls arm once, after the first Put under
// prefix has landed.
type armAfterPut struct {
	objstore.Store
	prefix string
	once   sync.Once
	arm    func()
}

func (s *armAfterPut) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, data, opts)
	if err == nil && strings.HasPrefix(key, s.prefix) {
		s.once.Do(s.arm)
	}
	return info, err
}
