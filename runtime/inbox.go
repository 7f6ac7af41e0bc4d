package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The inbox carries commands from processes that do not own the store
// (Client) to the one that does (its writer, running ServeInbox).
//
// Objects, under InboxOptions.Prefix (default "inbox"):
//
//	inbox/<id>          a command (JSON), written create-only by a Client;
//	                    <id> is a ULID, so a LIST returns commands oldest first
//	inbox-answers/<id>  its answer (JSON), written create-only by the
//	                    writer, read and deleted by the Client; the writer
//	                    sweeps abandoned ones after InboxOptions.AnswerTTL
//
// and, in the caller KV, workflow/inbox/<id>: the command's applied-marker
// while it is in flight.
//
// Recognition: the writer touches only what it can prove is the inbox's.
// A command is an object whose name is a command id and whose JSON
// carries "tqw":"inbox-command" and, as "id", its own name; an answer
// likewise carries "tqw":"inbox-answer" and its name. Anything else under
// the prefixes (a user's object, another component's) is left as it is
// and reported in a warning, once per object and hour; a command that is
// the inbox's but cannot be applied (unknown kind or format) is answered
// invalid_command. The namespaces of the inbox, the runtime and the
// components declared with WithStoreNamespaces are checked disjoint
// (CheckNamespaces) when the inbox is built.
//
// Invariants (each command is applied exactly once, even if the writer
// crashes anywhere while draining it):
//
//  1. The answer is the commit point: a command is answered only after its
//     effects are durable (the writer waits for every commit it made or
//     saw, kv Sync, before the answer's PUT), and a command that has an
//     answer is never applied again (the writer reads the answer before
//     anything else). The command object is deleted only after its answer
//     exists, the marker only after the command object is gone.
//  2. A command whose first attempt wrote nothing and was not answered may
//     be applied again: nothing observed the first attempt.
//  3. Signal is not idempotent, so its marker commits atomically with the
//     signal's buffer write (queue.KVApply, guarded by the marker's
//     absence), and the wake of a registered waiter commits atomically with
//     consuming that buffer entry and recording the outcome in the marker
//     (queue.WakeScheduledKV). A redrain that finds the marker never buffers
//     again; it resumes the delivery only while the buffer still holds this
//     very signal, so a signal is never delivered twice.
//  4. ClearSignal deletes the buffer and writes its marker in one commit.
//  5. Submit and Cancel are idempotent for a live incarnation of a run but
//     not across its end (a terminated run id is free again, so a repeated
//     Submit would start a second run and a repeated Cancel could cancel a
//     newer incarnation). Their marker records the run's incarnation
//     (active nonce, retained result nonce) seen before the first attempt;
//     it is committed before the command's own commit, which therefore makes
//     it durable. A redrain compares: an incarnation that appeared since was
//     started by this command, and Cancel is only repeated on the
//     incarnation it was meant for. With WithResultRetention(0) a run that
//     was submitted by the first attempt and terminated before the redrain
//     leaves no trace, and the redrain submits it again.
//  6. An uncertain answer (the last attempt failed after the command may
//     have taken effect) keeps the command object and its marker, and the
//     writer applies the command again at every pass: each attempt is a
//     continuation of the first through the marker (3, 5), so the command
//     takes effect at most once. The attempt that succeeds replaces the
//     uncertain answer (If-Match on its ETag) with the true outcome; the
//     Client waits for that one and never deletes an uncertain answer, so
//     it cannot delete an answer it has not read.

// DefaultInboxPrefix is the default object-key prefix of commands.
const DefaultInboxPrefix = "inbox"

// kvInbox holds the applied-markers of commands in flight.
const kvInbox = ReservedKVPrefix + "inbox/"

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

// foreignReportEvery is how often an object under the inbox's prefixes
// that is not the inbox's is reported again while it stays.
const foreignReportEvery = time.Hour

// maxForeignTracked bounds the foreign objects a writer remembers (not to
// read them again at every pass, and to report each once per
// foreignReportEvery); beyond it they are read at every pass.
const maxForeignTracked = 10000

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
	ErrNoAnswer = errors.New("runtime: no answer from the store's writer")
	// ErrInvalidCommand reports an inbox object the writer cannot decode
	// or apply as a command.
	ErrInvalidCommand = errors.New("runtime: invalid inbox command")
	// ErrCommandExpired reports a command the writer found after its
	// expiry (ClientOptions.CommandTTL); it was not applied.
	ErrCommandExpired = errors.New("runtime: inbox command expired before a writer applied it")
	// ErrOutcomeUncertain reports a command the writer could not finish
	// after it may have taken effect, and did not resolve before the
	// client's deadline. The command stays in the inbox; the writer
	// applies it at most once in all, when the store lets it.
	ErrOutcomeUncertain = errors.New("runtime: the writer could not tell whether the command was applied")
)

// errForeign marks an object under the inbox's prefixes that is not the
// inbox's (see Recognition above).
var errForeign = errors.New("not an inbox object")

// CommandKind names what an inbox command asks for.
type CommandKind string

// Command kinds.
const (
	CommandSubmit      CommandKind = "submit"
	CommandSignal      CommandKind = "signal"
	CommandClearSignal CommandKind = "clear_signal"
	CommandCancel      CommandKind = "cancel"
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
	KVWrites map[string][]byte `json:"kv_writes,omitempty"`
	// Signal, ClearSignal.
	Key     string `json:"key,omitempty"`
	Payload []byte `json:"payload,omitempty"`
	// RequireWaiting is SignalOptions.RequireWaiting.
	RequireWaiting bool `json:"require_waiting,omitempty"`
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
	// SignalExpires is SignalResult.Expires of a buffered signal.
	SignalExpires time.Time `json:"signal_expires,omitzero"`
	// OK is Cancel's and ClearSignal's boolean result.
	OK bool `json:"ok,omitempty"`
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
	// Submit, Cancel: the run's incarnation before the first attempt.
	Active string `msgpack:"a,omitempty"`
	Result string `msgpack:"r,omitempty"`
	// Signal: the buffer value the command wrote, and the outcome once
	// the delivery committed ("" while it has not).
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
	{"input_mismatch", ErrInputMismatch},
	{"run_not_found", ErrRunNotFound},
	{"reserved", ErrReserved},
	{"invalid_run_id", ErrInvalidRunID},
	{"invalid_signal_key", ErrInvalidSignalKey},
	{"signal_rejected", ErrSignalRejected},
	{"no_waiter", ErrNoWaiter},
	{"value_too_large", ErrValueTooLarge},
	{"invalid_key", ErrInvalidKey},
	{"invalid_command", ErrInvalidCommand},
	{"command_expired", ErrCommandExpired},
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
		return nil, fmt.Errorf("runtime: encode %s command: %w", c.Kind, err)
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
	case CommandSubmit, CommandCancel:
		if c.RunID == "" {
			return fmt.Errorf("%w: %s command %s without a run id", ErrInvalidCommand, c.Kind, c.ID)
		}
	case CommandSignal, CommandClearSignal:
	default:
		return fmt.Errorf("%w: unknown kind %q in command %s", ErrInvalidCommand, c.Kind, c.ID)
	}
	return nil
}

// decodeAnswer decodes and checks an answer object.
func decodeAnswer(b []byte) (*inboxAnswer, error) {
	var a inboxAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: answer: %w", ErrCorruptRecord, err)
	}
	if a.Magic != answerMagic {
		return nil, fmt.Errorf("%w: answer without the \"tqw\":%q field", ErrCorruptRecord, answerMagic)
	}
	if a.V != inboxFormat || a.ID == "" {
		return nil, fmt.Errorf("%w: answer of format %d for command %q", ErrCorruptRecord, a.V, a.ID)
	}
	return &a, nil
}

func decodeInboxMarker(b []byte) (*inboxMarker, error) {
	var m inboxMarker
	if err := decodeRecord("inbox marker", b, &m); err != nil {
		return nil, err
	}
	switch m.Kind {
	case CommandSubmit, CommandCancel, CommandSignal, CommandClearSignal:
		return &m, nil
	}
	return nil, fmt.Errorf("%w: inbox marker of kind %q", ErrCorruptRecord, m.Kind)
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

// InboxOptions configure ServeInbox and DrainInbox (writer side) and must
// agree with the ClientOptions.InboxPrefix of the clients.
//
// # Outcomes
//
// Every command is answered with exactly one of: its result (applied);
// a rejection naming a sentinel error ("input_mismatch", "run_not_found",
// "reserved", "invalid_run_id", "invalid_signal_key", "signal_rejected",
// "no_waiter", "value_too_large", "invalid_key", "invalid_command",
// "command_expired"), nothing applied;
// "internal", the writer gave up after MaxAttempts store errors before
// the command had started (no marker of it exists), nothing applied; or
// "uncertain", the writer gave up after the command may have taken effect
// (a commit whose durability is unknown, kv.ErrCommitUncertain, or an
// error after the command's first write). An uncertain command stays in
// the inbox with its marker and is applied again at every pass, each time
// as the continuation of its first attempt, so it takes effect at most
// once; the attempt that succeeds replaces the uncertain answer with the
// true outcome (the Client waits for it). A store error that stops the kv
// (fenced, stopped, closed) is never answered: the next writer applies
// the command.
//
// # Cost in object-store requests
//
// Polling is one LIST of <prefix>/ per interval, whether or not commands
// wait. The interval starts at MinInterval, doubles after every pass that
// found nothing up to MaxInterval, and drops back to MinInterval as soon
// as a pass finds a command. At the defaults an idle writer makes one LIST
// every 5 s: 17,280 LISTs a day, about $0.086 a day (≈ $2.60 a month) on
// S3 at $0.005 per 1,000 LIST requests; with the writer lease's renewals
// (17,280 PUTs a day at its 15 s TTL, about $0.086; see runtime/lease) an
// idle writer costs about $0.17 a day.
// MinInterval bounds the answer latency under load, MaxInterval when idle
// (a command sent to an idle writer waits up to MaxInterval).
//
// Per command the writer adds one GET of the answer (is it answered
// already?), one GET of the command, one PUT (the answer) and one DELETE,
// plus the command's own commits: a Submit one durable commit, a Signal
// one to buffer and one to wake a waiter, a Cancel what Runtime.Cancel
// costs, a ClearSignal one. A command answered uncertain costs that again
// at every pass until an attempt succeeds. An object under <prefix>/
// that is not a command costs one GET of the answer key and one of the
// object the first time a writer process lists it, then nothing (up to
// 10,000 of them; a name that is not a command id costs nothing). The
// answer sweep is one LIST of <prefix>-answers/ per SweepEvery (144 a day
// at the default 10 min) plus one GET (to prove it is an answer) and one
// DELETE per expired answer (clients delete the answers they read, so
// only abandoned ones are swept) and one HEAD per leftover marker (a
// crash between a command's deletion and its marker's).
type InboxOptions struct {
	// Prefix is the object-key prefix of commands (default "inbox");
	// answers live under Prefix + "-answers/". Both must be disjoint from
	// the runtime's other namespaces (Runtime.StoreNamespaces).
	Prefix string
	// MinInterval and MaxInterval bound the polling interval (defaults
	// 200 ms and 5 s).
	MinInterval, MaxInterval time.Duration
	// AnswerTTL is how long an unread answer is kept (default 1 h), judged
	// by the store's modification time against the writer's clock.
	AnswerTTL time.Duration
	// SweepEvery is how often abandoned answers and leftover markers are
	// swept (default 10 min; the first sweep runs at start).
	SweepEvery time.Duration
	// PageSize is how many commands one LIST returns (default 100); a
	// full page is followed by the next at once.
	PageSize int
	// MaxAttempts is how many passes a command that fails with a store
	// error is retried before it is answered internal or uncertain
	// (default 5).
	MaxAttempts int
	// ApplyTimeout bounds one attempt at one command, its commits
	// becoming durable included (default 30 s): a store that cannot take
	// a commit for that long fails the attempt instead of holding up the
	// inbox.
	ApplyTimeout time.Duration
	// Writer identifies this writer in answers (e.g. the writer lease's
	// owner).
	Writer string
	// Clock times polling and the sweep (default the runtime's clock).
	Clock queue.Clock
}

func (o InboxOptions) withDefaults(rt *Runtime) (InboxOptions, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultInboxPrefix
	}
	if err := objstore.ValidateKey(o.Prefix); err != nil {
		return o, fmt.Errorf("runtime: inbox prefix: %w", err)
	}
	if o.MinInterval == 0 {
		o.MinInterval = 200 * time.Millisecond
	}
	if o.MaxInterval == 0 {
		o.MaxInterval = 5 * time.Second
	}
	if o.AnswerTTL == 0 {
		o.AnswerTTL = time.Hour
	}
	if o.SweepEvery == 0 {
		o.SweepEvery = 10 * time.Minute
	}
	if o.PageSize <= 0 || o.PageSize > 1000 {
		o.PageSize = 100
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.ApplyTimeout == 0 {
		o.ApplyTimeout = 30 * time.Second
	}
	if o.MinInterval < 0 || o.MaxInterval < o.MinInterval || o.AnswerTTL < 0 || o.SweepEvery < 0 || o.ApplyTimeout < 0 {
		return o, fmt.Errorf("runtime: inbox intervals min %v max %v, answer TTL %v, sweep every %v, apply timeout %v: want 0 < min <= max and positive durations",
			o.MinInterval, o.MaxInterval, o.AnswerTTL, o.SweepEvery, o.ApplyTimeout)
	}
	if o.Clock == nil {
		o.Clock = rt.clock
	}
	return o, nil
}

// inbox is the writer side of one inbox.
type inbox struct {
	rt        *Runtime
	opts      InboxOptions
	cmdPrefix string // "inbox/"
	ansPrefix string // "inbox-answers/"
	failures  map[string]int
	lastSweep time.Time
	swept     bool
	// lastTry is set while a command has its last attempt before a store
	// error is answered.
	lastTry bool
	// foreign remembers objects found not to be the inbox's, by key;
	// gen tells those seen in the current listing from the rest.
	foreign       map[string]foreignObject
	gen           uint64
	overflowNoted time.Time
}

// foreignObject is an object under the inbox's prefixes that is not the
// inbox's: it is not read again while its ETag stays, and reported again
// only after foreignReportEvery.
type foreignObject struct {
	etag, why string
	reported  time.Time
	gen       uint64
}

func (rt *Runtime) newInbox(opts InboxOptions) (*inbox, error) {
	opts, err := opts.withDefaults(rt)
	if err != nil {
		return nil, err
	}
	if err := CheckNamespaces(append(rt.StoreNamespaces(), inboxNamespaces(opts.Prefix, "InboxOptions.Prefix")...)...); err != nil {
		return nil, err
	}
	return &inbox{rt: rt, opts: opts, cmdPrefix: opts.Prefix + "/", ansPrefix: opts.Prefix + "-answers/",
		failures: map[string]int{}, foreign: map[string]foreignObject{}}, nil
}

// ServeInbox drains the inbox until ctx is done, applying each command
// exactly once and answering it (see InboxOptions for the outcomes, the
// polling and its cost). Run it on the writer alongside Run. It returns
// nil when ctx ends, or the error that makes writing impossible (the
// queue closed or fenced); other store errors are logged and retried at
// the next pass. It refuses an inbox whose prefixes overlap another
// namespace of the store (ErrNamespaceOverlap) and leaves every object
// under them that is not the inbox's as it is.
func (rt *Runtime) ServeInbox(ctx context.Context, opts InboxOptions) error {
	ib, err := rt.newInbox(opts)
	if err != nil {
		return err
	}
	return ib.serve(ctx)
}

// DrainInbox runs one pass over the inbox: every command waiting is
// applied and answered. It returns how many commands it handled (objects
// that are not commands, and retries of commands answered uncertain that
// failed again, are not counted). It does not sweep answers.
func (rt *Runtime) DrainInbox(ctx context.Context, opts InboxOptions) (int, error) {
	ib, err := rt.newInbox(opts)
	if err != nil {
		return 0, err
	}
	return ib.drain(ctx)
}

func (ib *inbox) serve(ctx context.Context) error {
	interval := ib.opts.MinInterval
	for {
		n, err := ib.drain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if fatalQueueError(err) {
				return fmt.Errorf("runtime: inbox: %w", err)
			}
			ib.rt.log.Warn("inbox pass failed; retrying", "err", err)
		}
		if now := ib.opts.Clock.Now(); !ib.swept || now.Sub(ib.lastSweep) >= ib.opts.SweepEvery {
			if err := ib.sweep(ctx); err != nil {
				if fatalQueueError(err) {
					return fmt.Errorf("runtime: inbox sweep: %w", err)
				}
				ib.rt.log.Warn("inbox sweep failed", "err", err)
			}
			ib.swept, ib.lastSweep = true, now
		}
		if n > 0 {
			interval = ib.opts.MinInterval
		} else {
			interval = min(2*interval, ib.opts.MaxInterval)
		}
		if !sleepClock(ctx, ib.opts.Clock, interval) {
			return nil
		}
	}
}

// drain lists the inbox and handles every command, oldest first. A
// command that fails with a store error is left for the next pass; the
// first such error is returned after the others were handled.
func (ib *inbox) drain(ctx context.Context) (int, error) {
	n, after := 0, ""
	ib.gen++
	var first error
	for {
		page, err := ib.rt.store.List(ctx, ib.cmdPrefix, after, ib.opts.PageSize)
		if err != nil {
			return n, fmt.Errorf("runtime: list the inbox %s: %w", ib.cmdPrefix, err)
		}
		for _, o := range page {
			after = o.Key
			counted, err := ib.handle(ctx, o)
			if err != nil {
				if fatalQueueError(err) || ctx.Err() != nil {
					return n, err
				}
				ib.rt.log.Warn("inbox command failed; retrying at the next pass", "key", o.Key, "err", err)
				if first == nil {
					first = err
				}
			}
			if counted {
				n++
			}
		}
		if len(page) < ib.opts.PageSize {
			ib.forgetForeign(ib.cmdPrefix)
			return n, first
		}
	}
}

// handle applies and answers the command at o (invariant 1). It reports
// whether o was a command that needed work, for the polling interval.
func (ib *inbox) handle(ctx context.Context, o objstore.ObjectInfo) (bool, error) {
	store := ib.rt.store
	id := strings.TrimPrefix(o.Key, ib.cmdPrefix)
	if err := validCommandID(id); err != nil {
		ib.reportForeign(o, "its name is not a command id")
		return false, nil
	}
	if o.Size > maxCommandSize {
		ib.reportForeign(o, fmt.Sprintf("%d bytes, more than any command", o.Size))
		return false, nil
	}
	if ib.knownForeign(o) {
		return false, nil
	}
	ansKey := ib.ansPrefix + id
	prev, prevInfo, err := ib.readAnswer(ctx, ansKey, id)
	switch {
	case errors.Is(err, errForeign):
		// Neither can be proved the inbox's while a foreign object holds
		// the answer's name: leave both.
		ib.reportForeign(o, "its answer's name is taken by an object that is not an answer ("+err.Error()+")")
		return false, nil
	case err != nil:
		return false, err
	case prev != nil && prev.Code != codeUncertain:
		return true, ib.finish(ctx, o.Key, id)
	}
	// Not answered, or answered uncertain: (re)apply (invariant 6).
	b, _, err := store.Get(ctx, o.Key)
	if errors.Is(err, objstore.ErrNotExist) {
		return true, nil // withdrawn meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("runtime: inbox: read %s: %w", o.Key, err)
	}
	cmd, err := parseCommand(b)
	if err == nil && cmd.ID != id {
		err = fmt.Errorf("%w: it holds command %q", errForeign, cmd.ID)
	}
	if err != nil {
		ib.reportForeign(o, err.Error())
		return false, nil
	}
	// Apply nothing while the writer lease is not valid.
	if err := ib.rt.awaitLease(ctx); err != nil {
		return false, err
	}
	ib.lastTry = ib.failures[id]+1 >= ib.opts.MaxAttempts
	actx, cancel := context.WithTimeout(ctx, ib.opts.ApplyTimeout)
	ans, err := ib.apply(actx, cmd)
	if err == nil {
		// The answer reports what is durable only: this attempt's commits
		// and those of an earlier one it found visible but not durable.
		if serr := ib.rt.q.DB().Sync(actx); serr != nil {
			err = fmt.Errorf("runtime: inbox: make the effects of command %s durable: %w", id, serr)
		}
	}
	cancel()
	if err != nil {
		ib.failures[id]++
		if prev != nil {
			// Answered uncertain already: retried at every pass until
			// it resolves, without holding the polling interval down.
			return false, err
		}
		if !ib.lastTry || fatalQueueError(err) || ctx.Err() != nil {
			return true, err
		}
		if ans, err = ib.giveUp(ctx, cmd, err); err != nil {
			return true, err
		}
	}
	delete(ib.failures, id)
	ans.V, ans.ID, ans.Kind, ans.Writer, ans.AppliedAt = inboxFormat, id, cmd.Kind, ib.opts.Writer, ib.opts.Clock.Now()
	ab, err := json.Marshal(ans)
	if err != nil {
		return true, fmt.Errorf("runtime: inbox: encode the answer to %s: %w", id, err)
	}
	// Create-only, or replacing exactly the uncertain answer read: an
	// object already there is an earlier answer whose PUT response was
	// lost, or not the inbox's; the next pass reads it.
	put := objstore.CreateOnly()
	if prev != nil {
		put = objstore.IfMatch(prevInfo.ETag)
	}
	if _, err := store.Put(ctx, ansKey, ab, put); err != nil {
		return true, fmt.Errorf("runtime: inbox: write the answer %s: %w", ansKey, err)
	}
	if ans.Code == codeUncertain {
		ib.rt.log.Warn("inbox command may have been applied; answered uncertain, kept and retried at every pass until it resolves",
			"key", o.Key, "kind", cmd.Kind, "err", ans.Error)
		return true, nil
	}
	return true, ib.finish(ctx, o.Key, id)
}

// readAnswer returns the answer at key, nil when there is none, or an
// error wrapping errForeign when the object there is not an answer to id.
func (ib *inbox) readAnswer(ctx context.Context, key, id string) (*inboxAnswer, objstore.ObjectInfo, error) {
	b, info, err := ib.rt.store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, info, nil
	}
	if err != nil {
		return nil, info, fmt.Errorf("runtime: inbox: check the answer %s: %w", key, err)
	}
	a, err := decodeAnswer(b)
	if err == nil && a.ID != id {
		err = fmt.Errorf("it answers command %q", a.ID)
	}
	if err != nil {
		return nil, info, fmt.Errorf("%w: %s: %w", errForeign, key, err)
	}
	return a, info, nil
}

// giveUp answers a command whose last attempt failed with a store error:
// uncertain when the command may have taken effect (a commit of unknown
// durability, or its marker exists: its writes had begun), internal when
// it had not started.
func (ib *inbox) giveUp(ctx context.Context, cmd *inboxCommand, cause error) (*inboxAnswer, error) {
	began := errors.Is(cause, kv.ErrCommitUncertain)
	if !began {
		m, err := ib.marker(ctx, cmd.ID)
		if err != nil && !errors.Is(err, ErrCorruptRecord) {
			return nil, err
		}
		// An undecodable marker is no sign of this command: it is
		// reported as the internal error it caused.
		began = m != nil
	}
	if !began {
		return reject(&inboxAnswer{}, cause), nil
	}
	return &inboxAnswer{Code: codeUncertain, Error: fmt.Sprintf("attempt %d of %d failed after the command may have been applied: %v", ib.opts.MaxAttempts, ib.opts.MaxAttempts, cause)}, nil
}

// knownForeign reports whether o was found not to be the inbox's and has
// not changed since, reporting it again when it is time.
func (ib *inbox) knownForeign(o objstore.ObjectInfo) bool {
	f, ok := ib.foreign[o.Key]
	if !ok || f.etag != o.ETag {
		return false
	}
	ib.reportForeign(o, f.why)
	return true
}

// reportForeign warns about an object under the inbox's prefixes that is
// not the inbox's, at most once per foreignReportEvery, and remembers it.
func (ib *inbox) reportForeign(o objstore.ObjectInfo, why string) {
	now := ib.opts.Clock.Now()
	f, seen := ib.foreign[o.Key]
	if seen && f.etag == o.ETag && now.Sub(f.reported) < foreignReportEvery {
		f.gen = ib.gen
		ib.foreign[o.Key] = f
		return
	}
	if !seen && len(ib.foreign) >= maxForeignTracked {
		if now.Sub(ib.overflowNoted) >= foreignReportEvery {
			ib.overflowNoted = now
			ib.rt.log.Warn("more objects that are not inbox commands or answers than the writer tracks; they are left in place and read again at every pass",
				"tracked", len(ib.foreign), "key", o.Key, "why", why)
		}
		return
	}
	ib.rt.log.Warn("leaving an object in place: not an inbox command or answer, so this writer neither applies nor deletes it",
		"key", o.Key, "size", o.Size, "why", why)
	ib.foreign[o.Key] = foreignObject{etag: o.ETag, why: why, reported: now, gen: ib.gen}
}

// forgetForeign drops the remembered objects under prefix that the
// listing just completed did not show.
func (ib *inbox) forgetForeign(prefix string) {
	for k, f := range ib.foreign {
		if f.gen != ib.gen && strings.HasPrefix(k, prefix) {
			delete(ib.foreign, k)
		}
	}
}

// finish removes an answered command, then its marker.
func (ib *inbox) finish(ctx context.Context, key, id string) error {
	if err := ib.rt.store.Delete(ctx, key); err != nil {
		return fmt.Errorf("runtime: inbox: delete the answered command %s: %w", key, err)
	}
	if _, err := ib.rt.q.KVApply(ctx, queue.KVBatch{Deletes: []string{inboxMarkerKey(id)}, NonDurable: true}); err != nil {
		return fmt.Errorf("runtime: inbox: drop the marker of %s: %w", id, err)
	}
	return nil
}

// apply checks and applies one command. A returned error is a store
// error (retry); a rejection is an answer with Code set.
func (ib *inbox) apply(ctx context.Context, cmd *inboxCommand) (*inboxAnswer, error) {
	if err := cmd.validate(); err != nil {
		return reject(&inboxAnswer{}, err), nil
	}
	id := cmd.ID
	ans := &inboxAnswer{Kind: cmd.Kind}
	m, err := ib.marker(ctx, id)
	if err != nil {
		return ans, err
	}
	if m == nil && !cmd.Expires.IsZero() && !ib.opts.Clock.Now().Before(cmd.Expires) {
		return reject(ans, fmt.Errorf("%w: command %s from %s expired at %s", ErrCommandExpired, id, cmd.Client, cmd.Expires.UTC().Format(time.RFC3339))), nil
	}
	switch cmd.Kind {
	case CommandSubmit:
		err = ib.submit(ctx, cmd, m, ans)
	case CommandCancel:
		err = ib.cancel(ctx, cmd, m, ans)
	case CommandSignal:
		err = ib.signal(ctx, cmd, m, ans)
	case CommandClearSignal:
		err = ib.clearSignal(ctx, cmd, m, ans)
	}
	if err != nil && codeOf(err) != "" {
		return reject(ans, err), nil
	}
	return ans, err
}

func reject(ans *inboxAnswer, err error) *inboxAnswer {
	ans.Code, ans.Error = codeOf(err), err.Error()
	if ans.Code == "" {
		ans.Code = codeInternal
	}
	return ans
}

func (ib *inbox) marker(ctx context.Context, id string) (*inboxMarker, error) {
	b, err := kvGet(ctx, ib.rt.q, inboxMarkerKey(id))
	if err != nil || b == nil {
		return nil, err
	}
	return decodeInboxMarker(b)
}

func (ib *inbox) putMarker(ctx context.Context, id string, m *inboxMarker) error {
	m.AtMs = ib.rt.clock.Now().UnixMilli()
	b, err := encodeRecord(m)
	if err != nil {
		return err
	}
	// Non-durable: the command's own durable commit, which follows,
	// makes it durable (commits are durable in order).
	if _, err := ib.rt.q.KVApply(ctx, queue.KVBatch{Puts: []queue.KVWrite{{Key: inboxMarkerKey(id), Value: b}}, NonDurable: true}); err != nil {
		return fmt.Errorf("runtime: inbox: record the marker of %s: %w", id, err)
	}
	return nil
}

// incarnation returns the nonce of runID's active run and of its retained
// result record ("" for none).
func (rt *Runtime) incarnation(ctx context.Context, runID string) (active, result string, err error) {
	rec, err := loadRun(ctx, rt.q, runID)
	if err != nil {
		return "", "", err
	}
	if rec != nil {
		active = rec.Nonce
	}
	b, err := kvGet(ctx, rt.q, resultKey(runID))
	if err != nil || b == nil {
		return active, "", err
	}
	r, err := decodeResultRecord(b)
	if err != nil {
		return "", "", fmt.Errorf("run %s: %w", runID, err)
	}
	return active, r.Nonce, nil
}

// submit applies a Submit command (invariant 5).
func (ib *inbox) submit(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	rt := ib.rt
	if err := ValidateRunID(cmd.RunID); err != nil {
		return err
	}
	spec := RunSpec{RunID: cmd.RunID, Input: cmd.Input, Headers: cmd.Headers, KVWrites: cmd.KVWrites}
	active, result, err := rt.incarnation(ctx, cmd.RunID)
	if err != nil {
		return err
	}
	ans.RunID = cmd.RunID
	newly := false
	switch {
	case m == nil && active == "" && result != "":
		// The run ended and its result is retained: this command arrives
		// late (its sender died before the writer applied it, and the run
		// was submitted again meanwhile, as `tqw-dsl run` does when it
		// resumes). A submission is idempotent while the run's result is
		// retained, not only while it is active: starting it again would
		// run its steps twice.
		ans.NewlySubmitted = false
		return nil
	case m == nil:
		if err := ib.putMarker(ctx, cmd.ID, &inboxMarker{Kind: CommandSubmit, Active: active, Result: result}); err != nil {
			return err
		}
	case active != "" && active != m.Active:
		newly = true // the first attempt started this incarnation
	case active == "" && result != "" && result != m.Result:
		// An incarnation ended since the first attempt: the one that was
		// active then (a duplicate), or the one the attempt started.
		ans.NewlySubmitted = result != m.Active
		return nil
	}
	out, err := rt.Submit(ctx, spec)
	if err != nil {
		return err
	}
	ans.RunID, ans.JobID, ans.NewlySubmitted = out.RunID, out.JobID, out.NewlySubmitted || newly
	return nil
}

// cancel applies a Cancel command (invariant 5).
func (ib *inbox) cancel(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	rt := ib.rt
	if err := ValidateRunID(cmd.RunID); err != nil {
		return err
	}
	ans.RunID = cmd.RunID
	active, _, err := rt.incarnation(ctx, cmd.RunID)
	if err != nil {
		return err
	}
	if m == nil {
		if active == "" {
			return nil // no run to cancel: false, nothing written
		}
		if err := ib.putMarker(ctx, cmd.ID, &inboxMarker{Kind: CommandCancel, Active: active}); err != nil {
			return err
		}
	} else if active != m.Active {
		// The incarnation this command meant ended since the first
		// attempt; never cancel a newer one.
		ans.OK, err = rt.endedCancelled(ctx, cmd.RunID, m.Active)
		return err
	}
	ans.OK, err = rt.Cancel(ctx, cmd.RunID)
	return err
}

// signal applies a Signal command (invariant 3). The checks of
// SendSignal (RequireWaiting, the SignalValidator) run before the first
// attempt writes anything; a continuation skips them, the signal having
// been accepted.
func (ib *inbox) signal(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	rt, q := ib.rt, ib.rt.q
	if err := validateSignalKey(cmd.Key); err != nil {
		return err
	}
	if len(cmd.Payload) > MaxSignalPayload {
		return fmt.Errorf("runtime: signal %q: %w: payload of %d bytes, the limit is %d", cmd.Key, ErrValueTooLarge, len(cmd.Payload), MaxSignalPayload)
	}
	mk, bufKey := inboxMarkerKey(cmd.ID), sigBufKey(cmd.Key)
	defer func() {
		if ans.Signal == Buffered.String() && m != nil {
			ans.SignalExpires = rt.signalExpiry(m.Buf)
		}
	}()
	if m == nil {
		if err := rt.admitSignal(ctx, cmd.Key, cmd.Payload, SignalOptions{RequireWaiting: cmd.RequireWaiting}); err != nil {
			return err
		}
		buf := encodeBufferedSignal(cmd.Payload, rt.clock.Now())
		m = &inboxMarker{Kind: CommandSignal, Buf: buf, AtMs: rt.clock.Now().UnixMilli()}
		mb, err := encodeRecord(m)
		if err != nil {
			return err
		}
		ok, err := q.KVApply(ctx, queue.KVBatch{
			Expect: []queue.KVWrite{{Key: mk}},
			Puts:   []queue.KVWrite{{Key: bufKey, Value: buf}, {Key: mk, Value: mb}},
		})
		if err != nil {
			return fmt.Errorf("runtime: signal %q: buffer: %w", cmd.Key, err)
		}
		if !ok {
			// Only another drainer of this store could have written the
			// marker; follow its record.
			if m, err = ib.marker(ctx, cmd.ID); err != nil || m == nil {
				return fmt.Errorf("runtime: signal command %s: marker vanished: %w", cmd.ID, err)
			}
		}
	}
	if m.Outcome != "" {
		ans.Signal = m.Outcome
		return nil
	}
	cur, err := kvGet(ctx, q, bufKey)
	if err != nil {
		return err
	}
	if !bytes.Equal(cur, m.Buf) {
		// Consumed by a registering waiter (or cleared) since the buffer
		// write, or replaced by a later signal: never buffer again.
		ans.Signal = outcomeOfBuffer(cur).String()
		return nil
	}
	out, err := ib.deliver(ctx, cmd, m)
	if err != nil && (!ib.lastTry || errors.Is(err, kv.ErrCommitUncertain)) {
		// Retry the wake at the next pass; a wake that may have been
		// applied is never reported as buffered.
		return err
	}
	if err != nil {
		// The signal is durably buffered: a waiter consumes it at its
		// registration or its timeout, as with Runtime.Signal.
		ib.rt.log.Warn("signal buffered; waking its waiter failed", "key", cmd.Key, "err", err)
	}
	ans.Signal = out.String()
	return nil
}

// outcomeOfBuffer is the outcome reported once the buffer no longer holds
// a command's signal: consumed (empty) counts as delivered, as in Signal.
func outcomeOfBuffer(cur []byte) SignalOutcome {
	if cur == nil {
		return Delivered
	}
	return Buffered
}

// deliver wakes the waiter registered for the signal's key, consuming the
// buffer entry and recording the outcome in the marker in the same commit.
func (ib *inbox) deliver(ctx context.Context, cmd *inboxCommand, m *inboxMarker) (SignalOutcome, error) {
	rt, q := ib.rt, ib.rt.q
	mk, bufKey, waitKey := inboxMarkerKey(cmd.ID), sigBufKey(cmd.Key), sigWaitKey(cmd.Key)
	waiter, err := kvGet(ctx, q, waitKey)
	if err != nil || waiter == nil {
		return Buffered, err
	}
	done := *m
	done.Outcome = Delivered.String()
	mb, err := encodeRecord(&done)
	if err != nil {
		return Buffered, err
	}
	res, err := q.WakeScheduledKV(ctx, string(waiter), cmd.Payload, queue.KVBatch{
		Expect:  []queue.KVWrite{{Key: bufKey, Value: m.Buf}},
		Puts:    []queue.KVWrite{{Key: mk, Value: mb}},
		Deletes: []string{bufKey},
	})
	if err != nil {
		return Buffered, fmt.Errorf("runtime: signal %q: wake job %s: %w", cmd.Key, waiter, err)
	}
	switch res {
	case queue.Woken:
		rt.compareAndDelete(ctx, waitKey, waiter)
		return Delivered, nil
	case queue.WakeConditionFailed:
		cur, err := kvGet(ctx, q, bufKey)
		return outcomeOfBuffer(cur), err
	}
	// A stale index entry: the waiter's timeout fired or its run ended.
	// The signal stays buffered for the next waiter.
	rt.compareAndDelete(ctx, waitKey, waiter)
	return Buffered, nil
}

// clearSignal applies a ClearSignal command (invariant 4).
func (ib *inbox) clearSignal(ctx context.Context, cmd *inboxCommand, m *inboxMarker, ans *inboxAnswer) error {
	if err := validateSignalKey(cmd.Key); err != nil {
		return err
	}
	if m != nil {
		ans.OK = m.Cleared
		return nil
	}
	q, mk, bufKey := ib.rt.q, inboxMarkerKey(cmd.ID), sigBufKey(cmd.Key)
	mb, err := encodeRecord(&inboxMarker{Kind: CommandClearSignal, Cleared: true, AtMs: ib.rt.clock.Now().UnixMilli()})
	if err != nil {
		return err
	}
	for {
		cur, err := kvGet(ctx, q, bufKey)
		if err != nil || cur == nil {
			return err // nothing buffered: false, nothing written
		}
		ok, err := q.KVApply(ctx, queue.KVBatch{
			Expect:  []queue.KVWrite{{Key: bufKey, Value: cur}, {Key: mk}},
			Puts:    []queue.KVWrite{{Key: mk, Value: mb}},
			Deletes: []string{bufKey},
		})
		if err != nil {
			return fmt.Errorf("runtime: clear signal %q: %w", cmd.Key, err)
		}
		if ok {
			ans.OK = true
			return nil
		}
		// The buffer changed, or another drainer of this store applied
		// the command meanwhile: follow its marker if there is one.
		if m, err := ib.marker(ctx, cmd.ID); err != nil || m != nil {
			if m != nil {
				ans.OK = m.Cleared
			}
			return err
		}
	}
}

// sweep deletes answers older than AnswerTTL and markers whose command is
// gone (left by a crash between the two deletions of finish). An object
// under the answers' prefix that is not an answer is left in place.
func (ib *inbox) sweep(ctx context.Context) error {
	store := ib.rt.store
	cutoff := ib.opts.Clock.Now().Add(-ib.opts.AnswerTTL)
	ib.gen++
	after := ""
	for {
		page, err := store.List(ctx, ib.ansPrefix, after, 1000)
		if err != nil {
			return fmt.Errorf("runtime: inbox sweep: list %s: %w", ib.ansPrefix, err)
		}
		for _, o := range page {
			after = o.Key
			if !o.ModTime.Before(cutoff) {
				continue
			}
			id := strings.TrimPrefix(o.Key, ib.ansPrefix)
			if err := validCommandID(id); err != nil {
				ib.reportForeign(o, "its name is not a command id")
				continue
			}
			if ib.knownForeign(o) {
				continue
			}
			if _, _, err := ib.readAnswer(ctx, o.Key, id); errors.Is(err, errForeign) {
				ib.reportForeign(o, err.Error())
				continue
			} else if err != nil {
				return fmt.Errorf("runtime: inbox sweep: %w", err)
			}
			if err := store.Delete(ctx, o.Key); err != nil {
				return fmt.Errorf("runtime: inbox sweep: delete %s: %w", o.Key, err)
			}
		}
		if len(page) < 1000 {
			ib.forgetForeign(ib.ansPrefix)
			break
		}
	}
	after = ""
	for {
		page, err := ib.rt.q.KVScan(ctx, kvInbox, after, 1000)
		if err != nil {
			return fmt.Errorf("runtime: inbox sweep: scan markers: %w", err)
		}
		for _, e := range page {
			after = e.Key
			id := strings.TrimPrefix(e.Key, kvInbox)
			if _, err := store.Head(ctx, ib.cmdPrefix+id); errors.Is(err, objstore.ErrNotExist) {
				if _, err := ib.rt.q.KVApply(ctx, queue.KVBatch{Deletes: []string{e.Key}, NonDurable: true}); err != nil {
					return fmt.Errorf("runtime: inbox sweep: drop marker %s: %w", id, err)
				}
			} else if err != nil {
				return fmt.Errorf("runtime: inbox sweep: check command %s: %w", id, err)
			}
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

// InboxWaiting reports whether a command waits in the inbox that the
// inbox server would apply (objects that are not commands are ignored,
// as the server ignores them). It writes nothing. Cost: one LIST per
// 1,000 objects under the prefix and one GET per object named like a
// command.
func (rt *Runtime) InboxWaiting(ctx context.Context, opts InboxOptions) (bool, error) {
	o, err := opts.withDefaults(rt)
	if err != nil {
		return false, err
	}
	after := ""
	for {
		page, err := rt.store.List(ctx, o.Prefix+"/", after, 1000)
		if err != nil {
			return false, fmt.Errorf("runtime: inbox: list %s/: %w", o.Prefix, err)
		}
		for _, obj := range page {
			if validCommandID(strings.TrimPrefix(obj.Key, o.Prefix+"/")) != nil {
				continue
			}
			b, _, err := rt.store.Get(ctx, obj.Key)
			if errors.Is(err, objstore.ErrNotExist) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("runtime: inbox: read %s: %w", obj.Key, err)
			}
			if _, err := parseCommand(b); err == nil {
				return true, nil
			}
		}
		if len(page) < 1000 {
			return false, nil
		}
		after = page[len(page)-1].Key
	}
}
