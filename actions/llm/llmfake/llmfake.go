package llmfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Server is a fake OpenAI-compatible chat completions server.
type Server struct {
	srv *httptest.Server

	mu       sync.Mutex
	calls    int
	requests []Request
	queue    []Reply
	handler  func(Request) Reply
	failN    int
	failWith Reply
}

// Message is one chat message as the fake received it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one recorded request.
type Request struct {
	// Path is the request path, e.g. "/v1/chat/completions".
	Path string
	// Header holds the request headers.
	Header http.Header
	// Authorization is the Authorization header, e.g. "Bearer sk-test".
	Authorization string
	// Model, Messages, Temperature and MaxTokens are from the request body.
	Model               string
	Messages            []Message
	Temperature         *float64
	MaxTokens           int
	MaxCompletionTokens int
	// ResponseFormat is the response_format object, nil when absent.
	ResponseFormat map[string]any
	// Body is the raw request body.
	Body []byte
}

// Usage is the token usage a reply reports.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// Reply scripts one response.
type Reply struct {
	// Status is the HTTP status; 0 means 200. For a status of 400 or more
	// the fake sends an OpenAI-style error body with Content as the message
	// (or RawBody when set).
	Status int
	// Content is the assistant's message text.
	Content string
	// Refusal is the assistant's refusal text, for refusal tests.
	Refusal string
	// FinishReason defaults to "stop".
	FinishReason string
	// Model is the reported model; "" echoes the requested one.
	Model string
	// Usage overrides the computed token counts when non-zero.
	Usage Usage
	// RawBody, when set, is sent verbatim instead of a generated body.
	RawBody string
	// Header holds extra response headers.
	Header http.Header
	// Block, when non-nil, makes the fake wait until it is closed or the
	// request's context ends before answering (for timeout tests).
	Block <-chan struct{}
}

// New starts a fake server on 127.0.0.1.
func New() *Server {
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL returns the base URL to use as base_url, ending in "/v1".
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close shuts the server down.
func (s *Server) Close() { s.srv.Close() }

// Enqueue appends replies to the queue; each request takes the next one.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// Handle sets a function that builds the reply for each request the queue
// does not answer; nil restores the default echo reply.
func (s *Server) Handle(fn func(Request) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = fn
}

// FailNext makes the next n requests fail with the given HTTP status (for
// example 429 or 500) before any scripted reply is used.
func (s *Server) FailNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN = n
	s.failWith = Reply{Status: status, Content: fmt.Sprintf("injected failure %d", status)}
}

// Calls returns how many requests the fake has received.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Requests returns a copy of the recorded requests, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Reset clears the counters, recorded requests, queue, handler and failures.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls, s.requests, s.queue, s.handler, s.failN, s.failWith = 0, nil, nil, nil, 0, Reply{}
}

type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	Temperature         *float64       `json:"temperature"`
	MaxTokens           int            `json:"max_tokens"`
	MaxCompletionTokens int            `json:"max_completion_tokens"`
	ResponseFormat      map[string]any `json:"response_format"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		writeError(w, http.StatusNotFound, "llmfake: only POST /v1/chat/completions is served")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "llmfake: reading body: "+err.Error())
		return
	}
	var cr chatRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		writeError(w, http.StatusBadRequest, "llmfake: body is not a chat completion request: "+err.Error())
		return
	}
	req := Request{
		Path: r.URL.Path, Header: r.Header.Clone(), Authorization: r.Header.Get("Authorization"),
		Model: cr.Model, Messages: cr.Messages, Temperature: cr.Temperature,
		MaxTokens: cr.MaxTokens, MaxCompletionTokens: cr.MaxCompletionTokens,
		ResponseFormat: cr.ResponseFormat, Body: body,
	}

	s.mu.Lock()
	s.calls++
	s.requests = append(s.requests, req)
	var rep Reply
	switch {
	case s.failN > 0:
		s.failN--
		rep = s.failWith
	case len(s.queue) > 0:
		rep = s.queue[0]
		s.queue = s.queue[1:]
	case s.handler != nil:
		h := s.handler
		s.mu.Unlock()
		rep = h(req)
		s.mu.Lock()
	default:
		rep = Reply{Content: "echo: " + lastContent(cr.Messages)}
	}
	s.mu.Unlock()

	if rep.Block != nil {
		select {
		case <-rep.Block:
		case <-r.Context().Done():
			return
		}
	}
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if rep.RawBody != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(statusOr200(rep.Status))
		_, _ = io.WriteString(w, rep.RawBody)
		return
	}
	if rep.Status >= 400 {
		writeError(w, rep.Status, rep.Content)
		return
	}
	writeCompletion(w, cr, rep)
}

func statusOr200(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": "llmfake_error", "code": status},
	})
}

func writeCompletion(w http.ResponseWriter, cr chatRequest, rep Reply) {
	model := rep.Model
	if model == "" {
		model = cr.Model
	}
	finish := rep.FinishReason
	if finish == "" {
		finish = "stop"
	}
	usage := rep.Usage
	if usage.PromptTokens == 0 {
		for _, m := range cr.Messages {
			usage.PromptTokens += len(strings.Fields(m.Content))
		}
	}
	if usage.CompletionTokens == 0 {
		usage.CompletionTokens = len(strings.Fields(rep.Content))
	}
	msg := map[string]any{"role": "assistant", "content": rep.Content}
	if rep.Refusal != "" {
		msg["refusal"] = rep.Refusal
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(statusOr200(rep.Status))
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id":      "chatcmpl-llmfake",
		"object":  "chat.completion",
		"created": 1700000000,
		"model":   model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage": map[string]any{
			"prompt_tokens":     usage.PromptTokens,
			"completion_tokens": usage.CompletionTokens,
			"total_tokens":      usage.PromptTokens + usage.CompletionTokens,
		},
	})
}

func lastContent(msgs []Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[len(msgs)-1].Content
}
