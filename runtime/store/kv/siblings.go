package kv

import (
	"context"
	"time"
)

// DefaultCommitDelay is Options.CommitDelay's default.
const DefaultCommitDelay = 5 * time.Millisecond

// Committer stands for a client that makes one durable commit after
// another, each after the previous one is durable (a worker running a
// run's steps): while it is registered, a WAL batch that is ready to go
// may wait a bounded time for its next commit to join (see doc.go, "Group
// commit with company"). A commit counts as the committer's when its
// context carries it (WithCommitter). Safe for concurrent use.
type Committer struct {
	db     *DB
	joined *batch // the batch its last durable commit joined (under db.mu)
	left   bool
}

// Committer registers a committer. Call Leave once no commit of it is
// coming any more (the run left the worker); a committer that never
// leaves only delays flushes, by at most Options.CommitDelay each.
func (db *DB) Committer() *Committer {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.committers++
	return &Committer{db: db}
}

// Leave deregisters c: no batch waits for it any more. It is idempotent.
func (c *Committer) Leave() {
	db := c.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if c.left {
		return
	}
	c.left = true
	db.committers--
	if b := c.joined; b != nil && !b.sealed {
		b.joiners--
	}
	c.joined = nil
	db.cond.Broadcast()
}

type committerKey struct{}

// WithCommitter returns ctx carrying c: durable commits made with it count
// as c's. A nil c hides the committer ctx carried (for calls that commit on
// behalf of someone else).
func WithCommitter(ctx context.Context, c *Committer) context.Context {
	return context.WithValue(ctx, committerKey{}, c)
}

func committerFrom(ctx context.Context) *Committer {
	c, _ := ctx.Value(committerKey{}).(*Committer)
	return c
}

// joinLocked records a durable commit joining b, c's when c is not nil.
func (db *DB) joinLocked(b *batch, c *Committer, now time.Time) {
	b.lastJoin = now
	if c != nil && c.db == db && !c.left && c.joined != b {
		c.joined = b
		b.joiners++
	}
}

// holdForCompanyLocked reports whether the flusher should keep b, the
// open batch that a durable commit made ready, a little longer because
// registered committers have not joined it yet. It holds b only while
//
//   - some registered committer has not joined b,
//   - less than Options.CommitDelay passed since b became ready, and
//   - less than one WAL PUT's duration (the last one's, at most
//     CommitDelay) passed since the last durable commit joined b: company
//     that takes longer than a PUT to come is cheaper in the next PUT.
//
// A lone committer, or every committer already in b, never waits. When
// it holds b it arms a timer for the moment the wait would end.
func (db *DB) holdForCompanyLocked(b *batch) bool {
	delay := db.opts.CommitDelay
	if delay <= 0 || db.committers <= b.joiners {
		return false
	}
	now := db.opts.Clock.Now()
	if b.readyAt.IsZero() {
		b.readyAt = now
	}
	gap := delay
	if db.lastPut > 0 {
		gap = min(db.lastPut, delay)
	}
	since := b.readyAt
	if b.lastJoin.After(since) {
		since = b.lastJoin
	}
	end := b.readyAt.Add(delay)
	if e := since.Add(gap); e.Before(end) {
		end = e
	}
	if !now.Before(end) {
		return false
	}
	if !b.held {
		b.held = true
		db.heldBatches.Add(1)
	}
	db.armDelayLocked(end)
	return true
}

// armDelayLocked wakes the flusher at end, unless a wake-up at or before
// end is pending already. A superseded timer still fires; the flusher
// then finds nothing to do.
func (db *DB) armDelayLocked(end time.Time) {
	if db.delayArmed && !db.delayAt.After(end) {
		return
	}
	db.delayArmed, db.delayAt = true, end
	db.opts.Clock.AfterFunc(end.Sub(db.opts.Clock.Now()), func() {
		db.mu.Lock()
		if db.delayAt.Equal(end) {
			db.delayArmed = false
		}
		db.cond.Broadcast()
		db.mu.Unlock()
	})
}
