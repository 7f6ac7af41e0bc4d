// Package llmfake is a local fake of the OpenAI chat completions API for
// tests: an httptest server on 127.0.0.1 that answers
// POST /v1/chat/completions (and /chat/completions) with scripted replies,
// counts and records every request, and injects errors on demand.
//
// It is exported because the interpreter's and the CLI's end-to-end tests
// reuse it. Typical use:
//
//	fake := llmfake.New()
//	defer fake.Close()
//	fake.Enqueue(llmfake.Reply{Content: `{"ok":true}`})
//	// run a step with base_url: fake.URL()
//	if fake.Calls() != 1 { ... }
//	req := fake.Requests()[0] // Model, Messages, Authorization, ResponseFormat
//
// Replies come, in order, from injected failures (FailNext), the queue
// (Enqueue), the handler (Handle), and otherwise a default reply that echoes
// the last message. Usage numbers are the scripted ones or, when a Reply
// leaves them zero, word counts of the prompt and the reply.
//
// It does not stream, call tools, or check the schema it is sent; it returns
// exactly the text it was scripted with, which is how tests produce both
// valid and invalid structured output.
package llmfake
