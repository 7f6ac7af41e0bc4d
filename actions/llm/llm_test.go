package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/actions/llm"
	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
)

// memo is an in-memory actions.Memo that can be told to fail.
type memo struct {
	mu     sync.Mutex
	m      map[string][]byte
	getErr error
	putErr error
	gets   int
	puts   int
}

func newMemo() *memo { return &memo{m: map[string][]byte{}} }

func (m *memo) Get(_ context.Context, key string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gets++
	if m.getErr != nil {
		return nil, false, m.getErr
	}
	v, ok := m.m[key]
	return v, ok, nil
}

func (m *memo) Put(_ context.Context, key string, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	if m.putErr != nil {
		return m.putErr
	}
	m.m[key] = append([]byte(nil), value...)
	return nil
}

func secrets(kv ...string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == name {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

func newCall(args map[string]any, m actions.Memo) *actions.Call {
	return &actions.Call{RunID: "r1", StepID: "notice", Attempt: 1, Args: args, Memo: m,
		Secret: secrets("OPENAI_API_KEY", "sk-test", "OTHER_KEY", "sk-other")}
}

func wantError(t *testing.T, err error, typ string, retryable bool, status int) *actions.Error {
	t.Helper()
	e, ok := actions.AsError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want *actions.Error", err, err)
	}
	if e.Type != typ || e.Retryable != retryable || e.Status != status {
		t.Fatalf("err = %+v, want type %s retryable %v status %d", e, typ, retryable, status)
	}
	return e
}

func setup(t *testing.T, opts llm.Options) (*llmfake.Server, *llm.Action) {
	t.Helper()
	fake := llmfake.New()
	t.Cleanup(fake.Close)
	opts.BaseURL = fake.URL()
	return fake, llm.New(opts)
}

func TestPromptCompletion(t *testing.T) {
	fake, a := setup(t, llm.Options{Prices: map[string]llm.Price{"gpt-test": {PromptPerMillion: 2, CompletionPerMillion: 8}}})
	if a.Name() != "llm" {
		t.Fatalf("Name = %q", a.Name())
	}
	fake.Enqueue(llmfake.Reply{Content: "Refunded.", Model: "gpt-test-2025", Usage: llmfake.Usage{PromptTokens: 1000, CompletionTokens: 500}})
	out, err := a.Execute(context.Background(), newCall(map[string]any{
		"model": "gpt-test", "system": "Be brief.", "prompt": "Order 7 refunded.", "temperature": 0, "max_tokens": 50,
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"text": "Refunded.", "json": nil, "model": "gpt-test-2025",
		"usage": map[string]any{"prompt_tokens": int64(1000), "completion_tokens": int64(500), "total_tokens": int64(1500)},
		"cost":  (1000*2.0 + 500*8.0) / 1e6, "cost_known": true, "finish_reason": "stop",
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("output\n got %#v\nwant %#v", out, want)
	}
	req := fake.Requests()[0]
	if req.Authorization != "Bearer sk-test" {
		t.Fatalf("Authorization = %q", req.Authorization)
	}
	wantMsgs := []llmfake.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Order 7 refunded."}}
	if req.Model != "gpt-test" || !reflect.DeepEqual(req.Messages, wantMsgs) || req.MaxTokens != 50 {
		t.Fatalf("request = %+v", req)
	}
	if req.Temperature == nil || *req.Temperature > 1e-30 {
		t.Fatalf("temperature 0 not sent as ~0: %v", req.Temperature)
	}
	if req.ResponseFormat != nil {
		t.Fatalf("response_format sent without a schema: %v", req.ResponseFormat)
	}
	if strings.Contains(string(req.Body), "sk-test") {
		t.Fatal("API key in the request body")
	}
}

func TestMessagesAndOtherSecret(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	_, err := a.Execute(context.Background(), newCall(map[string]any{
		"model":          "m",
		"messages":       []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "yo"}, map[string]any{"role": "user", "content": "again"}},
		"api_key_secret": "OTHER_KEY",
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	req := fake.Requests()[0]
	if req.Authorization != "Bearer sk-other" || len(req.Messages) != 3 || req.Messages[2].Content != "again" {
		t.Fatalf("request = %+v", req)
	}
	if req.Path != "/v1/chat/completions" {
		t.Fatalf("path = %q", req.Path)
	}
}

func TestMissingSecret(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	// Default secret absent: the request goes without a key.
	c := newCall(map[string]any{"model": "m", "prompt": "p"}, nil)
	c.Secret = nil
	if _, err := a.Execute(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if got := fake.Requests()[0].Authorization; got != "" {
		t.Fatalf("Authorization = %q, want none", got)
	}
	// A named secret that is absent is a validation error, and nothing is sent.
	_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p", "api_key_secret": "NOPE"}, nil))
	e := wantError(t, err, actions.TypeValidation, false, 0)
	if !strings.Contains(e.Message, "NOPE") {
		t.Fatalf("message %q does not name the secret", e.Message)
	}
	if fake.Calls() != 1 {
		t.Fatalf("calls = %d", fake.Calls())
	}
}

func TestMemoHitMakesNoRequest(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	m := newMemo()
	args := map[string]any{"model": "gpt-4o-mini", "prompt": "once", "response_schema": map[string]any{"type": "object"}}
	fake.Enqueue(llmfake.Reply{Content: `{"n": 1}`})
	first, err := a.Execute(context.Background(), newCall(args, m))
	if err != nil {
		t.Fatal(err)
	}
	if fake.Calls() != 1 || m.puts != 1 {
		t.Fatalf("calls = %d, puts = %d", fake.Calls(), m.puts)
	}
	// A retry (attempt 2) and a re-run after a crash see the memo.
	c := newCall(args, m)
	c.Attempt = 2
	second, err := a.Execute(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if fake.Calls() != 1 {
		t.Fatalf("memo hit made %d HTTP calls in all, want 1", fake.Calls())
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("memo output differs:\n%#v\n%#v", first, second)
	}
	if got := first.(map[string]any)["json"]; !reflect.DeepEqual(got, map[string]any{"n": int64(1)}) {
		t.Fatalf("json = %#v", got)
	}
	// The key ignores the API key but not the request content.
	c = newCall(args, m)
	c.Secret = secrets("OPENAI_API_KEY", "sk-rotated")
	if _, err := a.Execute(context.Background(), c); err != nil || fake.Calls() != 1 {
		t.Fatalf("rotated key missed the memo: calls %d, %v", fake.Calls(), err)
	}
	for _, change := range []map[string]any{
		{"prompt": "twice"}, {"temperature": 0.5}, {"max_tokens": 9}, {"system": "s"}, {"model": "gpt-4o"},
		{"response_schema": map[string]any{"type": "object", "required": []any{"n"}}},
		{"base_url": fake.URL() + "/"}, // normalised: same key
	} {
		changed := map[string]any{}
		for k, v := range args {
			changed[k] = v
		}
		for k, v := range change {
			changed[k] = v
		}
		before := fake.Calls()
		fake.Enqueue(llmfake.Reply{Content: `{"n": 2}`})
		if _, err := a.Execute(context.Background(), newCall(changed, m)); err != nil {
			t.Fatal(err)
		}
		_, sameKey := change["base_url"]
		if paid := fake.Calls() - before; (paid == 0) != sameKey {
			t.Errorf("change %v: %d calls", change, paid)
		}
	}
}

func TestMemoFailures(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	m := newMemo()
	m.getErr = errors.New("store down")
	_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, m))
	wantError(t, err, llm.TypeMemo, true, 0)
	if fake.Calls() != 0 {
		t.Fatal("called the model without being able to read the memo")
	}
	// A failed Put still returns the paid answer.
	m.getErr, m.putErr = nil, errors.New("store down")
	out, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, m))
	if err != nil || out.(map[string]any)["text"] != "echo: p" {
		t.Fatalf("put failure: %v, %v", out, err)
	}
	// An unreadable memo entry is treated as a miss.
	m.putErr = nil
	for k := range m.m {
		m.m[k] = []byte("garbage")
	}
	args := map[string]any{"model": "m", "prompt": "q"}
	if _, err := a.Execute(context.Background(), newCall(args, m)); err != nil {
		t.Fatal(err)
	}
	for k := range m.m {
		m.m[k] = []byte("{not json")
	}
	before := fake.Calls()
	if _, err := a.Execute(context.Background(), newCall(args, m)); err != nil || fake.Calls() != before+1 {
		t.Fatalf("corrupt entry: %v, calls %d", err, fake.Calls()-before)
	}
}

var schema = map[string]any{
	"type":       "object",
	"required":   []any{"approved", "reason"},
	"properties": map[string]any{"approved": map[string]any{"type": "boolean"}, "reason": map[string]any{"type": "string"}},
}

func TestStructuredOutput(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	m := newMemo()
	fake.Enqueue(llmfake.Reply{Content: `{"approved": true, "reason": "small"}`})
	out, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p", "response_schema": schema}, m))
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(map[string]any)["json"]; !reflect.DeepEqual(got, map[string]any{"approved": true, "reason": "small"}) {
		t.Fatalf("json = %#v", got)
	}
	rf := fake.Requests()[0].ResponseFormat
	js, _ := rf["json_schema"].(map[string]any)
	if rf["type"] != "json_schema" || js == nil || !reflect.DeepEqual(js["schema"], schema) {
		t.Fatalf("response_format = %#v", rf)
	}

	for _, bad := range []llmfake.Reply{
		{Content: `{"approved": "yes", "reason": "x"}`}, // wrong type
		{Content: `{"approved": true}`},                 // missing field
		{Content: `Sure! {"approved": true}`},           // not JSON
		{Content: `{"approved": true, "reason": "x"} {}`},
		{Refusal: "I can't help with that."},
	} {
		fake.Enqueue(bad)
		puts := m.puts
		_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": bad.Content + bad.Refusal, "response_schema": schema}, m))
		e := wantError(t, err, actions.TypeLLMInvalidOutput, false, 0)
		if out, ok := e.Output.(map[string]any); !ok || out["text"] != bad.Content {
			t.Errorf("%q: error output = %#v", bad.Content, e.Output)
		}
		// Paid for, so memoized for its attempt: a redelivery of the
		// attempt replays it (and its spend); the next attempt asks again.
		if m.puts != puts+1 {
			t.Errorf("%q: invalid output was not memoized", bad.Content)
		}
		calls := fake.Calls()
		var spent []actions.Spend
		again := newCall(map[string]any{"model": "m", "prompt": bad.Content + bad.Refusal, "response_schema": schema}, m)
		again.Charge = func(s actions.Spend) { spent = append(spent, s) }
		_, err = a.Execute(context.Background(), again)
		wantError(t, err, actions.TypeLLMInvalidOutput, false, 0)
		if fake.Calls() != calls || len(spent) != 1 || spent[0].Attempt != 1 {
			t.Errorf("%q: the same attempt called the model %d more times and reported %+v; want its memo replayed with its spend", bad.Content, fake.Calls()-calls, spent)
		}
		fake.Enqueue(llmfake.Reply{Content: `{"approved": true, "reason": "asked again"}`})
		next := newCall(map[string]any{"model": "m", "prompt": bad.Content + bad.Refusal, "response_schema": schema}, m)
		next.Attempt = 2
		if _, err := a.Execute(context.Background(), next); err != nil || fake.Calls() != calls+1 {
			t.Errorf("%q: the next attempt: %v after %d calls; want the model asked again", bad.Content, err, fake.Calls()-calls)
		}
	}
}

// Every paid reply is reported to Call.Spend, an invalid one too, with
// its usage and the attempt that paid for it.
func TestSpendReportsEveryPaidReply(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	fake.Enqueue(llmfake.Reply{Content: `nope`, Usage: llmfake.Usage{PromptTokens: 5, CompletionTokens: 2}},
		llmfake.Reply{Content: `{"approved": true, "reason": "ok"}`, Usage: llmfake.Usage{PromptTokens: 7, CompletionTokens: 3}})
	var spent []actions.Spend
	for attempt := 1; attempt <= 2; attempt++ {
		call := newCall(map[string]any{"model": "gpt-4o-mini", "prompt": "p", "response_schema": schema}, newMemo())
		call.Attempt = attempt
		call.Charge = func(s actions.Spend) { spent = append(spent, s) }
		_, _ = a.Execute(context.Background(), call)
	}
	if len(spent) != 2 || spent[0].Attempt != 1 || spent[0].TotalTokens != 7 || spent[1].Attempt != 2 || spent[1].TotalTokens != 10 ||
		!spent[0].CostKnown || spent[0].CostUSD <= 0 {
		t.Fatalf("spent %+v; want attempt 1 (7 tokens) and attempt 2 (10 tokens), priced", spent)
	}
}

func TestHTTPErrors(t *testing.T) {
	cases := []struct {
		status    int
		typ       string
		retryable bool
	}{
		{429, actions.TypeLLMRateLimit, true},
		{500, actions.TypeHTTP5xx, true},
		{503, actions.TypeHTTP5xx, true},
		{408, actions.TypeHTTP4xx, true},
		{400, actions.TypeValidation, false},
		{401, actions.TypeHTTP4xx, false},
		{404, actions.TypeHTTP4xx, false},
	}
	fake, a := setup(t, llm.Options{})
	m := newMemo()
	for _, c := range cases {
		fake.FailNext(1, c.status)
		_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, m))
		wantError(t, err, c.typ, c.retryable, c.status)
	}
	if m.puts != 0 {
		t.Fatal("a failed call was memoized")
	}
	// After two injected 429s the third attempt succeeds.
	fake.FailNext(2, 429)
	for i := range 2 {
		_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, m))
		wantError(t, err, actions.TypeLLMRateLimit, true, 429)
		_ = i
	}
	if _, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, m)); err != nil {
		t.Fatal(err)
	}
	// A non-JSON error body.
	fake.Enqueue(llmfake.Reply{Status: 502, RawBody: "<html>bad gateway</html>"})
	_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "other"}, nil))
	wantError(t, err, actions.TypeHTTP5xx, true, 502)
	// A 200 that is not a chat completion.
	fake.Enqueue(llmfake.Reply{RawBody: "<html>hello</html>"})
	_, err = a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "other"}, nil))
	wantError(t, err, actions.TypeLLMInvalidOutput, false, 0)
	fake.Enqueue(llmfake.Reply{RawBody: `{"choices": []}`})
	_, err = a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "other"}, nil))
	wantError(t, err, actions.TypeLLMInvalidOutput, false, 0)
}

func TestResponseCap(t *testing.T) {
	fake, a := setup(t, llm.Options{MaxResponseBytes: 2000})
	fake.Enqueue(llmfake.Reply{Content: strings.Repeat("word ", 1000)})
	_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, nil))
	e := wantError(t, err, actions.TypeLLMInvalidOutput, false, 0)
	if !strings.Contains(e.Message, "size cap") {
		t.Fatalf("message = %q", e.Message)
	}
	fake.Enqueue(llmfake.Reply{Content: "short"})
	if _, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, nil)); err != nil {
		t.Fatalf("a reply under the cap: %v", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := llm.New(llm.Options{BaseURL: "http://" + addr + "/v1"})
	_, err = a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, nil))
	e := wantError(t, err, actions.TypeHTTPConnection, true, 0)
	if strings.Contains(e.Error(), "sk-test") {
		t.Fatal("error leaks the key")
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	block := make(chan struct{})
	defer close(block)
	fake.Handle(func(llmfake.Request) llmfake.Reply { return llmfake.Reply{Block: block} })
	_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p", "timeout": "50ms"}, nil))
	wantError(t, err, actions.TypeTimeout, true, 0)

	ctx, cancel := context.WithCancel(context.Background())
	arrived := make(chan struct{})
	fake.Handle(func(llmfake.Request) llmfake.Reply { close(arrived); return llmfake.Reply{Block: block} })
	go func() { <-arrived; cancel() }()
	_, err = a.Execute(ctx, newCall(map[string]any{"model": "m", "prompt": "p"}, nil))
	wantError(t, err, actions.TypeCancelled, false, 0)
}

func TestCostTable(t *testing.T) {
	fake, a := setup(t, llm.Options{Prices: map[string]llm.Price{"served-name": {PromptPerMillion: 1, CompletionPerMillion: 1}}})
	fake.Enqueue(
		llmfake.Reply{Content: "x", Usage: llmfake.Usage{PromptTokens: 10, CompletionTokens: 10}},
		llmfake.Reply{Content: "x", Model: "served-name", Usage: llmfake.Usage{PromptTokens: 10, CompletionTokens: 10}},
	)
	out, err := a.Execute(context.Background(), newCall(map[string]any{"model": "unknown", "prompt": "p"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if o := out.(map[string]any); o["cost"] != 0.0 || o["cost_known"] != false {
		t.Fatalf("unknown model: %#v", o)
	}
	out, err = a.Execute(context.Background(), newCall(map[string]any{"model": "alias", "prompt": "p2"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if o := out.(map[string]any); math.Abs(o["cost"].(float64)-20.0/1e6) > 1e-15 || o["cost_known"] != true {
		t.Fatalf("priced by the served model: %#v", o)
	}
	// The default table knows gpt-4o-mini.
	d := llm.New(llm.Options{BaseURL: fake.URL()})
	fake.Enqueue(llmfake.Reply{Content: "x", Usage: llmfake.Usage{PromptTokens: 1e6, CompletionTokens: 1e6}})
	out, err = d.Execute(context.Background(), newCall(map[string]any{"model": "gpt-4o-mini", "prompt": "p3"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c := out.(map[string]any)["cost"].(float64); math.Abs(c-0.75) > 1e-9 {
		t.Fatalf("gpt-4o-mini cost = %v", c)
	}
}

func TestBaseURLResolution(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	a := llm.New(llm.Options{Getenv: func(k string) string {
		if k == "OPENAI_BASE_URL" {
			return fake.URL()
		}
		return ""
	}})
	if _, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p"}, nil)); err != nil {
		t.Fatal(err)
	}
	// The step's base_url wins over the options.
	b := llm.New(llm.Options{BaseURL: "http://127.0.0.1:1/v1"})
	if _, err := b.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "p", "base_url": fake.URL()}, nil)); err != nil {
		t.Fatal(err)
	}
	if fake.Calls() != 2 {
		t.Fatalf("calls = %d", fake.Calls())
	}
}

func TestReasoningModelMaxTokens(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	if _, err := a.Execute(context.Background(), newCall(map[string]any{"model": "o3-mini", "prompt": "p", "max_tokens": 100}, nil)); err != nil {
		t.Fatal(err)
	}
	if r := fake.Requests()[0]; r.MaxTokens != 0 || r.MaxCompletionTokens != 100 {
		t.Fatalf("max tokens sent as %d / %d", r.MaxTokens, r.MaxCompletionTokens)
	}
	_, err := a.Execute(context.Background(), newCall(map[string]any{"model": "o3-mini", "prompt": "p", "temperature": 0.3}, nil))
	wantError(t, err, actions.TypeValidation, false, 0)
	if fake.Calls() != 1 {
		t.Fatal("a request the model rejects was sent")
	}
}

func TestArgumentErrors(t *testing.T) {
	fake, a := setup(t, llm.Options{})
	cases := []struct {
		args  map[string]any
		field string
	}{
		{map[string]any{"prompt": "p"}, "model"},
		{map[string]any{"model": " ", "prompt": "p"}, "model"},
		{map[string]any{"model": "m"}, "prompt"},
		{map[string]any{"model": "m", "prompt": "p", "messages": []any{map[string]any{"role": "user", "content": "c"}}}, "prompt"},
		{map[string]any{"model": "m", "messages": []any{}}, "messages"},
		{map[string]any{"model": "m", "messages": "hi"}, "messages"},
		{map[string]any{"model": "m", "messages": []any{"hi"}}, "messages[0]"},
		{map[string]any{"model": "m", "messages": []any{map[string]any{"role": "boss", "content": "c"}}}, "messages[0].role"},
		{map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": 1}}}, "messages[0].content"},
		{map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "c", "name": "x"}}}, "messages[0].name"},
		{map[string]any{"model": "m", "prompt": "p", "temperature": 3}, "temperature"},
		{map[string]any{"model": "m", "prompt": "p", "temperature": "hot"}, "temperature"},
		{map[string]any{"model": "m", "prompt": "p", "max_tokens": 0}, "max_tokens"},
		{map[string]any{"model": "m", "prompt": "p", "max_tokens": 1.5}, "max_tokens"},
		{map[string]any{"model": "m", "prompt": "p", "response_schema": "object"}, "response_schema"},
		{map[string]any{"model": "m", "prompt": "p", "response_schema": map[string]any{"type": 5}}, "response_schema"},
		{map[string]any{"model": "m", "prompt": "p", "response_schema": map[string]any{"$ref": "http://example.com/s.json"}}, "response_schema"},
		{map[string]any{"model": "m", "prompt": "p", "base_url": "localhost:8080"}, "base_url"},
		{map[string]any{"model": "m", "prompt": "p", "base_url": "http://u:pw@h/v1"}, "base_url"},
		{map[string]any{"model": "m", "prompt": "p", "timeout": "1 sec"}, "timeout"},
		{map[string]any{"model": "m", "prompt": "p", "api_key": "sk"}, "api_key"},
	}
	for _, c := range cases {
		_, err := a.Execute(context.Background(), newCall(c.args, nil))
		wantError(t, err, actions.TypeValidation, false, 0)
		var ae *actions.ArgError
		if !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("%v: %v, want field %q", c.args, err, c.field)
		}
	}
	if fake.Calls() != 0 {
		t.Fatalf("invalid arguments reached the server %d times", fake.Calls())
	}
}

func TestFakeDefaults(t *testing.T) {
	fake := llmfake.New()
	defer fake.Close()
	a := llm.New(llm.Options{BaseURL: fake.URL()})
	out, err := a.Execute(context.Background(), newCall(map[string]any{"model": "m", "prompt": "one two three"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	o := out.(map[string]any)
	if o["text"] != "echo: one two three" || o["usage"].(map[string]any)["prompt_tokens"] != int64(3) {
		t.Fatalf("default reply = %#v", o)
	}
	fake.Reset()
	if fake.Calls() != 0 || len(fake.Requests()) != 0 {
		t.Fatal("Reset kept state")
	}
	if _, err := json.Marshal(out); err != nil {
		t.Fatal(err)
	}
}

// FuzzArgs runs the llm argument checks on arbitrary JSON with a transport
// that never connects: no panic, and validation errors name a field.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"p","response_schema":{"type":"object"}}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1}`,
		`{"model":"m","prompt":"p","response_schema":{"$ref":"#/x"}}`, `{"model":"o1","prompt":"p","max_tokens":3}`,
	} {
		f.Add([]byte(s))
	}
	a := llm.New(llm.Options{BaseURL: "http://127.0.0.1:1/v1"})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // never wait on the network
		_, err := a.Execute(ctx, newCall(m, nil))
		e, ok := actions.AsError(err)
		if !ok {
			t.Fatalf("untyped error %v", err)
		}
		var ae *actions.ArgError
		if _, emptyKey := m[""]; e.Type == actions.TypeValidation && errors.As(err, &ae) && ae.Field == "" && !emptyKey {
			t.Fatalf("validation error with an empty field: %v", err)
		}
	})
}
