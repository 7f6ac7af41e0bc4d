package dsl

// ActionInfo documents a built-in action for editors: what it does and
// the shape of its output. Its with keys are in the schema
// ($defs/with.<name>); TestActionInfoMatchesSchema keeps the two in step.
type ActionInfo struct {
	Name    string
	Summary string
	// Output lists the output's fields; nil when the output has no fixed
	// shape (a signal payload) or is nothing (sleep).
	Output []OutputField
	// OutputDoc describes the output in a sentence.
	OutputDoc string
}

// OutputField is one field of an action's output.
type OutputField struct {
	Name   string
	Doc    string
	Fields []OutputField // a nested map's fields
}

// BuiltinActionInfo describes every built-in action, in BuiltinActions order.
var BuiltinActionInfo = []ActionInfo{
	{Name: "http", Summary: "Sends an HTTP request, with an Idempotency-Key derived from run and step.",
		OutputDoc: "{status, headers, body}",
		Output: []OutputField{
			{Name: "status", Doc: "the response status code"},
			{Name: "headers", Doc: "the response headers, names in lower case"},
			{Name: "body", Doc: "the body, parsed when the Content-Type is JSON (else a string; empty is null)"},
		}},
	{Name: "llm", Summary: "An OpenAI-compatible chat completion, memoized per step so a retry does not pay twice.",
		OutputDoc: "{text, json, model, usage, cost, cost_known, finish_reason}",
		Output: []OutputField{
			{Name: "text", Doc: "the reply text"},
			{Name: "json", Doc: "the reply parsed as JSON when with.response_schema is set"},
			{Name: "model", Doc: "the model that answered"},
			{Name: "usage", Doc: "token counts", Fields: []OutputField{
				{Name: "prompt_tokens", Doc: "tokens in the prompt"},
				{Name: "completion_tokens", Doc: "tokens in the reply"},
				{Name: "total_tokens", Doc: "both together"},
			}},
			{Name: "cost", Doc: "the cost in USD from the price table (0 for an unknown model)"},
			{Name: "cost_known", Doc: "whether the model is in the price table"},
			{Name: "finish_reason", Doc: "why the model stopped, e.g. stop or length"},
		}},
	{Name: "shell", Summary: "Runs a command; its process group is killed on cancel. A non-zero exit is a shell.exit error.",
		OutputDoc: "{exit_code, stdout, stderr, stdout_truncated, stderr_truncated}",
		Output: []OutputField{
			{Name: "exit_code", Doc: "the exit status"},
			{Name: "stdout", Doc: "the first max_output_bytes of standard output"},
			{Name: "stderr", Doc: "the first max_output_bytes of standard error"},
			{Name: "stdout_truncated", Doc: "whether standard output was cut"},
			{Name: "stderr_truncated", Doc: "whether standard error was cut"},
		}},
	{Name: "wait_signal", Summary: "Waits for a durable signal; on timeout the run goes to on_timeout (error type signal.timeout).",
		OutputDoc: "the signal payload (its with.schema's properties when it has one)"},
	{Name: "sleep", Summary: "Waits durably for with.duration or until with.until, costing nothing meanwhile.",
		OutputDoc: "nothing (null)"},
}

// ActionInfoFor returns the description of a built-in action, or nil.
func ActionInfoFor(name string) *ActionInfo {
	for i := range BuiltinActionInfo {
		if BuiltinActionInfo[i].Name == name {
			return &BuiltinActionInfo[i]
		}
	}
	return nil
}

// ErrorTypeDocs says, for each built-in error type, what raises it.
var ErrorTypeDocs = map[string]string{
	"timeout":                 "An attempt ran past its with.timeout or the step timeout. Retryable.",
	"http.status_4xx":         "http or llm: a 4xx status outside expect_status. Retryable only for 408 and 429 (http) or 408 (llm).",
	"http.status_5xx":         "http or llm: a 5xx status outside expect_status. Retryable.",
	"http.connection":         "http or llm: refused, reset, DNS or TLS handshake failure. Retryable, except a rejected TLS certificate.",
	"http.response_too_large": "http: a body over max_response_bytes.",
	"http.invalid_body":       "http: a JSON Content-Type whose body is not JSON.",
	"http.unexpected_status":  "http: a 1xx-3xx status outside expect_status.",
	"llm.rate_limit":          "llm: status 429. Retryable.",
	"llm.invalid_output":      "llm: no reply, or a reply that is not JSON or fails response_schema.",
	"memo":                    "llm: its memo (the stored paid answer) could not be read. Retryable.",
	"shell.exit":              "shell: a non-zero exit; error.status is the code.",
	"signal.timeout":          "wait_signal: no signal before with.timeout.",
	"signal.key_taken":        "wait_signal: another run waits on the key (one waiter per key).",
	"call.failed":             "call: the child run failed.",
	"expression":              "An expression failed at run time.",
	"validation":              "Bad arguments at run time (an llm 400, a shell command that cannot start, a missing named secret).",
	"cancelled":               "The run was cancelled.",
}

// ExprFunctions are the functions the workflow language adds to
// expr-lang's builtins, with their documentation.
var ExprFunctions = map[string]string{
	"now":      "now() is the run's clock, injected by the runtime.",
	"uuid":     "uuid() returns a new random id.",
	"duration": `duration("1d12h") parses a duration in the DSL's notation, days included.`,
	"raw":      "${ raw(x) } inserts x into a shell script as code, unquoted; allowed only as the whole ${ } of a shell action's script command.",
}

// ExprNames documents the names an expression may read, and where.
var ExprNames = map[string]string{
	"input":   "The run input. Readable everywhere.",
	"run":     "{id, workflow, step, attempt, outcome}. Readable everywhere; outcome only in on_error and finally.",
	"vars":    "The run's variables. Readable everywhere except the initial vars.",
	"steps":   "steps.<id>.output is a finished step's output. Readable everywhere except the initial vars.",
	"output":  "The step's own output in its set, switch, next, retry and catch; the previous step's in switch, set, succeed and fail steps.",
	"error":   "{type, message, status, retryable, step}: the error being handled, in retry.when and catch rules; the run's error in on_error and finally.",
	"item":    "The current item: in a foreach's with, and anywhere in a map's steps.",
	"index":   "The current item's position from 0: in a foreach's with, and anywhere in a map's steps.",
	"secrets": "secrets.NAME is a declared secret; readable only in with and foreach.with.",
}

// ExprFields documents the fields of the names whose shape is fixed.
var ExprFields = map[string][]OutputField{
	"run": {
		{Name: "id", Doc: "the run id"}, {Name: "workflow", Doc: "the workflow name"},
		{Name: "step", Doc: "the current step's id"}, {Name: "attempt", Doc: "the attempt number, from 1"},
		{Name: "outcome", Doc: "in on_error and finally, how the run ends: failed, timed_out, cancelled or succeeded"},
	},
	"error": {
		{Name: "type", Doc: "the error type, e.g. http.status_5xx"}, {Name: "message", Doc: "what went wrong"},
		{Name: "status", Doc: "an HTTP status or a shell exit code, 0 if none"},
		{Name: "retryable", Doc: "the raising action's verdict: whether another attempt can succeed"},
		{Name: "step", Doc: "in on_error and finally, the step that raised the run's error"},
	},
}
