package interpreter

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/actions"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// walGate is a store that, once armed, holds every PUT of a WAL object
// (the kv's queue/wal/<seq>, docs/STORE-LAYOUT.md) until released.
type walGate struct {
	objstore.Store
	armed   atomic.Bool
	heldOne sync.Once
	held    chan struct{} // closed when the first WAL PUT is held
	release chan struct{} // closed by open, to let the held PUTs through
	opened  sync.Once
	landed  atomic.Bool // a held PUT reached the store
}

func (g *walGate) open() { g.opened.Do(func() { close(g.release) }) }

func newWALGate(inner objstore.Store) *walGate {
	return &walGate{Store: inner, held: make(chan struct{}), release: make(chan struct{})}
}

func (g *walGate) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if !g.armed.Load() || !strings.HasPrefix(key, "queue/wal/") {
		return g.Store.Put(ctx, key, data, opts)
	}
	g.heldOne.Do(func() { close(g.held) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return objstore.ObjectInfo{}, ctx.Err()
	}
	info, err := g.Store.Put(ctx, key, data, opts)
	if err == nil {
		g.landed.Store(true)
	}
	return info, err
}

// holdAction runs until released.
type holdAction struct{ entered, release chan struct{} }

func (holdAction) Name() string { return "hold" }
func (h holdAction) Execute(ctx context.Context, _ *actions.Call) (any, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return "held", nil
}

// syncProbe is the writer's queue telling when a read barrier starts.
type syncProbe struct {
	*queue.Queue
	once   sync.Once
	called chan struct{}
}

func (p *syncProbe) Sync(ctx context.Context) error {
	p.once.Do(func() { close(p.called) })
	return p.Queue.Sync(ctx)
}

// Issue 22: History on the writer's queue (as the HTTP API reads it,
// under WithSealed) does not report a step whose settlement is applied
// in the writer's memory but whose WAL PUT has not landed: it returns
// the step only once that PUT is in the store. Before the fix it
// returned it at once, so a server killed then ran the step again.
func TestHistoryWaitsForTheSettlementsWALPut(t *testing.T) {
	var gate *walGate
	act := holdAction{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newTestEnv(t, withActions(act), func(e *tenv) {
		gate = newWALGate(e.store)
		e.store = gate
	})
	t.Cleanup(gate.open) // before the env closes its queue
	path := e.write("held.yaml", `
tqw: v1
name: held
steps:
  - id: a
    action: hold
  - id: w
    action: wait_signal
    with: {key: "go:${ run.id }", timeout: 1h}
  - id: done
    succeed: "ok"
`)
	e.submit(path, map[string]any{}, "r1")
	e.start()
	select {
	case <-act.entered:
	case <-e.ctx.Done():
		t.Fatal("step a never started")
	}
	gate.armed.Store(true)
	close(act.release)
	select {
	case <-gate.held:
	case <-e.ctx.Done():
		t.Fatal("no WAL PUT after step a ended")
	}
	// The settlement is applied in memory (read without the barrier)
	// while its WAL PUT, or one before it, is held.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		recs, err := history(e.ctx, e.q, nil, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if hasStep(recs, "a") {
			break
		}
		select {
		case <-tick.C:
		case <-e.ctx.Done():
			t.Fatal("step a's history record never reached the writer's memory")
		}
	}
	if gate.landed.Load() {
		t.Fatal("a WAL PUT landed while the gate held them")
	}

	probe := &syncProbe{Queue: e.q, called: make(chan struct{})}
	type answer struct {
		recs []HistoryRecord
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		recs, err := History(e.ctx, WithSealed(probe, e.rt.Inspector()), nil, "r1")
		done <- answer{recs, err}
	}()
	select {
	case a := <-done:
		if a.err == nil && hasStep(a.recs, "a") && !gate.landed.Load() {
			t.Fatalf("History reported step a (%s) while the WAL PUT holding its settlement was held", outcomes(a.recs))
		}
		t.Fatalf("History returned (%s, %v) before its read barrier", outcomes(a.recs), a.err)
	case <-probe.called:
	}
	gate.open()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	if !hasStep(a.recs, "a") || !gate.landed.Load() {
		t.Fatalf("History after the PUT landed: %q (landed %v); want step a, durable", outcomes(a.recs), gate.landed.Load())
	}
}

func hasStep(recs []HistoryRecord, step string) bool {
	for _, h := range recs {
		if h.Step == step {
			return true
		}
	}
	return false
}
