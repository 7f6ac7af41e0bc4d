package runtime

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// freezeStore models a crash at a chosen WAL write: once armed, it lets
// allow more WAL PUTs through and then drops every later write (reporting
// success), so the inner store keeps exactly the state a process killed at
// that point leaves behind.
type freezeStore struct {
	objstore.Store
	mu     sync.Mutex
	armed  bool
	allow  int
	frozen bool
}

func (f *freezeStore) arm(allow int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.allow, f.frozen = true, allow, false
}

func (f *freezeStore) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.frozen = false, false
}

// pass reports whether a write of key reaches the inner store.
func (f *freezeStore) pass(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed {
		return true
	}
	if !f.frozen && strings.Contains(key, "/wal/") {
		if f.allow == 0 {
			f.frozen = true
		} else {
			f.allow--
		}
	}
	return !f.frozen
}

func (f *freezeStore) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if !f.pass(key) {
		return objstore.ObjectInfo{Key: key, Size: int64(len(data)), ETag: "frozen"}, nil
	}
	return f.Store.Put(ctx, key, data, opts)
}

func (f *freezeStore) Delete(ctx context.Context, key string) error {
	if !f.pass(key) {
		return nil
	}
	return f.Store.Delete(ctx, key)
}

// A crash right after the reconcile's first durable commit leaves either
// the whole termination or none of it: the run is reconciled (and its
// termination notified) exactly once.
func TestReconcileIsOneCommitAcrossACrash(t *testing.T) {
	fs := &freezeStore{Store: mem.New()}
	cfg := defaultQueueConfig()
	cfg.MaxAttempts = 1
	e := newEnvCfg(t, fs, cfg, echo())
	e.submit(RunSpec{RunID: "rc1"})
	if c, err := e.q.Claim(e.ctx, DefaultQueueName); err != nil || c == nil {
		t.Fatalf("claim %v %v", c, err)
	}
	e.reopen() // the claim was the last attempt: recovery dead-letters it
	fs.arm(1)  // the process dies right after its next WAL write
	n, err := e.rt.Reconcile(e.ctx)
	if err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v; want 1", n, err)
	}
	e.close()
	fs.thaw()
	e.open() // what a restart finds in the store
	n, err = e.rt.Reconcile(e.ctx)
	if err != nil {
		t.Fatalf("Reconcile after the crash: %v", err)
	}
	if n != 0 {
		t.Fatalf("Reconcile after the crash terminated %d runs again; the first reconcile was not one commit", n)
	}
	if s, err := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); err != nil || s.Pending != 1 {
		t.Fatalf("notification queue %+v, %v; want exactly one notification", s, err)
	}
	e.start()
	if o := e.outcome(); o.RunID != "rc1" || o.Status != runstate.Failed {
		t.Fatalf("outcome %+v", o)
	}
	e.expectState("rc1", runstate.StateFailed)
}

// A concurrent change between the reconcile's reads and its commit (here
// the run's records removed) makes the guarded commit apply nothing.
func TestReconcileGuardSkipsAChangedRun(t *testing.T) {
	cfg := defaultQueueConfig()
	cfg.MaxAttempts = 1
	e := newEnvCfg(t, mem.New(), cfg, echo())
	e.submit(RunSpec{RunID: "rc2"})
	if c, err := e.q.Claim(e.ctx, DefaultQueueName); err != nil || c == nil {
		t.Fatalf("claim %v %v", c, err)
	}
	e.reopen()
	e.rt.beforeReconcileCommit = func(runID string) {
		if err := e.q.KVDelete(e.ctx, stepKey(runID)); err != nil {
			t.Error(err)
		}
	}
	if n, err := e.rt.Reconcile(e.ctx); err != nil || n != 0 {
		t.Fatalf("Reconcile = %d, %v; want 0", n, err)
	}
	if s, _ := e.q.Stats(e.ctx, e.rt.NotifyQueueName()); s.Pending != 0 {
		t.Fatalf("notification queue %+v; want none", s)
	}
	if _, err := e.q.KVGet(e.ctx, runKey("rc2")); err != nil {
		t.Fatalf("run record: %v; the guarded commit must not apply", err)
	}
}
