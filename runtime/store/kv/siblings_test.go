package kv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// The tests below run in a synctest bubble: its clock moves only while
// every goroutine of the bubble is blocked, so "elapsed" is exactly the
// time the flusher waited on a timer, never scheduling noise.

// commitAs commits key=value durably as c (nil: as nobody).
func commitAs(t *testing.T, db *DB, c *Committer, key string) {
	t.Helper()
	ctx := WithCommitter(context.Background(), c)
	if err := db.Update(ctx, func(tx *Tx) error { return tx.Put([]byte(key), []byte("v")) }); err != nil {
		t.Errorf("commit %s: %v", key, err)
	}
}

func openInBubble(t *testing.T, store objstore.Store, delay time.Duration) *DB {
	t.Helper()
	opts := quietOpts()
	opts.CommitDelay = delay
	opts.DisableAutoCheckpoint = true
	return mustOpen(t, store, opts)
}

// (a) A lone durable commit is never delayed: neither by no committer
// being registered, nor by being the only one.
func TestLoneDurableCommitIsNotDelayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := openInBubble(t, mem.New(), time.Hour)
		defer db.Close()
		start := time.Now()
		commitAs(t, db, nil, "anon")
		c := db.Committer()
		defer c.Leave()
		for i := range 3 {
			commitAs(t, db, c, fmt.Sprintf("k%d", i))
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("four lone commits took %v of the bubble's clock; want 0 (no wait)", d)
		}
		if n := db.Stats().HeldBatches; n != 0 {
			t.Fatalf("HeldBatches = %d; want 0", n)
		}
	})
}

// (b) N registered committers that commit at once share one WAL PUT,
// and nobody waits on the delay's timer: the batch goes as soon as the
// last of them joined.
func TestConcurrentCommittersShareOnePut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 16
		db := openInBubble(t, mem.New(), time.Hour)
		defer db.Close()
		cs := make([]*Committer, n)
		for i := range cs {
			cs[i] = db.Committer()
		}
		before := db.Stats()
		start := time.Now()
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() { commitAs(t, db, c, fmt.Sprintf("k%02d", i)) })
		}
		wg.Wait()
		after := db.Stats()
		if puts := after.WALPuts - before.WALPuts; puts != 1 {
			t.Fatalf("%d concurrent committers made %d WAL PUTs; want 1", n, puts)
		}
		if got := after.DurableCommits - before.DurableCommits; got != n {
			t.Fatalf("durable commits = %d; want %d", got, n)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the shared PUT waited %v; want 0 (every committer joined)", d)
		}
		for _, c := range cs {
			c.Leave()
		}
	})
}

// (c) A batch waits for a registered committer that does not come at
// most Options.CommitDelay, and a committer that leaves ends the wait.
func TestCommitDelayIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 3 * time.Millisecond
		db := openInBubble(t, mem.New(), delay)
		defer db.Close()
		present, absent := db.Committer(), db.Committer()
		start := time.Now()
		commitAs(t, db, present, "a")
		if d := time.Since(start); d != delay {
			t.Fatalf("a commit with an absent sibling took %v; want exactly CommitDelay (%v)", d, delay)
		}
		if n := db.Stats().HeldBatches; n != 1 {
			t.Fatalf("HeldBatches = %d; want 1", n)
		}

		// The absent committer leaves while a batch waits for it: the
		// batch goes at once.
		start = time.Now()
		done := make(chan struct{})
		go func() { defer close(done); commitAs(t, db, present, "b") }()
		synctest.Wait() // the commit joined and the flusher holds it
		absent.Leave()
		<-done
		if d := time.Since(start); d != 0 {
			t.Fatalf("after the only absent committer left, the commit took %v; want 0", d)
		}
		present.Leave()
	})
}

// The wait also ends once no commit joined for one WAL PUT's duration:
// company slower than a PUT is cheaper in the next one.
func TestCommitDelayEndsAfterAPutWithoutCompany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const put = 2 * time.Millisecond
		store := faults.New(mem.New(), 1)
		db := openInBubble(t, store, time.Hour)
		defer db.Close()
		store.Set(faults.Rule{Ops: faults.OpPut, Rate: 1, Latency: put})
		present, absent := db.Committer(), db.Committer()
		defer absent.Leave()
		defer present.Leave()
		commitAs(t, db, nil, "first") // a PUT of known duration
		start := time.Now()
		commitAs(t, db, present, "a")
		if d := time.Since(start); d != put+put {
			t.Fatalf("a commit with an absent sibling took %v; want one PUT's wait plus its PUT (%v)", d, put+put)
		}
	})
}

// (d) A Sync while a batch waits for company does not end the wait: the
// reader waits for the PUT the committers share instead of splitting it.
// Before, Sync hurried the batch out, and a status read per submitted run
// cost the other runs' settlements a PUT each time.
func TestSyncWaitsWithTheCompany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := openInBubble(t, mem.New(), time.Hour)
		defer db.Close()
		a, b := db.Committer(), db.Committer()
		defer a.Leave()
		defer b.Leave()
		before := db.Stats()
		committed := make(chan struct{})
		go func() { defer close(committed); commitAs(t, db, a, "a") }()
		synctest.Wait() // a's commit is held for b
		synced := make(chan error, 1)
		go func() { synced <- db.Sync(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-synced:
			t.Fatalf("Sync returned (%v) while the batch it waits for was held for company", err)
		default:
		}
		commitAs(t, db, b, "b")
		<-committed
		if err := <-synced; err != nil {
			t.Fatalf("Sync: %v", err)
		}
		if puts := db.Stats().WALPuts - before.WALPuts; puts != 1 {
			t.Fatalf("two committers and a Sync made %d WAL PUTs; want 1", puts)
		}
	})
}

// (e) A Sync's wait for company is bounded like a commit's: at most
// CommitDelay, and none at all when no registered committer is missing.
func TestSyncWaitForCompanyIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 3 * time.Millisecond
		opts := quietOpts()
		opts.CommitDelay = delay
		opts.Linger = time.Hour // only Sync can make a non-durable commit go
		opts.DisableAutoCheckpoint = true
		db := mustOpen(t, mem.New(), opts)
		defer db.Close()
		ctx := context.Background()
		put := func(k string) {
			if err := db.UpdateNonDurable(ctx, func(tx *Tx) error { return tx.Put([]byte(k), []byte("v")) }); err != nil {
				t.Fatal(err)
			}
		}
		put("alone")
		start := time.Now()
		if err := db.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Sync with no committer registered took %v; want 0", d)
		}
		absent := db.Committer()
		defer absent.Leave()
		put("company")
		start = time.Now()
		if err := db.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != delay {
			t.Fatalf("Sync with an absent committer took %v; want exactly CommitDelay (%v)", d, delay)
		}
	})
}

// (f) A registered committer that calls Sync is blocked on the batch it
// waits for, so the batch does not wait for that committer's next
// commit: a step's runner reading a status (its ctx carries its
// worker's committer) never waits for itself.
func TestSyncOfACommitterDoesNotWaitForItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := openInBubble(t, mem.New(), time.Hour)
		defer db.Close()
		runner, other := db.Committer(), db.Committer()
		defer runner.Leave()
		defer other.Leave()
		before := db.Stats()
		start := time.Now()
		committed := make(chan struct{})
		go func() { defer close(committed); commitAs(t, db, other, "other") }()
		synctest.Wait() // held for runner
		if err := db.Sync(WithCommitter(context.Background(), runner)); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		<-committed
		if d := time.Since(start); d != 0 {
			t.Fatalf("Sync as the only missing committer took %v; want 0", d)
		}
		if puts := db.Stats().WALPuts - before.WALPuts; puts != 1 {
			t.Fatalf("WAL PUTs = %d; want 1", puts)
		}
	})
}
