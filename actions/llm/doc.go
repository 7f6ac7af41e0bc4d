// Package llm is the built-in "llm" action: one OpenAI-compatible chat
// completion (POST {base_url}/chat/completions) per attempt, through
// github.com/sashabaranov/go-openai.
//
// Arguments: model (required), system, exactly one of prompt or messages
// ([{role, content}]), temperature, max_tokens, response_schema, base_url,
// api_key_secret (default OPENAI_API_KEY) and timeout.
//
// The base URL is, in order: the step's base_url, Options.BaseURL, the
// worker's OPENAI_BASE_URL, https://api.openai.com/v1. The API key is read
// through Call.Secret under the name api_key_secret and sent as a Bearer
// token; it never enters logs, errors, outputs or memo keys. When the
// default secret is absent the request goes without a key (local servers
// such as Ollama need none); when a named api_key_secret is absent the step
// fails with `validation`.
//
// With response_schema the request asks for structured output
// (response_format json_schema, non-strict, because strict mode rejects
// common schemas), and the reply is parsed as JSON and validated against
// the schema with github.com/santhosh-tekuri/jsonschema/v6; a reply that is
// not JSON or does not match fails with `llm.invalid_output` (not
// retryable; add it to `retry.on` to ask again).
//
// Output: {text, json, model, usage{prompt_tokens, completion_tokens,
// total_tokens}, cost, cost_known, finish_reason}. cost is in USD from the
// price table (Options.Prices, default DefaultPrices) looked up by the
// requested model, then by the model the server reports; an unknown model
// costs 0 with cost_known false.
//
// Memoization (the "never pays twice" guarantee): before calling, the
// action looks in Call.Memo under a key that is the SHA-256 of the
// canonical request (base URL, model, messages, temperature, max_tokens,
// schema; never the key). On a hit it returns the stored output without any
// HTTP request. After a successful call it stores the output, then returns
// it. A retry, or a re-run after a crash that happened after the memo write,
// therefore gets the paid-for answer back. Decisions:
//   - A failed memo Get fails the attempt (type `memo`, retryable) rather
//     than calling the model: the memo may hold a paid answer we cannot see.
//   - A failed memo Put is logged and the output is still returned: the
//     interpreter then commits the output with the step, so nothing is paid
//     again unless that commit also fails; failing the attempt instead would
//     guarantee a second payment on the retry.
//   - Invalid output (llm.invalid_output) is paid for too: it is memoized
//     with the attempt that paid for it, so a redelivery of that attempt
//     after a crash replays the failure instead of paying again, while a
//     retry (a later attempt) asks the model again.
//
// Shared answers: with Call.Answers, each paid valid answer is also put
// there under the memo key (one PUT), and with Call.ReuseAnswers (the
// interpreter sets it for forks and redrives) a call that its memo does not answer
// looks there first (one GET): a hit sends no request, is memoized for
// the attempt marked reused, and is reported through Spend with Reused
// set (the ledger counts it as saved). A failed or damaged read of the
// shared store only costs the call: the model is asked.
//
// Spend: every paid reply, valid or not, and every memo replay is
// reported through Call.Spend with its usage, cost and the attempt that
// paid for it; the interpreter's ledger counts each once, in the
// settlement of that attempt.
//
// Costs: one memo read per attempt and one memo write per paid call; no
// other storage. Not done: streaming, tool calls, images, and a cap on the
// response size (the OpenAI client reads the whole reply).
//
// Errors: 429 is `llm.rate_limit` (retryable); 408 `http.status_4xx`
// (retryable); 400 `validation` and other 4xx `http.status_4xx` (not
// retryable); 5xx `http.status_5xx` and connection failures
// `http.connection` (retryable); the attempt's timeout `timeout`
// (retryable); cancellation `cancelled`. All carry the HTTP status.
package llm
