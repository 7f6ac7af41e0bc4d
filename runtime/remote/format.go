package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tqw-dsl/tqw/internal/msgpackcheck"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The formats of the inbox (doc.go, Objects): command and answer objects
// (JSON) and applied-markers (MessagePack, in the caller KV). They are
// read by writers and clients of other versions: a field is added as an
// optional one, never renamed, and inboxFormat changes only with a format
// older writers cannot apply.

// DefaultInboxPrefix is the default object-key prefix of commands.
const DefaultInboxPrefix = "inbox"

// kvInbox holds the applied-markers of commands in flight:
// "workflow/inbox/", the control namespace the runtime leaves to the
// inbox.
var kvInbox = func() string {
	p, err := runtime.ControlKVPrefix("inbox")
	if err != nil {
		panic(err) // a constant name; every test fails if it is refused
	}
	return p
}()

func inboxMarkerKey(id string) string { return kvInbox + id }

// inboxFormat is the version of command and answer objects.
const inboxFormat = 1

// The "tqw" field of command and answer objects: what proves an object
// under the inbox's prefixes is the inbox's own.
const (
	commandMagic = "inbox-command"
	answerMagic  = "inbox-answer"
)

// Outcome codes of answers that are not a sentinel error's (answerCodes).
const (
	// codeInternal: the writer gave up on store errors before the command
	// had started (no marker of it exists); nothing was applied.
	codeInternal = "internal"
	// codeUncertain: the writer gave up on store errors after the command
	// may have taken effect; it keeps retrying it (invariant 6).
	codeUncertain = "uncertain"
)

// maxCommandSize bounds a command object the writer reads: a run input and
// KV writes of at most queue.MaxKVValueSize each, in base64.
const maxCommandSize = 64 << 20

// maxCommandIDLen bounds a command id (a ULID has 26 characters).
const maxCommandIDLen = 128

// Sentinel errors of the inbox; match them with errors.Is.
var (
	// ErrNoAnswer reports a command no writer answered before the
	// deadline. The command stays in the inbox and is applied when a
	// writer drains it; the error says whether a live writer exists.
	ErrNoAnswer = errors.New("remote: no answer from the store's writer")
	// ErrInvalidCommand reports an inbox object the writer cannot decode
	// or apply as a command.
	ErrInvalidCommand = errors.New("remote: invalid inbox command")
	// ErrCommandExpired reports a command the writer found after its
	// expiry (ClientOptions.CommandTTL); it was not applied.
	ErrCommandExpired = errors.New("remote: inbox command expired before a writer applied it")
	// ErrOutcomeUncertain reports a command the writer could not finish
	// after it may have taken effect, and did not resolve before the
	// client's deadline. The command stays in the inbox; the writer
	// applies it at most once in all, when the store lets it.
	ErrOutcomeUncertain = errors.New("remote: the writer could not tell whether the command was applied")
)

// errForeign marks an object under the inbox's prefixes that is not the
// inbox's (doc.go, Recognition).
var errForeign = errors.New("not an inbox object")

// CommandKind names what an inbox command asks for.
type CommandKind string

// Command kinds.
const (
	CommandSubmit      CommandKind = "submit"
	CommandSignal      CommandKind = "signal"
	CommandClearSignal CommandKind = "clear_signal"
	CommandCancel      CommandKind = "cancel"
	// CommandRedrive and CommandBulk: recover.go.
	CommandRedrive CommandKind = "redrive"
	CommandBulk    CommandKind = "bulk"
)

// inboxCommand is the JSON of a command object.
type inboxCommand struct {
	// Magic is commandMagic; MarshalJSON sets it.
	Magic string      `json:"tqw"`
	V     int         `json:"v"`
	ID    string      `json:"id"`
	Kind  CommandKind `json:"kind"`
	// Submit, Cancel.
	RunID    string            `json:"run_id,omitempty"`
	Input    []byte            `json:"input,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	KVWrites map[string][]byte `json:"kv_writes,omitempty"`
	// Signal, ClearSignal.
	Key     string `json:"key,omitempty"`
	Payload []byte `json:"payload,omitempty"`
	// RequireWaiting is signal.Options.RequireWaiting.
	RequireWaiting bool `json:"require_waiting,omitempty"`
	// Bulk is a bulk command's request (recover.go).
	Bulk *bulkCommand `json:"bulk,omitempty"`
	// Client describes the sender (name, host, pid) for logs.
	Client  string    `json:"client,omitempty"`
	SentAt  time.Time `json:"sent_at"`
	Expires time.Time `json:"expires,omitzero"`
}

// MarshalJSON stamps the magic, so no command leaves without it.
func (c inboxCommand) MarshalJSON() ([]byte, error) {
	type plain inboxCommand
	p := plain(c)
	p.Magic = commandMagic
	return json.Marshal(p)
}

// inboxAnswer is the JSON of an answer object.
type inboxAnswer struct {
	// Magic is answerMagic; MarshalJSON sets it.
	Magic          string      `json:"tqw"`
	V              int         `json:"v"`
	ID             string      `json:"id"`
	Kind           CommandKind `json:"kind"`
	RunID          string      `json:"run_id,omitempty"`
	JobID          string      `json:"job_id,omitempty"`
	NewlySubmitted bool        `json:"newly_submitted,omitempty"`
	Signal         string      `json:"signal,omitempty"`
	// SignalExpires is signal.Result.Expires of a buffered signal.
	SignalExpires time.Time `json:"signal_expires,omitzero"`
	// OK is Cancel's and ClearSignal's boolean result.
	OK bool `json:"ok,omitempty"`
	// Bulk is a bulk command's items.
	Bulk []BulkItem `json:"bulk,omitempty"`
	// Code names the sentinel error of a rejected command; Error is its text.
	Code      string    `json:"code,omitempty"`
	Error     string    `json:"error,omitempty"`
	Writer    string    `json:"writer,omitempty"`
	AppliedAt time.Time `json:"applied_at"`
}

// MarshalJSON stamps the magic, so no answer leaves without it.
func (a inboxAnswer) MarshalJSON() ([]byte, error) {
	type plain inboxAnswer
	p := plain(a)
	p.Magic = answerMagic
	return json.Marshal(p)
}

// inboxMarker is the applied-marker of a command in flight (MessagePack).
type inboxMarker struct {
	Kind CommandKind `msgpack:"k"`
	// Submit, Cancel: the run's incarnation before the first attempt
	// (runtime.Incarnation's Active and Ended).
	Active string `msgpack:"a,omitempty"`
	Result string `msgpack:"r,omitempty"`
	// Signal: the buffer value the command wrote (runtime.SignalValue),
	// and the outcome once the delivery committed ("" while it has not).
	Buf     []byte `msgpack:"b,omitempty"`
	Outcome string `msgpack:"o,omitempty"`
	// ClearSignal: whether a buffered signal was removed.
	Cleared bool  `msgpack:"c,omitempty"`
	AtMs    int64 `msgpack:"t"`
}

// answerCodes maps the errors a command can be rejected with to stable
// codes, so a Client's errors.Is works across processes.
var answerCodes = []struct {
	code string
	err  error
}{
	{"input_mismatch", runtime.ErrInputMismatch},
	{"run_not_found", runtime.ErrRunNotFound},
	{"reserved", runtime.ErrReserved},
	{"invalid_run_id", runstate.ErrInvalidRunID},
	{"invalid_signal_key", signal.ErrInvalidKey},
	{"signal_rejected", signal.ErrRejected},
	{"no_waiter", signal.ErrNoWaiter},
	{"value_too_large", runtime.ErrValueTooLarge},
	{"invalid_key", runtime.ErrInvalidKey},
	{"invalid_command", ErrInvalidCommand},
	{"command_expired", ErrCommandExpired},
	{"not_redrivable", runtime.ErrNotRedrivable},
}

// codeOf returns the code of a rejection error, or "" for an error that is
// not the command's fault (a store error: the writer retries the command).
func codeOf(err error) string {
	for _, c := range answerCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	if errors.Is(err, queue.ErrInvalid) || errors.Is(err, queue.ErrTooLarge) {
		return "invalid_command"
	}
	return ""
}

func sentinelOf(code string) error {
	for _, c := range answerCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

func encodeCommand(c *inboxCommand) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("remote: encode %s command: %w", c.Kind, err)
	}
	return b, nil
}

// decodeCommand decodes and checks a command object.
func decodeCommand(b []byte) (*inboxCommand, error) {
	c, err := parseCommand(b)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// parseCommand decodes an object that should be a command. An error
// wrapping errForeign (and ErrInvalidCommand) means it is not one: not
// JSON, or without the magic.
func parseCommand(b []byte) (*inboxCommand, error) {
	if len(b) > maxCommandSize {
		return nil, fmt.Errorf("%w: %w: %d bytes, the limit is %d", ErrInvalidCommand, errForeign, len(b), maxCommandSize)
	}
	var c inboxCommand
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrInvalidCommand, errForeign, err)
	}
	if c.Magic != commandMagic {
		return nil, fmt.Errorf("%w: %w: no \"tqw\":%q field", ErrInvalidCommand, errForeign, commandMagic)
	}
	return &c, nil
}

// validate checks a parsed command: an error means the command is the
// inbox's but cannot be applied.
func (c *inboxCommand) validate() error {
	if c.V != inboxFormat {
		return fmt.Errorf("%w: format version %d, this writer reads %d", ErrInvalidCommand, c.V, inboxFormat)
	}
	if err := validCommandID(c.ID); err != nil {
		return err
	}
	switch c.Kind {
	case CommandSubmit, CommandCancel, CommandRedrive:
		if c.RunID == "" {
			return fmt.Errorf("%w: %s command %s without a run id", ErrInvalidCommand, c.Kind, c.ID)
		}
	case CommandSignal, CommandClearSignal:
	case CommandBulk:
		if c.Bulk == nil {
			return fmt.Errorf("%w: bulk command %s without its request", ErrInvalidCommand, c.ID)
		}
	default:
		return fmt.Errorf("%w: unknown kind %q in command %s", ErrInvalidCommand, c.Kind, c.ID)
	}
	return nil
}

// decodeAnswer decodes and checks an answer object.
func decodeAnswer(b []byte) (*inboxAnswer, error) {
	var a inboxAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: answer: %w", runtime.ErrCorruptRecord, err)
	}
	if a.Magic != answerMagic {
		return nil, fmt.Errorf("%w: answer without the \"tqw\":%q field", runtime.ErrCorruptRecord, answerMagic)
	}
	if a.V != inboxFormat || a.ID == "" {
		return nil, fmt.Errorf("%w: answer of format %d for command %q", runtime.ErrCorruptRecord, a.V, a.ID)
	}
	return &a, nil
}

func encodeMarker(m *inboxMarker) ([]byte, error) {
	b, err := msgpack.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("remote: encode the marker of a %s command: %w", m.Kind, err)
	}
	return b, nil
}

// decodeInboxMarker decodes a marker, checking its lengths and nesting
// first (internal/msgpackcheck), as the runtime decodes its records.
func decodeInboxMarker(b []byte) (*inboxMarker, error) {
	var m inboxMarker
	if err := msgpackcheck.Unmarshal(b, &m, msgpackcheck.Options{}); err != nil {
		return nil, fmt.Errorf("%w: inbox marker: %w", runtime.ErrCorruptRecord, err)
	}
	switch m.Kind {
	case CommandSubmit, CommandCancel, CommandSignal, CommandClearSignal, CommandRedrive:
		return &m, nil
	}
	return nil, fmt.Errorf("%w: inbox marker of kind %q", runtime.ErrCorruptRecord, m.Kind)
}

func validCommandID(id string) error {
	if id == "" || len(id) > maxCommandIDLen || strings.ContainsAny(id, "/\\") {
		return fmt.Errorf("%w: command id %q: want 1 to %d characters without '/'", ErrInvalidCommand, id, maxCommandIDLen)
	}
	if err := objstore.ValidateKey(id); err != nil {
		return fmt.Errorf("%w: command id %q: %w", ErrInvalidCommand, id, err)
	}
	return nil
}

// inboxNamespaces returns the namespaces of an inbox: its commands and
// its answers.
func inboxNamespaces(prefix, setting string) []objstore.Namespace {
	return []objstore.Namespace{
		{Owner: "inbox commands, " + setting, Prefix: prefix},
		{Owner: "inbox answers, " + setting + ` + "-answers"`, Prefix: prefix + "-answers"},
		{Owner: "inbox doorbell, " + setting + ` + "-bell"`, Key: bellKey(prefix)},
	}
}

// parseSignalOutcome is signal.Outcome.String's inverse.
func parseSignalOutcome(s string) (signal.Outcome, bool) {
	switch s {
	case signal.Delivered.String():
		return signal.Delivered, true
	case signal.Buffered.String():
		return signal.Buffered, true
	}
	return 0, false
}
