package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/tqw-dsl/tqw/internal/service"
	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// foreignReportEvery is how often an object under the inbox's prefixes
// that is not the inbox's is reported again while it stays.
const foreignReportEvery = time.Hour

// maxForeignTracked bounds the foreign objects a writer remembers (not to
// read them again at every pass, and to report each once per
// foreignReportEvery); beyond it they are read at every pass.
const maxForeignTracked = 10000

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
// (a command sent to an idle writer waits up to MaxInterval) unless the
// writer is woken earlier: on a local file store by change notification
// (no request), elsewhere by the doorbell, one HEAD per BellEvery between
// LISTs (120 a minute at 500 ms, 172,800 a day, about $0.069 at $0.0004
// per 1,000), which a Client with RingBell rings after each command.
//
// Per command the writer adds one GET of the answer (is it answered
// already?), one GET of the command, one PUT (the answer) and one DELETE,
// plus the command's own commits: a Submit one durable commit, a Signal
// one to buffer and one to wake a waiter, a Cancel what runtime.Runtime.Cancel
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
	// the runtime's other namespaces (runtime.Runtime.StoreNamespaces).
	Prefix string
	// MinInterval and MaxInterval bound the polling interval (defaults
	// 200 ms and 5 s).
	MinInterval, MaxInterval time.Duration
	// BellEvery is how often, between two LISTs, a writer on a store
	// without change notification reads the doorbell that clients ring
	// after each command (default 500 ms; negative: never, commands wait
	// for the next LIST). On a local file store the writer is woken by
	// the operating system instead and never reads the doorbell.
	BellEvery time.Duration
	// NoNotify makes the writer poll a local file store as it polls any
	// other (doorbell and LIST), without change notification.
	NoNotify bool
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
	Clock clock.Clock
	// OnAnswered, when set, is called after each command's final answer
	// is written (not for an uncertain one), for metrics. It must not
	// block.
	OnAnswered func(Answered)
}

// Answered describes one command the writer answered.
type Answered struct {
	Kind CommandKind
	// Code is "" for a command applied, else the rejection's code
	// (InboxOptions, Outcomes).
	Code string
	// SentAt is when the client sent it (the client's clock), AnsweredAt
	// when its answer was written (the writer's clock).
	SentAt, AnsweredAt time.Time
}

func (o InboxOptions) withDefaults(rt *runtime.Runtime) (InboxOptions, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultInboxPrefix
	}
	if err := objstore.ValidateKey(o.Prefix); err != nil {
		return o, fmt.Errorf("remote: inbox prefix: %w", err)
	}
	if o.MinInterval == 0 {
		o.MinInterval = 200 * time.Millisecond
	}
	if o.MaxInterval == 0 {
		o.MaxInterval = 5 * time.Second
	}
	if o.BellEvery == 0 {
		o.BellEvery = 500 * time.Millisecond
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
		return o, fmt.Errorf("remote: inbox intervals min %v max %v, answer TTL %v, sweep every %v, apply timeout %v: want 0 < min <= max and positive durations",
			o.MinInterval, o.MaxInterval, o.AnswerTTL, o.SweepEvery, o.ApplyTimeout)
	}
	if o.Clock == nil {
		o.Clock = rt.Clock()
	}
	return o, nil
}

// inbox is the writer side of one inbox.
type inbox struct {
	rt        *runtime.Runtime
	store     objstore.Store
	q         *queue.Queue
	log       *slog.Logger
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

func newInbox(rt *runtime.Runtime, opts InboxOptions) (*inbox, error) {
	opts, err := opts.withDefaults(rt)
	if err != nil {
		return nil, err
	}
	if err := objstore.CheckNamespaces(append(rt.StoreNamespaces(), inboxNamespaces(opts.Prefix, "InboxOptions.Prefix")...)...); err != nil {
		return nil, err
	}
	return &inbox{rt: rt, store: rt.Store(), q: rt.Queue(), log: rt.Logger(), opts: opts, cmdPrefix: opts.Prefix + "/", ansPrefix: opts.Prefix + "-answers/",
		failures: map[string]int{}, foreign: map[string]foreignObject{}}, nil
}

// ServeInbox drains the inbox until ctx is done, applying each command
// exactly once and answering it (see InboxOptions for the outcomes, the
// polling and its cost). Run it on the writer alongside rt's worker
// (runtime.Runtime.Run). It returns
// nil when ctx ends, or the error that makes writing impossible (the
// queue closed or fenced); other store errors are logged and retried at
// the next pass. It refuses an inbox whose prefixes overlap another
// namespace of the store (objstore.ErrNamespaceOverlap) and leaves every object
// under them that is not the inbox's as it is.
func ServeInbox(ctx context.Context, rt *runtime.Runtime, opts InboxOptions) error {
	in, err := NewInbox(rt, opts)
	if err != nil {
		return err
	}
	if err := in.Start(ctx); err != nil {
		return err
	}
	<-in.Stopped()
	return in.Err()
}

// Inbox serves an inbox in the background, as ServeInbox does in the
// foreground: Start starts serving, Stop stops and waits, Stopped is
// closed once it stopped, by Stop, by the end of Start's context, or by
// an error that makes writing impossible, which Err then returns. An
// Inbox serves once: a stopped one is replaced, not restarted.
type Inbox struct {
	loop *service.Loop
}

// NewInbox returns the inbox server of rt, not started. It refuses what
// ServeInbox refuses (options, namespaces) and makes no request.
func NewInbox(rt *runtime.Runtime, opts InboxOptions) (*Inbox, error) {
	ib, err := newInbox(rt, opts)
	if err != nil {
		return nil, err
	}
	return &Inbox{loop: service.NewLoop(ib.serve)}, nil
}

// Start starts serving until ctx ends or Stop is called. It does nothing
// on a started Inbox and fails on a stopped one.
func (in *Inbox) Start(ctx context.Context) error { return in.loop.Start(ctx) }

// Stop stops serving and returns once the pass under way ended.
func (in *Inbox) Stop() { in.loop.Stop() }

// Stopped is closed once the Inbox stopped serving.
func (in *Inbox) Stopped() <-chan struct{} { return in.loop.Stopped() }

// Err returns the error that made the Inbox stop by itself (the queue
// closed or fenced, the writer lease lost), nil otherwise.
func (in *Inbox) Err() error { return in.loop.Err() }

// DrainInbox runs one pass over the inbox: every command waiting is
// applied and answered. It returns how many commands it handled (objects
// that are not commands, and retries of commands answered uncertain that
// failed again, are not counted). It does not sweep answers.
func DrainInbox(ctx context.Context, rt *runtime.Runtime, opts InboxOptions) (int, error) {
	ib, err := newInbox(rt, opts)
	if err != nil {
		return 0, err
	}
	return ib.drain(ctx)
}

func (ib *inbox) serve(ctx context.Context) error {
	var watch *folderWatch
	if !ib.opts.NoNotify {
		var err error
		watch, err = watchFolder(ib.store, ib.opts.Prefix, func(name string) bool { return validCommandID(name) == nil }, ib.log)
		if err != nil {
			ib.log.Warn("no change notification for the inbox; polling it", "err", err)
		}
		defer watch.Close()
	}
	interval := ib.opts.MinInterval
	var lastBell string
	for {
		n, err := ib.drain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if runtime.IsFatal(err) {
				return fmt.Errorf("remote: inbox: %w", err)
			}
			ib.log.Warn("inbox pass failed; retrying", "err", err)
		}
		if now := ib.opts.Clock.Now(); !ib.swept || now.Sub(ib.lastSweep) >= ib.opts.SweepEvery {
			if err := ib.sweep(ctx); err != nil {
				if runtime.IsFatal(err) {
					return fmt.Errorf("remote: inbox sweep: %w", err)
				}
				ib.log.Warn("inbox sweep failed", "err", err)
			}
			ib.swept, ib.lastSweep = true, now
		}
		if n > 0 {
			interval = ib.opts.MinInterval
		} else {
			interval = min(2*interval, ib.opts.MaxInterval)
		}
		if !waitForChange(ctx, ib.opts.Clock, interval, watch, ib.store, bellKey(ib.opts.Prefix), ib.opts.BellEvery, &lastBell, ib.log) {
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
		page, err := ib.store.List(ctx, ib.cmdPrefix, after, ib.opts.PageSize)
		if err != nil {
			return n, fmt.Errorf("remote: list the inbox %s: %w", ib.cmdPrefix, err)
		}
		for _, o := range page {
			after = o.Key
			counted, err := ib.handle(ctx, o)
			if err != nil {
				if runtime.IsFatal(err) || ctx.Err() != nil {
					return n, err
				}
				ib.log.Warn("inbox command failed; retrying at the next pass", "key", o.Key, "err", err)
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
	store := ib.store
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
		return false, fmt.Errorf("remote: inbox: read %s: %w", o.Key, err)
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
	if err := ib.rt.AwaitLease(ctx); err != nil {
		return false, err
	}
	ib.lastTry = ib.failures[id]+1 >= ib.opts.MaxAttempts
	actx, cancel := context.WithTimeout(ctx, ib.opts.ApplyTimeout)
	ans, err := ib.apply(actx, cmd)
	if err == nil {
		// The answer reports what is durable only: this attempt's commits
		// and those of an earlier one it found visible but not durable.
		if serr := ib.q.DB().Sync(actx); serr != nil {
			err = fmt.Errorf("remote: inbox: make the effects of command %s durable: %w", id, serr)
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
		if !ib.lastTry || runtime.IsFatal(err) || ctx.Err() != nil {
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
		return true, fmt.Errorf("remote: inbox: encode the answer to %s: %w", id, err)
	}
	// Create-only, or replacing exactly the uncertain answer read: an
	// object already there is an earlier answer whose PUT response was
	// lost, or not the inbox's; the next pass reads it.
	put := objstore.CreateOnly()
	if prev != nil {
		put = objstore.IfMatch(prevInfo.ETag)
	}
	if _, err := store.Put(ctx, ansKey, ab, put); err != nil {
		return true, fmt.Errorf("remote: inbox: write the answer %s: %w", ansKey, err)
	}
	if ans.Code == codeUncertain {
		ib.log.Warn("inbox command may have been applied; answered uncertain, kept and retried at every pass until it resolves",
			"key", o.Key, "kind", cmd.Kind, "err", ans.Error)
		return true, nil
	}
	if ib.opts.OnAnswered != nil {
		ib.opts.OnAnswered(Answered{Kind: cmd.Kind, Code: ans.Code, SentAt: cmd.SentAt, AnsweredAt: ans.AppliedAt})
	}
	return true, ib.finish(ctx, o.Key, id)
}

// readAnswer returns the answer at key, nil when there is none, or an
// error wrapping errForeign when the object there is not an answer to id.
func (ib *inbox) readAnswer(ctx context.Context, key, id string) (*inboxAnswer, objstore.ObjectInfo, error) {
	b, info, err := ib.store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, info, nil
	}
	if err != nil {
		return nil, info, fmt.Errorf("remote: inbox: check the answer %s: %w", key, err)
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
		if err != nil && !errors.Is(err, runtime.ErrCorruptRecord) {
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
			ib.log.Warn("more objects that are not inbox commands or answers than the writer tracks; they are left in place and read again at every pass",
				"tracked", len(ib.foreign), "key", o.Key, "why", why)
		}
		return
	}
	ib.log.Warn("leaving an object in place: not an inbox command or answer, so this writer neither applies nor deletes it",
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
	if err := ib.store.Delete(ctx, key); err != nil {
		return fmt.Errorf("remote: inbox: delete the answered command %s: %w", key, err)
	}
	if _, err := ib.q.KVApply(ctx, queue.KVBatch{Deletes: []string{inboxMarkerKey(id)}, NonDurable: true}); err != nil {
		return fmt.Errorf("remote: inbox: drop the marker of %s: %w", id, err)
	}
	return nil
}

// marker returns the applied-marker of command id, nil when there is none.
func (ib *inbox) marker(ctx context.Context, id string) (*inboxMarker, error) {
	b, err := kvGet(ctx, ib.q, inboxMarkerKey(id))
	if err != nil || b == nil {
		return nil, err
	}
	return decodeInboxMarker(b)
}

// putMarker records the marker of command id before its first commit.
func (ib *inbox) putMarker(ctx context.Context, id string, m *inboxMarker) error {
	m.AtMs = ib.rt.Clock().Now().UnixMilli()
	b, err := encodeMarker(m)
	if err != nil {
		return err
	}
	// Non-durable: the command's own durable commit, which follows,
	// makes it durable (commits are durable in order).
	if _, err := ib.q.KVApply(ctx, queue.KVBatch{Puts: []queue.KVWrite{{Key: inboxMarkerKey(id), Value: b}}, NonDurable: true}); err != nil {
		return fmt.Errorf("remote: inbox: record the marker of %s: %w", id, err)
	}
	return nil
}

// sweep deletes answers older than AnswerTTL and markers whose command is
// gone (left by a crash between the two deletions of finish). An object
// under the answers' prefix that is not an answer is left in place.
func (ib *inbox) sweep(ctx context.Context) error {
	store := ib.store
	cutoff := ib.opts.Clock.Now().Add(-ib.opts.AnswerTTL)
	ib.gen++
	after := ""
	for {
		page, err := store.List(ctx, ib.ansPrefix, after, 1000)
		if err != nil {
			return fmt.Errorf("remote: inbox sweep: list %s: %w", ib.ansPrefix, err)
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
				return fmt.Errorf("remote: inbox sweep: %w", err)
			}
			if err := store.Delete(ctx, o.Key); err != nil {
				return fmt.Errorf("remote: inbox sweep: delete %s: %w", o.Key, err)
			}
		}
		if len(page) < 1000 {
			ib.forgetForeign(ib.ansPrefix)
			break
		}
	}
	after = ""
	for {
		page, err := ib.q.KVScan(ctx, kvInbox, after, 1000)
		if err != nil {
			return fmt.Errorf("remote: inbox sweep: scan markers: %w", err)
		}
		for _, e := range page {
			after = e.Key
			id := strings.TrimPrefix(e.Key, kvInbox)
			if _, err := store.Head(ctx, ib.cmdPrefix+id); errors.Is(err, objstore.ErrNotExist) {
				if _, err := ib.q.KVApply(ctx, queue.KVBatch{Deletes: []string{e.Key}, NonDurable: true}); err != nil {
					return fmt.Errorf("remote: inbox sweep: drop marker %s: %w", id, err)
				}
			} else if err != nil {
				return fmt.Errorf("remote: inbox sweep: check command %s: %w", id, err)
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
func InboxWaiting(ctx context.Context, rt *runtime.Runtime, opts InboxOptions) (bool, error) {
	o, err := opts.withDefaults(rt)
	if err != nil {
		return false, err
	}
	after := ""
	for {
		page, err := rt.Store().List(ctx, o.Prefix+"/", after, 1000)
		if err != nil {
			return false, fmt.Errorf("remote: inbox: list %s/: %w", o.Prefix, err)
		}
		for _, obj := range page {
			if validCommandID(strings.TrimPrefix(obj.Key, o.Prefix+"/")) != nil {
				continue
			}
			b, _, err := rt.Store().Get(ctx, obj.Key)
			if errors.Is(err, objstore.ErrNotExist) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("remote: inbox: read %s: %w", obj.Key, err)
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

// kvGet reads key from the caller KV, nil when it holds nothing.
func kvGet(ctx context.Context, q *queue.Queue, key string) ([]byte, error) {
	v, err := q.KVGet(ctx, key)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: read %s: %w", key, err)
	}
	return v, nil
}
