package remote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/signal"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/lease"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// defaultQueuePrefix is queue.Options' default Prefix.
const defaultQueuePrefix = "queue"

// ClientOptions configure NewClient. The zero value is usable against a
// writer with default queue and inbox options.
type ClientOptions struct {
	// Queue are the options of the queue.Reader Status and ListRuns read
	// through; Queue.Prefix must be the writer's.
	Queue queue.Options
	// InboxPrefix must match the writer's InboxOptions.Prefix (default
	// "inbox"); it must be disjoint from Queue.Prefix and the writer
	// lease's key (objstore.ErrNamespaceOverlap).
	InboxPrefix string
	// PollMin and PollMax bound the wait between two reads of a
	// command's answer (defaults 100 ms and 1 s). It stays PollMin for
	// the first PollFastFor of the wait, then doubles after every miss.
	PollMin, PollMax time.Duration
	// PollFastFor is how long after sending a command its answer is read
	// every PollMin (default 2 s; negative: doubling from the first
	// miss). On a local file store, where the Client is woken as soon as
	// the answer is written, the wait doubles from the first miss.
	PollFastFor time.Duration
	// NoNotify makes the Client poll for answers on a local file store as
	// on any other, without change notification.
	NoNotify bool
	// RingBell makes the Client overwrite the inbox's doorbell object
	// (<InboxPrefix>-bell) after each command it sends, one PUT more per
	// command, so that a writer polling the doorbell (InboxOptions.BellEvery)
	// applies the command within BellEvery instead of at its next LIST of
	// the inbox, up to InboxOptions.MaxInterval later. A writer woken by
	// change notification (a local file store) needs no ring.
	RingBell bool
	// AnswerTimeout bounds the wait for a command's outcome, the
	// resolution of an uncertain answer included, when ctx has no earlier
	// deadline (default 30 s).
	AnswerTimeout time.Duration
	// CommandTTL makes a writer that finds a command later than this
	// after it was sent reject it with ErrCommandExpired instead of
	// applying it (default 0: commands never expire, so a command sent
	// while no writer runs is applied when one starts). The expiry is
	// stamped with this client's clock and judged by the writer's, so
	// keep it well above their skew.
	CommandTTL time.Duration
	// Name describes this client in commands, for the writer's logs
	// (default "remote.Client"); the host and pid are added.
	Name string
	// Lease locates the writer lease, to say in ErrNoAnswer whether a
	// live writer exists.
	Lease lease.Options
	// Clock times polling and timestamps commands (default the system
	// clock).
	Clock clock.Clock
	// Entropy feeds command and run ids (default a monotonic source
	// seeded from crypto/rand).
	Entropy io.Reader
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Client controls runs in a store another process owns: Submit, Signal,
// ClearSignal and Cancel become command objects in the store's inbox that
// the writer (ServeInbox) applies exactly once and answers;
// Status, ListRuns and ListSignals read the durable state through a
// queue.Reader. A Client never opens the store as a writer, so it never
// fences the worker. It is safe for concurrent use.
//
// # Outcomes
//
// A command returns its result when the writer applied it; a
// *CommandError matching the writer's sentinel (runtime.ErrInputMismatch,
// runstate.ErrInvalidRunID, ..., Code "input_mismatch", ...) when the
// writer rejected it, nothing applied; a *CommandError with Code
// "internal" when the writer gave up on
// store errors before the command had started, nothing applied; and an
// error wrapping ErrNoAnswer when no answer came before the deadline (the
// command stays in the inbox and is applied when a writer drains it).
//
// A writer that gave up on store errors after the command may have taken
// effect answers "uncertain", which the Client never returns: the writer
// keeps the command and applies it again under the same command id, as
// the continuation of its first attempt (through the command's
// applied-marker), until an attempt succeeds and replaces the answer with
// the true outcome, which the Client waits for. The command takes effect
// at most once in all: Signal never delivers twice, Cancel never cancels
// a newer run under the same id, Submit starts at most one run (it is
// idempotent on run id and input anyway). If the true outcome does not
// come before the deadline, the error wraps both ErrOutcomeUncertain and
// ErrNoAnswer; the writer goes on resolving the command.
//
// Cost per command: one create-only PUT, one PUT of the doorbell with
// RingBell, one GET per poll of the answer (every PollMin for PollFastFor,
// then doubling to PollMax: at the defaults one per 100 ms of waiting for
// 2 s, then one per second; on a local file store, woken when the answer
// is written, PollMin doubling from the start) and one DELETE of the
// answer once read; an uncertain answer only prolongs the polling. The writer's side is described at
// InboxOptions. Status and ListRuns cost a Reader Refresh
// (one GET of the kv manifest plus one GET per WAL object written since
// the last Refresh) and no request for the reads themselves.
type Client struct {
	store     objstore.Store
	opts      ClientOptions
	log       *slog.Logger
	cmdPrefix string
	ansPrefix string
	sender    string

	idMu    sync.Mutex
	entropy io.Reader

	// readMu serializes the Reader: opened on first use, refreshed
	// before every read.
	readMu sync.Mutex
	reader *queue.Reader
	insp   *runtime.Inspector
	closed bool
}

// NewClient returns a client of the store. It makes no request; the
// Reader is opened by the first Status or ListRuns.
func NewClient(store objstore.Store, opts ClientOptions) (*Client, error) {
	if store == nil {
		return nil, errors.New("remote: NewClient needs an object store")
	}
	if opts.InboxPrefix == "" {
		opts.InboxPrefix = DefaultInboxPrefix
	}
	if err := objstore.ValidateKey(opts.InboxPrefix); err != nil {
		return nil, fmt.Errorf("remote: client inbox prefix: %w", err)
	}
	queuePrefix, leaseKey := opts.Queue.Prefix, opts.Lease.Key
	if queuePrefix == "" {
		queuePrefix = defaultQueuePrefix
	}
	if leaseKey == "" {
		leaseKey = lease.DefaultKey
	}
	spaces := append(inboxNamespaces(opts.InboxPrefix, "ClientOptions.InboxPrefix"),
		objstore.Namespace{Owner: "the queue's kv store, ClientOptions.Queue.Prefix", Prefix: queuePrefix},
		objstore.Namespace{Owner: "the writer lease object, ClientOptions.Lease.Key", Key: leaseKey})
	if err := objstore.CheckNamespaces(spaces...); err != nil {
		return nil, err
	}
	if opts.PollMin == 0 {
		opts.PollMin = 100 * time.Millisecond
	}
	if opts.PollMax == 0 {
		opts.PollMax = time.Second
	}
	if opts.PollFastFor == 0 {
		opts.PollFastFor = 2 * time.Second
	}
	if opts.AnswerTimeout == 0 {
		opts.AnswerTimeout = 30 * time.Second
	}
	if opts.PollMin < 0 || opts.PollMax < opts.PollMin || opts.AnswerTimeout < 0 || opts.CommandTTL < 0 {
		return nil, fmt.Errorf("remote: client poll %v..%v, answer timeout %v, command TTL %v: want 0 < PollMin <= PollMax and no negative duration",
			opts.PollMin, opts.PollMax, opts.AnswerTimeout, opts.CommandTTL)
	}
	if opts.Name == "" {
		opts.Name = "remote.Client"
	}
	if opts.Clock == nil {
		opts.Clock = clock.System()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Entropy == nil {
		opts.Entropy = ulid.DefaultEntropy()
	}
	if opts.Lease.Clock == nil {
		opts.Lease.Clock = opts.Clock
	}
	host, _ := os.Hostname()
	return &Client{store: store, opts: opts, log: opts.Logger.With("component", "remote-client"),
		cmdPrefix: opts.InboxPrefix + "/", ansPrefix: opts.InboxPrefix + "-answers/",
		sender: fmt.Sprintf("%s (pid %d on %s)", opts.Name, os.Getpid(), host), entropy: opts.Entropy}, nil
}

func (c *Client) newID() string {
	c.idMu.Lock()
	defer c.idMu.Unlock()
	id, err := ulid.New(ulid.Timestamp(c.opts.Clock.Now()), c.entropy)
	if err != nil {
		// The monotonic source overflowed within one millisecond.
		c.entropy = ulid.DefaultEntropy()
		id = ulid.MustNew(ulid.Timestamp(c.opts.Clock.Now()), c.entropy)
	}
	return id.String()
}

// Submit asks the writer to start a run; see runtime.Runtime.Submit. An
// empty spec.RunID is replaced by a fresh ULID here, before the command
// is sent, so a command applied twice after a writer crash is the same
// submission. The spec is checked here as the writer checks it
// (runtime.RunSpec.Validate).
func (c *Client) Submit(ctx context.Context, spec runtime.RunSpec) (runtime.SubmitOutcome, error) {
	if spec.RunID == "" {
		spec.RunID = c.newID()
	}
	if err := spec.Validate(); err != nil {
		return runtime.SubmitOutcome{}, err
	}
	ans, err := c.do(ctx, &inboxCommand{Kind: CommandSubmit, RunID: spec.RunID, Input: spec.Input,
		Headers: spec.Headers, Labels: spec.Labels, KVWrites: spec.KVWrites})
	if err != nil {
		return runtime.SubmitOutcome{}, err
	}
	return runtime.SubmitOutcome{RunID: ans.RunID, JobID: ans.JobID, NewlySubmitted: ans.NewlySubmitted}, nil
}

// Signal asks the writer to deliver a signal; see runtime.Runtime.Signal.
// The writer applies it exactly once, also across its own crashes.
func (c *Client) Signal(ctx context.Context, key string, payload []byte) (signal.Outcome, error) {
	res, err := c.SendSignal(ctx, key, payload, signal.Options{})
	return res.Outcome, err
}

// SendSignal asks the writer to deliver a signal; see
// runtime.Runtime.SendSignal. The writer checks it as SendSignal does
// (RequireWaiting, its SignalValidator): a refusal is a *CommandError
// matching signal.ErrNoWaiter or signal.ErrRejected, nothing
// buffered. The writer applies it exactly once, also across its own
// crashes.
func (c *Client) SendSignal(ctx context.Context, key string, payload []byte, opts signal.Options) (signal.Result, error) {
	if err := runtime.ValidateSignal(key, payload); err != nil {
		return signal.Result{}, err
	}
	ans, err := c.do(ctx, &inboxCommand{Kind: CommandSignal, Key: key, Payload: payload, RequireWaiting: opts.RequireWaiting})
	if err != nil {
		return signal.Result{}, err
	}
	out, ok := parseSignalOutcome(ans.Signal)
	if !ok {
		return signal.Result{}, fmt.Errorf("%w: answer to signal command %s has outcome %q", runtime.ErrCorruptRecord, ans.ID, ans.Signal)
	}
	return signal.Result{Outcome: out, Expires: ans.SignalExpires}, nil
}

// ClearSignal asks the writer to discard the signal buffered under key;
// see runtime.Runtime.ClearSignal.
func (c *Client) ClearSignal(ctx context.Context, key string) (bool, error) {
	if err := runtime.ValidateSignal(key, nil); err != nil {
		return false, err
	}
	ans, err := c.do(ctx, &inboxCommand{Kind: CommandClearSignal, Key: key})
	if err != nil {
		return false, err
	}
	return ans.OK, nil
}

// Cancel asks the writer to cancel a run; see runtime.Runtime.Cancel.
func (c *Client) Cancel(ctx context.Context, runID string) (bool, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return false, err
	}
	ans, err := c.do(ctx, &inboxCommand{Kind: CommandCancel, RunID: runID})
	if err != nil {
		return false, err
	}
	return ans.OK, nil
}

// Status returns the durable state of runID (runtime.ErrRunNotFound when
// the store has no such run); see runtime.Inspector.Status. A step whose
// claim is not durable yet shows as pending.
func (c *Client) Status(ctx context.Context, runID string) (runstate.Status, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return runstate.Status{}, err
	}
	var st runstate.Status
	err := c.read(ctx, func(in *runtime.Inspector) (err error) {
		st, err = in.Status(ctx, runID)
		return err
	})
	return st, err
}

// ListSignals lists the buffered signals from the durable state; see
// runtime.Inspector.ListSignals.
func (c *Client) ListSignals(ctx context.Context, opts signal.ListOptions) ([]signal.Info, error) {
	var out []signal.Info
	err := c.read(ctx, func(in *runtime.Inspector) (err error) {
		out, err = in.ListSignals(ctx, opts)
		return err
	})
	return out, err
}

// ListRuns lists runs from the durable state; see
// runtime.Inspector.ListRuns.
func (c *Client) ListRuns(ctx context.Context, opts runstate.ListOptions) ([]runstate.Status, error) {
	var out []runstate.Status
	err := c.read(ctx, func(in *runtime.Inspector) (err error) {
		out, err = in.ListRuns(ctx, opts)
		return err
	})
	return out, err
}

// read opens or refreshes the Reader and runs fn on its Inspector.
func (c *Client) read(ctx context.Context, fn func(*runtime.Inspector) error) error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed {
		return fmt.Errorf("remote: client: %w", queue.ErrClosed)
	}
	if c.reader == nil {
		r, err := queue.OpenReader(ctx, c.store, c.opts.Queue)
		if err != nil {
			return fmt.Errorf("remote: client: open a reader on the store: %w", err)
		}
		c.reader, c.insp = r, runtime.NewArchiveInspector(r, c.store, runtime.SealOptions{})
	} else if err := c.reader.Refresh(ctx); err != nil {
		return fmt.Errorf("remote: client: refresh the reader: %w", err)
	}
	return fn(c.insp)
}

// Close releases the Reader. Commands already sent stay in the inbox. It
// is idempotent.
func (c *Client) Close() error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.reader != nil {
		return c.reader.Close()
	}
	return nil
}

// do sends cmd and waits for its outcome; a rejection becomes an error
// matching the writer's sentinel (see Client, Outcomes).
func (c *Client) do(ctx context.Context, cmd *inboxCommand) (*inboxAnswer, error) {
	c.readMu.Lock()
	closed := c.closed
	c.readMu.Unlock()
	if closed {
		return nil, fmt.Errorf("remote: client: %w", queue.ErrClosed)
	}
	// Watch for the answer before sending, not to miss it.
	var watch *folderWatch
	if !c.opts.NoNotify {
		var err error
		watch, err = watchFolder(c.store, c.opts.InboxPrefix+"-answers", func(name string) bool { return validCommandID(name) == nil }, c.log)
		if err != nil {
			c.log.Debug("no change notification for answers; polling", "err", err)
		}
		defer watch.Close()
	}
	id, err := c.send(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if c.opts.RingBell {
		if err := ring(ctx, c.store, c.opts.InboxPrefix, id); err != nil {
			// The writer's next LIST finds the command all the same.
			c.log.Debug("the writer finds the command at its next LIST", "err", err)
		}
	}
	ans, err := c.await(ctx, id, cmd.Kind, watch)
	if err != nil {
		return nil, err
	}
	if ans.Code != "" {
		return nil, &CommandError{CommandID: id, Kind: cmd.Kind, Code: ans.Code, Message: ans.Error}
	}
	return ans, nil
}

// send writes cmd create-only under a fresh id and returns the id.
func (c *Client) send(ctx context.Context, cmd *inboxCommand) (string, error) {
	cmd.V, cmd.ID, cmd.Client = inboxFormat, c.newID(), c.sender
	cmd.SentAt = c.opts.Clock.Now()
	if c.opts.CommandTTL > 0 {
		cmd.Expires = cmd.SentAt.Add(c.opts.CommandTTL)
	}
	b, err := encodeCommand(cmd)
	if err != nil {
		return "", err
	}
	key := c.cmdPrefix + cmd.ID
	for attempt := 0; ; attempt++ {
		_, err = c.store.Put(ctx, key, b, objstore.CreateOnly())
		if err == nil || (attempt > 0 && errors.Is(err, objstore.ErrPrecondition)) {
			// A precondition failure after a failed attempt is that
			// attempt's write landing (ids are unique).
			return cmd.ID, nil
		}
		if attempt == 2 || ctx.Err() != nil || errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrInvalidKey) {
			return "", fmt.Errorf("remote: client: send the %s command to %s: %w", cmd.Kind, key, err)
		}
	}
}

// await polls for the answer to command id until a final one arrives or
// the deadline passes, then deletes it. An uncertain answer is left for
// the writer to replace; the polls that follow come every PollMax.
func (c *Client) await(ctx context.Context, id string, kind CommandKind, watch *folderWatch) (*inboxAnswer, error) {
	start := c.opts.Clock.Now()
	wctx := ctx
	if d, ok := ctx.Deadline(); !ok || d.Sub(start) > c.opts.AnswerTimeout {
		var cancel context.CancelFunc
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		t := c.opts.Clock.NewTimer(c.opts.AnswerTimeout)
		defer t.Stop()
		go func() {
			select {
			case <-t.C():
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	key := c.ansPrefix + id
	delay := c.opts.PollMin
	var uncertain *inboxAnswer
	for {
		if !waitWake(wctx, c.opts.Clock, delay, watch.C()) {
			return nil, c.noAnswer(ctx, id, kind, c.opts.Clock.Now().Sub(start), uncertain)
		}
		b, _, err := c.store.Get(wctx, key)
		switch {
		case err == nil:
			ans, err := decodeAnswer(b)
			if err == nil && ans.ID != id {
				err = fmt.Errorf("%w: it answers command %q", runtime.ErrCorruptRecord, ans.ID)
			}
			if err != nil {
				// Not an answer to this command: leave it.
				return nil, fmt.Errorf("remote: client: answer %s: %w", key, err)
			}
			if ans.Code == codeUncertain {
				if uncertain == nil {
					c.log.Info("the writer could not tell whether the command was applied; waiting while it retries",
						"command", id, "kind", kind, "writer", ans.Writer, "err", ans.Error)
				}
				uncertain, delay = ans, c.opts.PollMax
				continue
			}
			if err := c.store.Delete(ctx, key); err != nil {
				c.log.Debug("deleting a read answer failed; the writer sweeps it", "key", key, "err", err)
			}
			return ans, nil
		case errors.Is(err, objstore.ErrNotExist):
		case wctx.Err() != nil:
			return nil, c.noAnswer(ctx, id, kind, c.opts.Clock.Now().Sub(start), uncertain)
		default:
			c.log.Warn("reading a command's answer failed; retrying", "key", key, "err", err)
		}
		if watch != nil || c.opts.Clock.Now().Sub(start) >= c.opts.PollFastFor {
			delay = min(2*delay, c.opts.PollMax)
		}
	}
}

// noAnswer builds the ErrNoAnswer error, saying whether a writer is live
// and, after an uncertain answer, that the outcome is unknown.
func (c *Client) noAnswer(ctx context.Context, id string, kind CommandKind, waited time.Duration, uncertain *inboxAnswer) error {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	info, live, lerr := lease.Live(lctx, c.store, c.opts.Lease)
	var writer string
	switch {
	case lerr != nil:
		writer = fmt.Sprintf("the writer lease could not be read (%v)", lerr)
	case live && uncertain != nil:
		writer = fmt.Sprintf("%s is live and retrying it", info)
	case live:
		writer = fmt.Sprintf("%s is live but did not answer: is it draining the inbox (remote.ServeInbox, `tqw-dsl worker`)?", info)
	default:
		writer = "no live writer holds the store: start one (`tqw-dsl worker`)"
	}
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	if uncertain != nil {
		return fmt.Errorf("%w: %s command %s: %s; no final answer within %v: %s; the command stays at %s%s and is retried until it resolves, taking effect at most once (%w; %w)",
			ErrOutcomeUncertain, kind, id, uncertain.Error, waited.Round(time.Millisecond), writer, c.cmdPrefix, id, ErrNoAnswer, cause)
	}
	return fmt.Errorf("%w to %s command %s after %v: %s; the command stays at %s%s and is applied when a writer drains the inbox (%w)",
		ErrNoAnswer, kind, id, waited.Round(time.Millisecond), writer, c.cmdPrefix, id, cause)
}

// CommandError is a command the writer rejected. It matches the sentinel
// error the writer reported (runtime.ErrInputMismatch,
// runstate.ErrInvalidRunID, ..., ErrCommandExpired) with errors.Is.
type CommandError struct {
	CommandID string
	Kind      CommandKind
	// Code is the stable name of the rejection ("input_mismatch", ...;
	// "internal" for store errors the writer gave up retrying before the
	// command had started; see InboxOptions, Outcomes). Never
	// "uncertain": the Client waits for the writer to resolve those.
	Code    string
	Message string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("remote: the writer rejected %s command %s: %s", e.Kind, e.CommandID, e.Message)
}

// Unwrap returns the sentinel error of Code, or nil.
func (e *CommandError) Unwrap() error { return sentinelOf(e.Code) }
