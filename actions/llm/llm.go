package llm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	openai "github.com/sashabaranov/go-openai"

	"github.com/tqw-dsl/tqw/actions"
)

// Name is the action's name in workflows.
const Name = "llm"

// TypeMemo is the error type of an attempt that could not read its memo.
const TypeMemo = "memo"

// Defaults.
const (
	DefaultBaseURL      = "https://api.openai.com/v1"
	DefaultAPIKeySecret = "OPENAI_API_KEY"
	DefaultTimeout      = 2 * time.Minute
	// DefaultMaxResponseBytes caps a reply's size; chat completions are far smaller.
	DefaultMaxResponseBytes = 10 << 20
)

// Price is what a model costs, in USD per million tokens.
type Price struct {
	PromptPerMillion     float64
	CompletionPerMillion float64
}

// DefaultPrices are OpenAI's published list prices (USD per million tokens,
// standard tier) for common models as of 2025. Prices change: configure
// Options.Prices for the models and providers you use.
var DefaultPrices = map[string]Price{
	"gpt-4o":       {PromptPerMillion: 2.50, CompletionPerMillion: 10.00},
	"gpt-4o-mini":  {PromptPerMillion: 0.15, CompletionPerMillion: 0.60},
	"gpt-4.1":      {PromptPerMillion: 2.00, CompletionPerMillion: 8.00},
	"gpt-4.1-mini": {PromptPerMillion: 0.40, CompletionPerMillion: 1.60},
	"gpt-4.1-nano": {PromptPerMillion: 0.10, CompletionPerMillion: 0.40},
	"o3-mini":      {PromptPerMillion: 1.10, CompletionPerMillion: 4.40},
	"o4-mini":      {PromptPerMillion: 1.10, CompletionPerMillion: 4.40},
}

// Options configure the action.
type Options struct {
	// Client sends the requests; nil means a client with Go's default transport.
	Client *http.Client
	// BaseURL is the default API base URL; "" means OPENAI_BASE_URL from the
	// environment, else DefaultBaseURL.
	BaseURL string
	// Getenv reads the worker's environment; nil means os.Getenv.
	Getenv func(string) string
	// Prices is the price table by model; nil means DefaultPrices.
	Prices map[string]Price
	// Timeout bounds an attempt when the step gives no timeout; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxResponseBytes caps the size of a reply; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

// Action is the "llm" action. Create it with New.
type Action struct {
	client  cappedDoer
	baseURL string
	prices  map[string]Price
	timeout time.Duration
}

// New returns the action configured by opts.
func New(opts Options) *Action {
	a := &Action{client: cappedDoer{opts.Client, opts.MaxResponseBytes}, baseURL: opts.BaseURL, prices: opts.Prices, timeout: opts.Timeout}
	if a.client.c == nil {
		a.client.c = &http.Client{}
	}
	if a.client.max <= 0 {
		a.client.max = DefaultMaxResponseBytes
	}
	if a.baseURL == "" {
		getenv := opts.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		a.baseURL = getenv("OPENAI_BASE_URL")
	}
	if a.baseURL == "" {
		a.baseURL = DefaultBaseURL
	}
	if a.prices == nil {
		a.prices = DefaultPrices
	}
	if a.timeout <= 0 {
		a.timeout = DefaultTimeout
	}
	return a
}

// Name returns "llm".
func (a *Action) Name() string { return Name }

// Args are the action's arguments, decoded with actions.DecodeArgs.
type Args struct {
	Model          string        `arg:"model,required"`
	System         *string       `arg:"system"`
	Prompt         *string       `arg:"prompt"`
	Messages       Messages      `arg:"messages"`
	Temperature    *float64      `arg:"temperature"`
	MaxTokens      *int          `arg:"max_tokens"`
	ResponseSchema any           `arg:"response_schema"`
	BaseURL        string        `arg:"base_url"`
	APIKeySecret   string        `arg:"api_key_secret"`
	Timeout        time.Duration `arg:"timeout"`
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Messages is the messages argument: a list of {role, content} objects.
type Messages []Message

var roles = []string{"system", "developer", "user", "assistant"}

// DecodeArg accepts a non-empty list of {role, content} objects with a
// known role and string content.
func (m *Messages) DecodeArg(v any) error {
	items, ok := v.([]any)
	if !ok {
		return fmt.Errorf("want a list of {role, content} objects, got %T", v)
	}
	if len(items) == 0 {
		return errors.New("empty list; give at least one message")
	}
	out := make(Messages, len(items))
	for i, it := range items {
		field := fmt.Sprintf("[%d]", i)
		obj, ok := it.(map[string]any)
		if !ok {
			return &actions.ArgError{Field: field, Problem: "want an object {role, content}"}
		}
		for k := range obj {
			if k != "role" && k != "content" {
				return &actions.ArgError{Field: field + "." + k, Problem: "unknown key; a message has role and content"}
			}
		}
		role, ok := obj["role"].(string)
		if !ok || !slices.Contains(roles, role) {
			return &actions.ArgError{Field: field + ".role", Problem: "want one of " + strings.Join(roles, ", ")}
		}
		content, ok := obj["content"].(string)
		if !ok {
			return &actions.ArgError{Field: field + ".content", Problem: "want a string"}
		}
		out[i] = Message{Role: role, Content: content}
	}
	*m = out
	return nil
}

// request is the decoded, defaulted request; its JSON is the memo key's input.
type request struct {
	Version     int      `json:"v"`
	BaseURL     string   `json:"base_url"`
	Model       string   `json:"model"`
	Messages    Messages `json:"messages"`
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   *int     `json:"max_tokens,omitempty"`
	Schema      any      `json:"schema,omitempty"`
}

// memoKey is "llm/" and the hex SHA-256 of the canonical request.
func (r *request) memoKey() (string, error) {
	data, err := json.Marshal(r) // maps marshal with sorted keys: canonical
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return "llm/" + hex.EncodeToString(sum[:]), nil
}

// record is what the memo stores: the output's fields, typed, so that a
// memo hit rebuilds exactly the output a miss returns.
type record struct {
	Text             string          `json:"text"`
	JSON             json.RawMessage `json:"json,omitempty"`
	Model            string          `json:"model"`
	PromptTokens     int64           `json:"prompt_tokens"`
	CompletionTokens int64           `json:"completion_tokens"`
	TotalTokens      int64           `json:"total_tokens"`
	Cost             float64         `json:"cost"`
	CostKnown        bool            `json:"cost_known"`
	FinishReason     string          `json:"finish_reason"`
	// Attempt is the attempt that paid for the reply (0 in entries older
	// than the field).
	Attempt int `json:"attempt,omitempty"`
	// Invalid is why the reply failed the step (no choices, not matching
	// response_schema); "" for an answer.
	Invalid string `json:"invalid,omitempty"`
	// Reused marks an answer this run took from Call.Answers: it paid
	// nothing for it.
	Reused bool `json:"reused,omitempty"`
}

// spend is what the reply cost, for the run's ledger.
func (rec *record) spend() actions.Spend {
	return actions.Spend{Attempt: rec.Attempt, Model: rec.Model, PromptTokens: rec.PromptTokens,
		CompletionTokens: rec.CompletionTokens, TotalTokens: rec.TotalTokens, CostUSD: rec.Cost, CostKnown: rec.CostKnown, Reused: rec.Reused}
}

// invalidError is the error of an attempt whose reply was paid for but
// failed the step, with the reply's fields as its partial output.
func (rec *record) invalidError(model string) error {
	out, _ := rec.output()
	return actions.NewError(actions.TypeLLMInvalidOutput, false, "llm %s: %s", model, rec.Invalid).WithOutput(out)
}

// put memoizes rec under key, logging a failure: the reply is paid for
// and is returned (or fails the attempt) either way.
func putRecord(ctx context.Context, call *actions.Call, log *slog.Logger, key string, rec *record) {
	if call.Memo == nil {
		return
	}
	data, err := json.Marshal(rec)
	if err == nil {
		err = call.Memo.Put(ctx, key, data)
	}
	if err != nil {
		log.Warn("llm: could not memoize the paid reply; using it anyway", "err", err)
	}
}

func (rec *record) output() (map[string]any, error) {
	var js any
	if len(rec.JSON) > 0 {
		v, err := actions.DecodeJSON(rec.JSON)
		if err != nil {
			return nil, err
		}
		js = v
	}
	return map[string]any{
		"text":  rec.Text,
		"json":  js,
		"model": rec.Model,
		"usage": map[string]any{
			"prompt_tokens":     rec.PromptTokens,
			"completion_tokens": rec.CompletionTokens,
			"total_tokens":      rec.TotalTokens,
		},
		"cost":          rec.Cost,
		"cost_known":    rec.CostKnown,
		"finish_reason": rec.FinishReason,
	}, nil
}

// Execute runs one chat completion, or returns the memoized one.
func (a *Action) Execute(ctx context.Context, call *actions.Call) (any, error) {
	var args Args
	if err := actions.DecodeArgs(call.Args, &args); err != nil {
		return nil, err
	}
	req, schema, err := a.prepare(&args)
	if err != nil {
		return nil, err
	}
	log := call.Log().With("action", Name, "model", req.Model)

	key, err := req.memoKey()
	if err != nil {
		return nil, fmt.Errorf("llm: memo key: %w", err)
	}
	if call.Memo != nil {
		data, ok, err := call.Memo.Get(ctx, key)
		if err != nil {
			if e := actions.ContextError(ctx, "llm"); e != nil {
				return nil, e
			}
			return nil, actions.NewError(TypeMemo, true, "llm: reading the step memo: %w", err)
		}
		if ok {
			var rec record
			if err := json.Unmarshal(data, &rec); err != nil {
				log.Warn("llm: memo entry unreadable; calling the model again", "key", key)
			} else if rec.Invalid != "" && rec.Attempt != call.Attempt {
				// An earlier attempt's invalid reply: this attempt asks again.
			} else if out, err := rec.output(); err != nil {
				log.Warn("llm: memo entry unreadable; calling the model again", "key", key)
			} else {
				log.Debug("llm: memo hit; no request sent")
				call.Spend(rec.spend())
				if rec.Invalid != "" {
					return nil, rec.invalidError(req.Model)
				}
				return out, nil
			}
		}
	}

	if out, ok := reuseAnswer(ctx, call, log, key); ok {
		return out, nil
	}

	apiKey, err := a.apiKey(call, &args)
	if err != nil {
		return nil, err
	}
	timeout := a.timeout
	if args.Timeout > 0 {
		timeout = args.Timeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	chat := a.chatRequest(req)
	if err := openai.NewReasoningValidator().Validate(chat); err != nil {
		return nil, actions.NewError(actions.TypeValidation, false, "llm %s: %w", req.Model, err)
	}
	cfg := openai.DefaultConfig(apiKey)
	cfg.BaseURL = req.BaseURL
	cfg.HTTPClient = a.client
	resp, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(actx, chat)
	if err != nil {
		return nil, classify(ctx, actx, req, err)
	}
	rec := &record{
		Model:            resp.Model,
		PromptTokens:     int64(resp.Usage.PromptTokens),
		CompletionTokens: int64(resp.Usage.CompletionTokens),
		TotalTokens:      int64(resp.Usage.TotalTokens),
		Attempt:          call.Attempt,
	}
	if rec.Model == "" {
		rec.Model = req.Model
	}
	if rec.TotalTokens == 0 {
		rec.TotalTokens = rec.PromptTokens + rec.CompletionTokens
	}
	rec.Cost, rec.CostKnown = a.cost(req.Model, resp.Model, rec.PromptTokens, rec.CompletionTokens)
	log.Info("llm: completion", "prompt_tokens", rec.PromptTokens, "completion_tokens", rec.CompletionTokens,
		"cost_usd", rec.Cost, "cost_known", rec.CostKnown, "attempt", call.Attempt)

	// A paid reply that fails the step is memoized for this attempt too,
	// so that a redelivery after a crash replays it (and its spend)
	// instead of paying again; a later attempt asks again.
	if len(resp.Choices) == 0 {
		rec.Invalid = "the reply has no choices"
	} else {
		choice := resp.Choices[0]
		rec.Text, rec.FinishReason = choice.Message.Content, string(choice.FinishReason)
		if schema != nil {
			js, err := validateReply(schema, choice.Message)
			if err != nil {
				rec.Invalid = err.Error()
			}
			rec.JSON = js
		}
	}
	out, err := rec.output()
	if err != nil && rec.Invalid == "" {
		rec.Invalid = fmt.Sprintf("building output: %v", err)
	}
	putRecord(ctx, call, log, key, rec)
	if rec.Invalid == "" {
		shareAnswer(ctx, call, log, key, rec)
	}
	call.Spend(rec.spend())
	if rec.Invalid != "" {
		return nil, rec.invalidError(req.Model)
	}
	return out, nil
}

// reuseAnswer returns, for a call that may reuse answers (a fork), the
// answer another run paid for under the same request, memoized for this
// attempt as reused (so a redelivery replays it, still unpaid). A failed
// or damaged read of the shared store only costs the call: the model is
// asked.
func reuseAnswer(ctx context.Context, call *actions.Call, log *slog.Logger, key string) (map[string]any, bool) {
	if !call.ReuseAnswers || call.Answers == nil {
		return nil, false
	}
	data, ok, err := call.Answers.Get(ctx, key)
	if err != nil {
		log.Warn("llm: could not read the answer store; calling the model", "err", err)
		return nil, false
	}
	if !ok {
		return nil, false
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil || rec.Invalid != "" {
		log.Warn("llm: answer store entry unreadable; calling the model", "key", key)
		return nil, false
	}
	out, err := rec.output()
	if err != nil {
		log.Warn("llm: answer store entry unreadable; calling the model", "key", key)
		return nil, false
	}
	rec.Attempt, rec.Reused = call.Attempt, true
	putRecord(ctx, call, log, key, &rec)
	log.Info("llm: answer reused; no request sent", "saved_tokens", rec.TotalTokens, "saved_usd", rec.Cost)
	call.Spend(rec.spend())
	return out, true
}

// shareAnswer puts a paid answer in the shared answer store, logging a
// failure (the answer is paid and used either way).
func shareAnswer(ctx context.Context, call *actions.Call, log *slog.Logger, key string, rec *record) {
	if call.Answers == nil {
		return
	}
	shared := *rec
	shared.Attempt = 0
	data, err := json.Marshal(&shared)
	if err == nil {
		err = call.Answers.Put(ctx, key, data)
	}
	if err != nil {
		log.Warn("llm: could not share the paid answer", "err", err)
	}
}

// prepare checks the arguments and builds the canonical request and the compiled schema.
func (a *Action) prepare(args *Args) (*request, *jsonschema.Schema, error) {
	if strings.TrimSpace(args.Model) == "" {
		return nil, nil, actions.ValidationError("model", "must not be empty")
	}
	if (args.Prompt == nil) == (args.Messages == nil) {
		return nil, nil, actions.ValidationError("prompt", "give exactly one of prompt or messages")
	}
	req := &request{Version: 1, Model: args.Model, Temperature: args.Temperature, MaxTokens: args.MaxTokens}
	if args.System != nil {
		req.Messages = append(req.Messages, Message{Role: "system", Content: *args.System})
	}
	if args.Prompt != nil {
		req.Messages = append(req.Messages, Message{Role: "user", Content: *args.Prompt})
	} else {
		req.Messages = append(req.Messages, args.Messages...)
	}
	if t := args.Temperature; t != nil && (*t < 0 || *t > 2) {
		return nil, nil, actions.ValidationError("temperature", "want a number from 0 to 2, got %g", *t)
	}
	if m := args.MaxTokens; m != nil && *m <= 0 {
		return nil, nil, actions.ValidationError("max_tokens", "want a positive number, got %d", *m)
	}
	base := a.baseURL
	if args.BaseURL != "" {
		base = args.BaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, actions.ValidationError("base_url", "want an http:// or https:// URL, got %q", base)
	}
	if u.User != nil {
		return nil, nil, actions.ValidationError("base_url", "must not carry credentials; use api_key_secret")
	}
	req.BaseURL = strings.TrimRight(base, "/")

	var schema *jsonschema.Schema
	if args.ResponseSchema != nil {
		if _, ok := args.ResponseSchema.(map[string]any); !ok {
			return nil, nil, actions.ValidationError("response_schema", "want a JSON Schema object")
		}
		req.Schema = args.ResponseSchema
		schema, err = compileSchema(args.ResponseSchema)
		if err != nil {
			return nil, nil, actions.ValidationError("response_schema", "%v", err)
		}
	}
	return req, schema, nil
}

func (a *Action) apiKey(call *actions.Call, args *Args) (string, error) {
	name := args.APIKeySecret
	if name == "" {
		name = DefaultAPIKeySecret
	}
	key, ok := call.LookupSecret(name)
	if !ok && args.APIKeySecret != "" {
		return "", actions.ValidationError("api_key_secret",
			"secret %s is not available; list it under `secrets:` and set it in the worker's environment", name)
	}
	return key, nil
}

func (a *Action) chatRequest(r *request) openai.ChatCompletionRequest {
	cr := openai.ChatCompletionRequest{Model: r.Model}
	for _, m := range r.Messages {
		cr.Messages = append(cr.Messages, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
	}
	if r.Temperature != nil {
		cr.Temperature = float32(*r.Temperature)
		if cr.Temperature == 0 {
			// go-openai omits a zero temperature (omitempty), which servers
			// read as their default (1). The smallest float32 is sent instead
			// and means 0 in practice.
			cr.Temperature = math.SmallestNonzeroFloat32
		}
	}
	if r.MaxTokens != nil {
		// max_tokens is what every OpenAI-compatible server (vLLM, Ollama,
		// llama.cpp, ...) understands; only OpenAI's reasoning models reject
		// it and need max_completion_tokens instead.
		//lint:ignore SA1019 deprecated by OpenAI, still the compatible field.
		cr.MaxTokens = *r.MaxTokens
		if errors.Is(openai.NewReasoningValidator().Validate(cr), openai.ErrReasoningModelMaxTokensDeprecated) {
			//lint:ignore SA1019 clearing the deprecated field for reasoning models.
			cr.MaxTokens, cr.MaxCompletionTokens = 0, *r.MaxTokens
		}
	}
	if r.Schema != nil {
		raw, _ := json.Marshal(r.Schema) // marshalled once already for the memo key
		cr.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name:   "response",
				Schema: json.RawMessage(raw),
			},
		}
	}
	return cr
}

func (a *Action) cost(requested, reported string, prompt, completion int64) (float64, bool) {
	p, ok := a.prices[requested]
	if !ok {
		p, ok = a.prices[reported]
	}
	if !ok {
		return 0, false
	}
	return (float64(prompt)*p.PromptPerMillion + float64(completion)*p.CompletionPerMillion) / 1e6, true
}

// noLoader refuses to load $ref targets: a response schema must be self-contained.
type noLoader struct{}

// Load refuses every URL.
func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: response_schema must be self-contained", u)
}

func compileSchema(s any) (*jsonschema.Schema, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	const loc = "mem:///response_schema.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

// validateReply parses the reply as JSON, checks it against schema, and
// returns its compact JSON.
func validateReply(schema *jsonschema.Schema, msg openai.ChatCompletionMessage) (json.RawMessage, error) {
	if msg.Refusal != "" {
		return nil, fmt.Errorf("the model refused: %s", msg.Refusal)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(msg.Content))
	if err != nil {
		return nil, fmt.Errorf("the reply is not JSON: %w", err)
	}
	if err := schema.Validate(doc); err != nil {
		return nil, fmt.Errorf("the reply does not match response_schema: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(msg.Content)); err != nil {
		return nil, fmt.Errorf("the reply is not JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// classify turns a client error into a typed action error.
func classify(parent, attempt context.Context, req *request, err error) error {
	what := "llm " + req.Model
	if e := actions.ContextError(parent, what); e != nil {
		return e
	}
	if e := actions.ContextError(attempt, what); e != nil {
		return e
	}
	status, msg := 0, ""
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		status, msg = reqErr.HTTPStatusCode, strings.TrimSpace(string(reqErr.Body))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
	}
	if status > 0 {
		where := fmt.Sprintf("%s at %s: status %d: %s", what, req.BaseURL, status, msg)
		switch {
		case status == http.StatusTooManyRequests:
			return actions.NewError(actions.TypeLLMRateLimit, true, "%s", where).WithStatus(status)
		case status >= 500:
			return actions.NewError(actions.TypeHTTP5xx, true, "%s", where).WithStatus(status)
		case status == http.StatusRequestTimeout:
			return actions.NewError(actions.TypeHTTP4xx, true, "%s", where).WithStatus(status)
		case status == http.StatusBadRequest:
			return actions.NewError(actions.TypeValidation, false, "%s", where).WithStatus(status)
		case status == http.StatusUnauthorized || status == http.StatusForbidden:
			return actions.NewError(actions.TypeHTTP4xx, false, "%s (check the API key secret)", where).WithStatus(status)
		default:
			return actions.NewError(actions.TypeHTTP4xx, false, "%s", where).WithStatus(status)
		}
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		if uerr.Timeout() {
			return actions.NewError(actions.TypeTimeout, true, "%s: timed out: %w", what, uerr.Err)
		}
		return actions.NewError(actions.TypeHTTPConnection, true, "%s at %s: %w", what, req.BaseURL, uerr.Err)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return actions.NewError(actions.TypeLLMInvalidOutput, false,
			"%s: %s did not answer with a chat completion (is base_url right?): %w", what, req.BaseURL, err)
	}
	if errors.Is(err, errTooLarge) {
		return actions.NewError(actions.TypeLLMInvalidOutput, false, "%s: %w", what, err)
	}
	if errors.Is(err, openai.ErrChatCompletionInvalidModel) {
		return actions.NewError(actions.TypeValidation, false, "%s: %w", what, err)
	}
	// Anything else failed on the wire (a reset mid-body, a broken proxy).
	return actions.NewError(actions.TypeHTTPConnection, true, "%s at %s: %w", what, req.BaseURL, err)
}

var errTooLarge = errors.New("the reply exceeds the response size cap (Options.MaxResponseBytes)")

// cappedDoer makes the OpenAI client read at most max bytes of a reply.
type cappedDoer struct {
	c   *http.Client
	max int64
}

// Do sends req and caps the reply body it returns.
func (d cappedDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{rc: resp.Body, left: d.max}
	return resp, nil
}

type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

// Read reads within the cap and fails with errTooLarge past it.
func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte would exceed the cap: find out whether there is one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

// Close closes the underlying body.
func (b *cappedBody) Close() error { return b.rc.Close() }
