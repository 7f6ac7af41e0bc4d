package llmfake_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/actions/llm/llmfake"
)

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("reply %q: %v", data, err)
	}
	return resp.StatusCode, m
}

func content(m map[string]any) string {
	return m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
}

func TestReplyOrder(t *testing.T) {
	s := llmfake.New()
	defer s.Close()
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL = %s", s.URL())
	}
	s.Handle(func(r llmfake.Request) llmfake.Reply { return llmfake.Reply{Content: "handled " + r.Model} })
	s.Enqueue(llmfake.Reply{Content: "queued", FinishReason: "length", Usage: llmfake.Usage{PromptTokens: 7, CompletionTokens: 3}})
	s.FailNext(1, 503)
	req := `{"model":"m","messages":[{"role":"user","content":"a b"}],"response_format":{"type":"json_schema"}}`

	code, m := post(t, s.URL(), req)
	if code != 503 || m["error"] == nil {
		t.Fatalf("injected failure: %d %v", code, m)
	}
	code, m = post(t, s.URL(), req)
	if code != 200 || content(m) != "queued" || m["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" {
		t.Fatalf("queued: %d %v", code, m)
	}
	if u := m["usage"].(map[string]any); u["prompt_tokens"] != 7.0 || u["total_tokens"] != 10.0 {
		t.Fatalf("usage = %v", u)
	}
	_, m = post(t, s.URL(), req)
	if content(m) != "handled m" {
		t.Fatalf("handler: %v", m)
	}
	s.Handle(nil)
	_, m = post(t, s.URL(), req)
	if content(m) != "echo: a b" {
		t.Fatalf("default: %v", m)
	}
	if s.Calls() != 4 || len(s.Requests()) != 4 || s.Requests()[0].ResponseFormat["type"] != "json_schema" {
		t.Fatalf("calls %d, requests %+v", s.Calls(), s.Requests())
	}
	resp, err := http.Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("GET /models = %d", resp.StatusCode)
	}
}
