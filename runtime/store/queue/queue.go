package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/internal/invariants"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// conflictRetries bounds how often one operation re-runs after losing an
// optimistic commit.
const conflictRetries = 200

// recoverBatch is how many jobs one recovery, promotion or sweep commit moves.
const recoverBatch = 512

// Queue is the single writer of a queue store. It is safe for concurrent use.
type Queue struct {
	db    *kv.DB
	opts  Options
	clock clock.Clock
	log   *slog.Logger
	view  view

	seq    atomic.Uint64 // last ready-index sequence handed out
	tokens atomic.Uint64 // last claim token handed out
	epoch  uint64

	idMu    sync.Mutex
	entropy io.Reader

	mu          sync.Mutex
	closed      bool
	queues      map[string]*queueState
	leases      map[string]*lease    // by job ID
	earlyCancel map[uint64]time.Time // cancel requests that beat their claim's lease registration, by when
	waiters     map[string][]chan Job
	// gated counts, per job, the durable commits that changed the job's
	// record and are not durable yet. A gated job is not claimed: work a
	// commit made ready starts only once that commit is in the store, so
	// nothing runs on state a crash could undo (no step runs ahead of its
	// predecessor's settlement).
	gated map[string]int

	schedKick chan struct{}
	done      chan struct{}
	wg        sync.WaitGroup

	// passHook, when set by a test, is called after each background pass
	// ("reap", "schedule", "sweep") with the clock time the pass started.
	passHook atomic.Pointer[func(name string, at time.Time)]
	// waitHook, when set by a test, is called when WaitForCompletion has
	// registered and read the job.
	waitHook atomic.Pointer[func(string)]
	// idleHook, when set by a test, is called when ClaimWait found nothing
	// to claim and is about to wait.
	idleHook atomic.Pointer[func(queue string)]
}

// queueState is the in-memory state of one known queue.
type queueState struct {
	claimMu sync.Mutex    // serializes claims so they never conflict with each other
	ready   chan struct{} // closed and replaced when work becomes claimable
	// skippedGated notes a claim that passed over a gated job (under q.mu).
	skippedGated bool
}

// lease is the in-memory claim registry entry of one claimed job.
type lease struct {
	token     uint64
	expires   time.Time
	cancelled chan struct{}
	cancelSet bool
}

// Open opens the queue store under opts.Prefix as its only writer: it opens
// the kv (fencing any older writer), requeues the jobs whose claims a crash
// or an unclean stop interrupted (dead-lettering those that used their last
// attempt), promotes due scheduled jobs, and starts the scheduler, the
// reaper and the retention sweeper.
func Open(ctx context.Context, store objstore.Store, opts Options) (*Queue, error) {
	opts = opts.withDefaults()
	db, err := kv.Open(ctx, store, opts.KV)
	if err != nil {
		return nil, fmt.Errorf("queue: open store at prefix %q: %w", opts.Prefix, err)
	}
	q := &Queue{
		db: db, opts: opts, clock: opts.Clock, log: opts.Logger.With("component", "queue"),
		view: view{src: db, opts: opts}, epoch: db.Epoch(), entropy: opts.Entropy,
		queues: map[string]*queueState{}, leases: map[string]*lease{}, earlyCancel: map[uint64]time.Time{},
		waiters: map[string][]chan Job{}, gated: map[string]int{}, schedKick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if q.entropy == nil {
		q.entropy = ulid.DefaultEntropy()
	}
	if err := q.recover(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	q.startLoops()
	return q, nil
}

// Close stops the background loops and closes the kv, which makes every
// commit durable first. Jobs still claimed stay claimed in the store; the
// next Open requeues them. Close is idempotent.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	close(q.done)
	for _, qs := range q.queues {
		close(qs.ready)
		qs.ready = make(chan struct{})
	}
	q.mu.Unlock()
	q.wg.Wait()
	if err := q.db.Close(); err != nil {
		return fmt.Errorf("queue: close: %w", err)
	}
	return nil
}

// Clock returns the queue's clock.
func (q *Queue) Clock() clock.Clock { return q.clock }

// Prefix returns the object prefix of the queue's kv store
// (Options.Prefix), so components sharing the store keep out of it.
func (q *Queue) Prefix() string { return q.opts.Prefix }

// DB returns the underlying kv, for statistics.
func (q *Queue) DB() *kv.DB { return q.db }

// Sync returns once every commit made before the call is durable: a read
// barrier for a caller that reports what it read from this writer's
// memory (which includes commits still on their way to the store). It
// costs nothing when no commit is pending; else it waits for the WAL PUT
// holding them, without linger but with the kv's bounded wait for
// company (kv.DB.Sync).
func (q *Queue) Sync(ctx context.Context) error {
	return wrapKV("sync", q.db.Sync(ctx))
}

func (q *Queue) checkOpen() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	return nil
}

// wrapKV maps kv errors onto the queue's sentinels where one exists.
func wrapKV(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kv.ErrClosed):
		return fmt.Errorf("queue: %s: %w (%w)", op, ErrClosed, err)
	default:
		return fmt.Errorf("queue: %s: %w", op, err)
	}
}

// state returns the in-memory state of queue name, creating it.
func (q *Queue) state(name string) *queueState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stateLocked(name)
}

func (q *Queue) stateLocked(name string) *queueState {
	qs := q.queues[name]
	if qs == nil {
		qs = &queueState{ready: make(chan struct{})}
		q.queues[name] = qs
	}
	return qs
}

func (q *Queue) queueNames() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	names := make([]string, 0, len(q.queues))
	for n := range q.queues {
		names = append(names, n)
	}
	return names
}

func (q *Queue) nextSeq() uint64 { return q.seq.Add(1) }

func (q *Queue) nextToken() uint64 { return q.epoch<<40 | q.tokens.Add(1) }

func (q *Queue) newID(now time.Time) (string, error) {
	q.idMu.Lock()
	defer q.idMu.Unlock()
	id, err := ulid.New(ulid.Timestamp(now), q.entropy)
	if err != nil {
		return "", fmt.Errorf("queue: new job ID: %w", err)
	}
	return id.String(), nil
}

// txn is one attempt of a queue transaction: the kv transaction plus the
// in-memory consequences to apply once (and only if) it commits.
type txn struct {
	q       *Queue
	ctx     context.Context
	tx      *kv.Tx
	now     int64
	wrote   bool
	durable bool

	ready    map[string]struct{} // queues that gained claimable work
	kick     bool                // the scheduled set changed
	seen     []string            // queues that gained scheduled work
	finished []Job               // jobs that reached done, dead or were removed
	drops    []leaseRef          // leases to forget
	cancels  []leaseRef          // leases whose cancel to signal
	touched  []string            // jobs whose record this transaction wrote
	// onDurable are the settlement effects' callbacks, run once durable.
	onDurable []func()
	// claims are jobs this transaction created claimed (ClaimFirst), with
	// their payloads, registered as leases once it commits.
	claims   []newClaim
	counted  [][]byte           // counter keys added to (invariants builds)
	claimFor *SettlementEffects // where the claim of ClaimFirst goes
	shareTo  *float64           // where the commit's WAL share goes, once durable
}

type newClaim struct {
	r       *record
	payload []byte
}

// makeClaimed puts new record r straight into the claimed state for the
// transaction's caller, its first attempt begun.
func (t *txn) makeClaimed(r *record, payload []byte) error {
	r.State, r.Token, r.ClaimedAt = StateClaimed, t.q.nextToken(), t.now
	r.Attempts++
	r.beginAttempt(t.now)
	if err := t.putRecord(r); err != nil {
		return err
	}
	if err := t.put(claimedKey(r.Queue, r.ID), nil); err != nil {
		return err
	}
	t.claims = append(t.claims, newClaim{r: r, payload: payload})
	return t.add(r.Queue, StateClaimed, 1)
}

type leaseRef struct {
	id    string
	token uint64
}

// update runs fn in a transaction and commits it, durably when durable or
// when fn set t.durable. It re-runs fn after a lost optimistic commit. A
// transaction that wrote nothing is not committed.
//
// The commit is applied first (CommitAsync, which fails only when nothing
// was applied), then its in-memory consequences, then a durable one waits
// for the WAL object holding it. So a failure while waiting for durability
// (kv.ErrCommitUncertain) never leaves leases behind the kv state.
//
// Invariant: what a durable commit makes claimable or finished is
// published only once it is durable. Its jobs stay gated (not claimable)
// and their completion waiters unwoken until the WAL object holding it is
// in the store (afterDurable), also when the caller stops waiting first.
// Non-durable commits (claims, reaper requeues, promotions, retry
// nacks) publish at once: they only move a job between states it was
// durably in or may return to after a crash.
func (q *Queue) update(ctx context.Context, op string, durable bool, fn func(t *txn) error) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		t := &txn{q: q, ctx: ctx, tx: q.db.Begin(), now: nanos(q.clock.Now()), durable: durable}
		if err := fn(t); err != nil {
			t.tx.Rollback()
			if errors.Is(err, kv.ErrConflict) && attempt < conflictRetries && ctx.Err() == nil {
				continue // a read saw a key changed after the snapshot
			}
			return err
		}
		if !t.wrote {
			t.tx.Rollback()
			q.afterCommit(t)
			q.afterDurable(t)
			return nil
		}
		var pending kv.Durability
		var err error
		if t.durable {
			pending, err = t.tx.CommitAsync(ctx)
		} else {
			err = t.tx.CommitNonDurable(ctx)
		}
		if errors.Is(err, kv.ErrConflict) && attempt < conflictRetries {
			if ctx.Err() != nil {
				return wrapKV(op, ctx.Err())
			}
			continue
		}
		if err != nil {
			return wrapKV(op, err)
		}
		q.afterCommit(t)
		if !t.durable {
			q.afterDurable(t)
			return nil
		}
		if err := pending.Wait(ctx); err != nil {
			// Publish once it is durable after all; a failed WAL write
			// stops the kv, and nothing is claimed any more.
			go func() {
				<-pending.Done()
				if pending.Err() == nil {
					q.afterDurable(t)
				}
			}()
			return wrapKV(op+" (applied; durability unknown)", err)
		}
		if n := pending.Commits(); n > 0 && t.shareTo != nil {
			*t.shareTo = 1 / float64(n)
		}
		q.afterDurable(t)
		return nil
	}
}

// afterCommit applies a committed transaction's in-memory consequences
// that may precede its durability: leases, cancel signals, the scheduler.
// A durable transaction's jobs are gated until afterDurable.
func (q *Queue) afterCommit(t *txn) {
	q.checkCounters(t)
	q.mu.Lock()
	for _, d := range t.drops {
		if l := q.leases[d.id]; l != nil && l.token == d.token {
			delete(q.leases, d.id)
		}
	}
	for _, c := range t.cancels {
		if l := q.leases[c.id]; l != nil && l.token == c.token {
			l.signalCancel()
		} else {
			// The claim's registration has not run yet (or a settlement
			// already dropped the lease; Reap prunes those entries).
			q.earlyCancel[c.token] = q.clock.Now()
		}
	}
	for _, name := range t.seen {
		q.stateLocked(name)
	}
	for _, nc := range t.claims {
		l := q.registerLeaseLocked(nc.r, q.clock.Now().Add(q.opts.config(nc.r.Queue).LeaseDuration))
		c := &Claim{Job: nc.r.job(nc.payload), Cancelled: l.cancelled, q: q, token: nc.r.Token}
		if t.claimFor != nil {
			t.claimFor.claimed = c
		}
	}
	if t.durable && t.wrote {
		for _, id := range t.touched {
			q.gated[id]++
		}
	}
	q.mu.Unlock()
	if t.kick {
		select {
		case q.schedKick <- struct{}{}:
		default:
		}
	}
}

// afterDurable publishes what a transaction made claimable or finished,
// once it is durable (at once for a non-durable one), after running the
// callbacks its settlement effects asked for.
func (q *Queue) afterDurable(t *txn) {
	for _, fn := range t.onDurable {
		fn()
	}
	q.mu.Lock()
	if t.durable && t.wrote {
		for _, id := range t.touched {
			if q.gated[id]--; q.gated[id] <= 0 {
				delete(q.gated, id)
			}
		}
	}
	for name := range t.ready {
		qs := q.stateLocked(name)
		close(qs.ready)
		qs.ready = make(chan struct{})
	}
	if t.durable && t.wrote && len(t.touched) > 0 {
		// A claim skipped a gated job that became ready otherwise (a
		// promotion of a job this commit scheduled): look again.
		for _, qs := range q.queues {
			if qs.skippedGated {
				qs.skippedGated = false
				close(qs.ready)
				qs.ready = make(chan struct{})
			}
		}
	}
	for _, j := range t.finished {
		for _, ch := range q.waiters[j.ID] {
			ch <- j // buffered, one value
		}
		delete(q.waiters, j.ID)
	}
	q.mu.Unlock()
}

// isGated reports whether a durable commit that changed job id of queue
// qs is not durable yet, noting a skip so afterDurable wakes claimers.
func (q *Queue) isGated(qs *queueState, id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gated[id] > 0 {
		qs.skippedGated = true
		return true
	}
	return false
}

func (l *lease) signalCancel() {
	if !l.cancelSet {
		l.cancelSet = true
		close(l.cancelled)
	}
}

func (t *txn) put(k, v []byte) error {
	t.wrote = true
	return t.tx.Put(k, v)
}

func (t *txn) del(k []byte) error {
	t.wrote = true
	return t.tx.Delete(k)
}

func (t *txn) add(q string, st State, delta int64) error {
	t.wrote = true
	if invariants.Enabled {
		t.counted = append(t.counted, countKey(q, st))
	}
	return t.tx.Add(countKey(q, st), delta)
}

// checkCounters asserts (invariants builds) that the state counters a
// committed transaction changed are not negative.
func (q *Queue) checkCounters(t *txn) {
	if !invariants.Enabled {
		return
	}
	for _, k := range t.counted {
		v, err := q.db.Get(context.Background(), k)
		if err != nil {
			continue // deleted or the kv stopped
		}
		invariants.Check(len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= 0, "queue: counter %q is negative after a commit", k)
	}
}

// get reads key; a missing key is (nil, false, nil).
func (t *txn) get(k []byte) ([]byte, bool, error) {
	return t.tx.Lookup(t.ctx, k)
}

// record reads job id; a missing job is (nil, nil).
func (t *txn) record(id string) (*record, error) {
	v, ok, err := t.get(jobKey(id))
	if err != nil || !ok {
		return nil, err
	}
	return decodeRecord(v)
}

func (t *txn) putRecord(r *record) error {
	b, err := encodeRecord(r)
	if err != nil {
		return err
	}
	t.touched = append(t.touched, r.ID)
	return t.put(jobKey(r.ID), b)
}

func (t *txn) markReady(q string) {
	if t.ready == nil {
		t.ready = map[string]struct{}{}
	}
	t.ready[q] = struct{}{}
}

// makePending puts r (in no index) into the ready index with a fresh seq.
func (t *txn) makePending(r *record) error {
	r.State, r.Token, r.Seq = StatePending, 0, t.q.nextSeq()
	if err := t.putRecord(r); err != nil {
		return err
	}
	if err := t.put(readyKey(r.Queue, r.Priority, r.Seq), []byte(r.ID)); err != nil {
		return err
	}
	t.markReady(r.Queue)
	return t.add(r.Queue, StatePending, 1)
}

// makeScheduled puts r (in no index) into the scheduled index at r.RunAt.
func (t *txn) makeScheduled(r *record) error {
	r.State, r.Token = StateScheduled, 0
	if err := t.putRecord(r); err != nil {
		return err
	}
	if err := t.put(scheduledKey(r.Queue, r.RunAt, r.ID), nil); err != nil {
		return err
	}
	t.kick = true
	t.seen = append(t.seen, r.Queue)
	return t.add(r.Queue, StateScheduled, 1)
}

// makeDead moves r (in no index) to dead.
func (t *txn) makeDead(r *record, reason string) error {
	r.State, r.Token, r.FailedAt, r.LastError = StateDead, 0, t.now, reason
	if err := t.dropCancelEffects(r); err != nil {
		return err
	}
	if err := t.putRecord(r); err != nil {
		return err
	}
	if err := t.put(deadKey(r.Queue, r.FailedAt, r.ID), nil); err != nil {
		return err
	}
	t.durable = true
	t.finished = append(t.finished, r.job(nil))
	return t.add(r.Queue, StateDead, 1)
}

// remove deletes r (in no index) and everything it owns.
func (t *txn) remove(r *record) error {
	if err := t.releaseDedup(r); err != nil {
		return err
	}
	if err := t.del(jobKey(r.ID)); err != nil {
		return err
	}
	if r.HasPayload {
		if err := t.del(payloadKey(r.ID)); err != nil {
			return err
		}
	}
	return t.dropCancelEffects(r)
}

func (t *txn) dropCancelEffects(r *record) error {
	if !r.CancelRequested {
		return nil
	}
	return t.del(effectsKey(r.ID))
}

// unindex removes r from the index of its current state and its counter.
func (t *txn) unindex(r *record) error {
	var k []byte
	switch r.State {
	case StatePending:
		k = readyKey(r.Queue, r.Priority, r.Seq)
	case StateScheduled:
		k = scheduledKey(r.Queue, r.RunAt, r.ID)
	case StateClaimed:
		k = claimedKey(r.Queue, r.ID)
		t.drops = append(t.drops, leaseRef{r.ID, r.Token})
	case StateDone:
		k = doneKey(r.Queue, r.CompletedAt, r.ID)
	case StateDead:
		k = deadKey(r.Queue, r.FailedAt, r.ID)
	}
	if err := t.del(k); err != nil {
		return err
	}
	return t.add(r.Queue, r.State, -1)
}

// releaseDedup frees r's dedup key if r holds it.
func (t *txn) releaseDedup(r *record) error {
	if r.DedupKey == "" {
		return nil
	}
	k := dedupKey(r.Queue, r.DedupKey)
	v, ok, err := t.get(k)
	if err != nil || !ok || string(v) != r.ID {
		return err
	}
	return t.del(k)
}

// acquireDedup takes r's dedup key again when r returns to pending or
// scheduled and the key is free.
func (t *txn) acquireDedup(r *record) error {
	if r.DedupKey == "" {
		return nil
	}
	k := dedupKey(r.Queue, r.DedupKey)
	_, ok, err := t.get(k)
	if err != nil || ok {
		return err
	}
	return t.put(k, []byte(r.ID))
}

// recover seeds the in-memory state from the store and requeues the jobs
// whose claims did not survive the previous writer.
func (q *Queue) recover(ctx context.Context) error {
	// Known queues, from the counter keys every queue has.
	err := q.db.Scan(ctx, kv.PrefixRange([]byte(pfxCount)), func(k, _ []byte) (bool, error) {
		if name, ok := queueOfCountKey(k); ok {
			q.state(name)
		}
		return true, nil
	})
	if err != nil {
		return wrapKV("open: scan queues", err)
	}
	// The ready sequence continues after the highest one in use.
	var maxSeq uint64
	for _, name := range q.queueNames() {
		err := q.db.Scan(ctx, kv.PrefixRange(queuePrefix(pfxReady, name)), func(k, _ []byte) (bool, error) {
			if s, ok := readySeq(name, k); ok && s > maxSeq {
				maxSeq = s
			}
			return true, nil
		})
		if err != nil {
			return wrapKV("open: scan ready index", err)
		}
	}
	q.seq.Store(maxSeq)
	// Claims live in memory only: every claimed job lost its worker.
	for {
		var keys [][]byte
		err := q.db.Scan(ctx, kv.Range{Start: []byte(pfxClaimed), End: prefixEnd([]byte(pfxClaimed)), Limit: recoverBatch},
			func(k, _ []byte) (bool, error) {
				keys = append(keys, bytes.Clone(k))
				return true, nil
			})
		if err != nil {
			return wrapKV("open: scan claimed index", err)
		}
		if len(keys) == 0 {
			return nil
		}
		err = q.update(ctx, "open: requeue interrupted claims", true, func(t *txn) error {
			for _, k := range keys {
				i := bytes.IndexByte(k, 0)
				ok, err := t.requeueClaimed(string(k[i+1:]), "interrupted", "interrupted: the queue was reopened while the job was claimed")
				if err != nil {
					return err
				}
				if !ok { // impossible by construction; drop it rather than loop on it
					t.q.log.Warn("dropping stale claimed-index entry", "key", string(k))
					if err := t.del(k); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		q.log.Info("requeued interrupted claims", "jobs", len(keys))
	}
}

// requeueClaimed ends the claim of job id (interrupted or lease expired) and
// puts it back to pending, or to dead when it used its last attempt. It
// reports false, changing nothing, when the job is missing or not claimed.
func (t *txn) requeueClaimed(id, outcome, reason string) (bool, error) {
	r, err := t.record(id)
	if err != nil || r == nil || r.State != StateClaimed {
		return false, err
	}
	if err := t.unindex(r); err != nil {
		return false, err
	}
	r.endAttempt(t.now, outcome, reason)
	if r.Attempts >= r.MaxAttempts {
		return true, t.makeDead(r, reason)
	}
	r.LastError = reason
	if err := t.acquireDedup(r); err != nil {
		return false, err
	}
	return true, t.makePending(r)
}

// startLoops starts the scheduler, the reaper and the sweeper.
func (q *Queue) startLoops() {
	// Timers are armed here, before Open returns, so a test's first
	// clock.Mock.Advance reaches them.
	q.wg.Add(2)
	sched := q.clock.NewTimer(time.Hour)
	sched.Stop()
	go q.schedulerLoop(sched)
	go q.periodicLoop(q.clock.NewTimer(q.opts.ReapInterval), q.opts.ReapInterval, "reap", func(ctx context.Context) error {
		_, err := q.Reap(ctx)
		return err
	})
	if q.opts.SweepInterval > 0 {
		q.wg.Add(1)
		go q.periodicLoop(q.clock.NewTimer(q.opts.SweepInterval), q.opts.SweepInterval, "sweep", func(ctx context.Context) error {
			_, err := q.Sweep(ctx)
			return err
		})
	}
}

// loopContext is cancelled when the queue closes.
func (q *Queue) loopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-q.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (q *Queue) pass(name string, at time.Time) {
	if h := q.passHook.Load(); h != nil {
		(*h)(name, at)
	}
}

// periodicLoop runs pass every interval until the queue closes; the first
// run is when timer fires. A failed pass is logged and the next one tries
// again. name labels logs and the test hook.
func (q *Queue) periodicLoop(timer clock.Timer, interval time.Duration, name string, pass func(context.Context) error) {
	defer q.wg.Done()
	ctx, cancel := q.loopContext()
	defer cancel()
	defer timer.Stop()
	for {
		select {
		case <-q.done:
			return
		case <-timer.C():
		}
		at := q.clock.Now()
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			q.log.Error(name+" pass failed", "err", err)
		}
		timer.Reset(interval)
		q.pass(name, at)
	}
}

func (q *Queue) schedulerLoop(timer clock.Timer) {
	defer q.wg.Done()
	ctx, cancel := q.loopContext()
	defer cancel()
	defer timer.Stop()
	for {
		at := q.clock.Now()
		_, err := q.PromoteDue(ctx)
		var next time.Time
		var ok bool
		if err == nil {
			next, ok, err = q.nextRunAt(ctx)
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				q.log.Error("scheduler pass failed", "err", err)
			}
			timer.Reset(q.opts.ReapInterval) // retry later rather than spin
		case ok:
			timer.ResetAt(next) // not Reset(next-now): the clock may move in between
		default:
			timer.Stop()
		}
		q.pass("schedule", at) // after the timer is armed, so a test may Advance next
		select {
		case <-q.done:
			return
		case <-timer.C():
		case <-q.schedKick:
		}
	}
}
