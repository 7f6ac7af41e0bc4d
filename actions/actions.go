package actions

import (
	"context"
	"log/slog"
)

// Action is one kind of workflow step, such as http, llm or shell.
type Action interface {
	// Name is the name workflows use in `action:`; unique in a Registry.
	Name() string
	// Execute runs one attempt. The output must be JSON-compatible
	// (map[string]any, []any, string, float64, int64, bool or nil). A failed
	// attempt should return an *Error so that retry and catch can match its
	// type; any other error is treated by the interpreter as it sees fit.
	Execute(ctx context.Context, call *Call) (any, error)
}

// Call is what one attempt of a step receives.
type Call struct {
	// RunID and StepID identify the step; together they form the
	// idempotency key actions send to outside systems.
	RunID, StepID string
	// Attempt is the 1-based attempt number.
	Attempt int
	// Args is the step's `with:` map with templates already rendered.
	Args map[string]any
	// Secret reads a declared secret's value; nil means no secrets.
	Secret func(name string) (string, bool)
	// Derived, when set, is told the values an action builds from its
	// arguments and sends in a form that hides them, such as the
	// user:password of HTTP Basic credentials (sent base64-encoded), so
	// that the caller can redact their forms too when they carry a secret.
	Derived func(value string)
	// Memo is the per-step memo owned by the runtime; nil disables memoization.
	Memo Memo
	// Logger receives the action's logs; nil discards them. Never log secret values.
	Logger *slog.Logger
	// Charge, when set, is the run's spend ledger: see Call.Spend.
	Charge func(Spend)
	// Answers, when set, is a store of paid answers shared across runs,
	// keyed by the content of the request (an action's own hash, which
	// must not cover a secret's value in clear): an action that pays for
	// an answer puts it there, and, when ReuseAnswers is set (a fork or
	// a redrive),
	// takes an answer from there instead of paying again, reporting it
	// through Spend with Reused set.
	Answers      Memo
	ReuseAnswers bool
}

// Spend is one paid call to an outside service (a model completion),
// as the action reports it through Call.Spend.
type Spend struct {
	// Attempt is the attempt that paid for the call: the call's own, or an
	// earlier attempt's when the answer is replayed from the memo.
	Attempt int
	// Model is the model that answered.
	Model string
	// PromptTokens, CompletionTokens and TotalTokens are the usage the
	// service reported.
	PromptTokens, CompletionTokens, TotalTokens int64
	// CostUSD is the call's cost; CostKnown is false when its price is unknown.
	CostUSD   float64
	CostKnown bool
	// Reused marks an answer taken from Call.Answers: paid by another
	// run, not this one; the ledger counts it as saved, not spent.
	Reused bool `msgpack:",omitempty"`
}

// Spend reports a paid call (or one replayed from the memo, with the
// attempt that paid for it) to the run's ledger, whatever the attempt's
// outcome: a reply that fails validation was paid for too. The ledger
// counts each paid call once, in the settlement of the attempt that paid
// for it. It does nothing when the call has no Charge or is nil.
func (c *Call) Spend(s Spend) {
	if c != nil && c.Charge != nil {
		c.Charge(s)
	}
}

// Memo is durable per-step storage that survives retries and crashes of the
// step. Actions use it so that an expensive call is paid for once.
type Memo interface {
	// Get returns the value stored under key, and whether there was one.
	Get(ctx context.Context, key string) ([]byte, bool, error)
	// Put stores value under key.
	Put(ctx context.Context, key string, value []byte) error
}

var discard = slog.New(slog.DiscardHandler)

// Log returns the call's logger, or a logger that discards everything when
// the call has none. It is safe on a nil Call.
func (c *Call) Log() *slog.Logger {
	if c == nil || c.Logger == nil {
		return discard
	}
	return c.Logger
}

// LookupSecret reads a secret through c.Secret; it reports false when the
// call has no secret reader or the secret is not set.
func (c *Call) LookupSecret(name string) (string, bool) {
	if c == nil || c.Secret == nil {
		return "", false
	}
	return c.Secret(name)
}

// Derive reports v through c.Derived; it does nothing when the call has
// no Derived or is nil.
func (c *Call) Derive(v string) {
	if c != nil && c.Derived != nil {
		c.Derived(v)
	}
}

// IdempotencyKey is the key actions send to outside systems so that every
// attempt of one step is recognisable as the same operation: "<run id>/<step id>".
func (c *Call) IdempotencyKey() string {
	return c.RunID + "/" + c.StepID
}
