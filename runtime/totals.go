package runtime

import (
	"context"
	"fmt"
	"sync"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Per-run totals. Each settlement of a run's step writes, in its own
// commit, what the run has cost so far: the object-store requests it
// caused and the counters its runner reported (Step.AddTotal: the
// interpreter's steps, attempts, retries, LLM tokens and cost). Requests
// are counted, not estimated:
//
//   - the run's own requests (memo, replay, and whatever the runner makes
//     through a store wrapped with counting.Scoped under the step's
//     context: definitions, large outputs) are counted as they are made;
//   - each WAL PUT that made one of the run's commits durable (its
//     submission and settlements) is split evenly among the commits it
//     carried (group commit), and the run is charged its commits' shares.
//     A claim that rides another commit's PUT is free, as the queue's own
//     housekeeping is.
//
// What a commit's PUT cost is known once it is durable, so it is carried
// in memory to the run's next settlement; the terminating commit's share
// is written with the termination notification's acknowledgement (so
// without a terminal hook, or when another process handles the
// notification after a crash, that last share is not counted; nor are
// the requests of a delivery a crash interrupts). A run id used again
// starts from zero (the record names its incarnation).

// totalsRecord is what workflow/totals/<run> holds.
type totalsRecord struct {
	Nonce    string             `msgpack:"n"`
	Puts     float64            `msgpack:"p,omitempty"`
	Gets     float64            `msgpack:"g,omitempty"`
	Lists    float64            `msgpack:"l,omitempty"`
	Deletes  float64            `msgpack:"d,omitempty"`
	Heads    float64            `msgpack:"h,omitempty"`
	Counters map[string]float64 `msgpack:"c,omitempty"`
}

func (r *totalsRecord) totals() *runstate.Totals {
	return &runstate.Totals{Puts: r.Puts, Gets: r.Gets, Lists: r.Lists, Deletes: r.Deletes, Heads: r.Heads, Counters: r.Counters}
}

func (r *totalsRecord) add(o *totalsRecord) {
	r.Puts += o.Puts
	r.Gets += o.Gets
	r.Lists += o.Lists
	r.Deletes += o.Deletes
	r.Heads += o.Heads
	for k, v := range o.Counters {
		if r.Counters == nil {
			r.Counters = map[string]float64{}
		}
		r.Counters[k] += v
	}
}

func (r *totalsRecord) addCounts(c counting.Counts) {
	r.Puts += float64(c.Puts)
	r.Gets += float64(c.Gets)
	r.Lists += float64(c.Lists)
	r.Deletes += float64(c.Deletes)
	r.Heads += float64(c.Heads)
}

// pendingTotals carries, per run, what is not written yet: the WAL
// shares of commits made durable since the run's last settlement, and
// the requests of deliveries that did not settle.
type pendingTotals struct {
	mu  sync.Mutex
	run map[string]*totalsRecord
}

func (p *pendingTotals) add(runID string, r *totalsRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		p.run = map[string]*totalsRecord{}
	}
	if cur := p.run[runID]; cur != nil {
		cur.add(r)
		return
	}
	cp := *r
	cp.Counters = nil
	cp.add(&totalsRecord{Counters: r.Counters})
	p.run[runID] = &cp
}

// take removes and returns what is pending for runID (nil when nothing).
func (p *pendingTotals) take(runID string) *totalsRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.run[runID]
	delete(p.run, runID)
	return r
}

// AddTotal adds delta to the run's counter name (steps, tokens, cost:
// anything the runner wants summed over the run, shown by Status). It is
// written with the settlement of this delivery's outcome, and dropped
// when that outcome is not committed. Safe for concurrent use.
func (s *Step) AddTotal(name string, delta float64) {
	s.durableMu.Lock()
	defer s.durableMu.Unlock()
	if s.totals == nil {
		s.totals = map[string]float64{}
	}
	s.totals[name] += delta
}

func totalsKey(runID string) string { return kvTotals + runID }

// loadTotals reads the run's totals record of incarnation nonce.
func loadTotals(ctx context.Context, r kvGetter, runID, nonce string) (*totalsRecord, error) {
	b, err := kvGet(ctx, r, totalsKey(runID))
	if err != nil || b == nil {
		return &totalsRecord{Nonce: nonce}, err
	}
	var t totalsRecord
	if err := decodeRecord("totals", b, &t); err != nil {
		return nil, fmt.Errorf("run %s: %w", runID, err)
	}
	if t.Nonce != nonce {
		return &totalsRecord{Nonce: nonce}, nil // an earlier run under the same id
	}
	return &t, nil
}

// totalsWrite returns the KV write of the run's totals after this
// delivery: the stored ones, what was pending, and what the delivery
// counted. It takes what was pending; putBack returns it if the
// settlement does not commit.
func (d *delivery) totalsWrite(ctx context.Context) (queue.KVWrite, *totalsRecord, error) {
	rt := d.rt
	t, err := loadTotals(ctx, rt.q, d.runID, d.rec.Nonce)
	if err != nil {
		return queue.KVWrite{}, nil, err
	}
	pending := rt.pending.take(d.runID)
	if pending != nil {
		t.add(pending)
	}
	own := &totalsRecord{}
	own.addCounts(d.counter.Counts())
	if d.step != nil {
		d.step.durableMu.Lock()
		own.Counters = d.step.totals
		d.step.durableMu.Unlock()
	}
	t.add(own)
	b, err := encodeRecord(t)
	if err != nil {
		return queue.KVWrite{}, nil, err
	}
	if pending == nil {
		pending = &totalsRecord{}
	}
	return queue.KVWrite{Key: totalsKey(d.runID), Value: b}, pending, nil
}

// unsettled keeps the requests of a delivery that did not settle (and
// what it took from pending) for the run's next settlement.
func (d *delivery) unsettled(taken *totalsRecord) {
	if d.kept {
		return
	}
	d.kept = true
	r := &totalsRecord{}
	if taken != nil {
		r.add(taken)
	}
	r.addCounts(d.counter.Counts())
	d.rt.pending.add(d.runID, r)
}

// finalTotals adds what is pending for an ended run (its terminating
// commit's WAL share) to its stored totals; ok is false when there is
// nothing to write.
func (rt *Runtime) finalTotals(ctx context.Context, runID string, pending *totalsRecord) (queue.KVWrite, bool) {
	if pending == nil {
		return queue.KVWrite{}, false
	}
	b, err := kvGet(ctx, rt.q, totalsKey(runID))
	if err != nil || b == nil {
		return queue.KVWrite{}, false
	}
	var t totalsRecord
	if decodeRecord("totals", b, &t) != nil {
		return queue.KVWrite{}, false
	}
	t.add(pending)
	nb, err := encodeRecord(&t)
	if err != nil {
		return queue.KVWrite{}, false
	}
	return queue.KVWrite{Key: totalsKey(runID), Value: nb}, true
}

// endTotals adds to sef, which ends runID's incarnation nonce outside a
// step's settlement (a Cancel that removes a pending step, a reconcile),
// the run's totals with what is pending for it (taken; the caller puts
// it back if sef does not commit), or their deletion when no result is
// retained.
func (rt *Runtime) endTotals(ctx context.Context, sef *queue.SettlementEffects, runID, nonce string) (taken *totalsRecord, err error) {
	taken = rt.pending.take(runID)
	if rt.cfg.resultRetention == 0 {
		sef.KVDeletes = append(sef.KVDeletes, totalsKey(runID))
		return taken, nil
	}
	t, err := loadTotals(ctx, rt.q, runID, nonce)
	if err != nil {
		rt.pending.add(runID, orEmpty(taken))
		return nil, err
	}
	if taken != nil {
		t.add(taken)
	}
	b, err := encodeRecord(t)
	if err != nil {
		rt.pending.add(runID, orEmpty(taken))
		return nil, err
	}
	sef.KVPuts = append(sef.KVPuts, queue.KVWrite{Key: totalsKey(runID), Value: b})
	return taken, nil
}

// putBack returns taken to the run's pending totals.
func (rt *Runtime) putBack(runID string, taken *totalsRecord) {
	if taken != nil {
		rt.pending.add(runID, taken)
	}
}

func orEmpty(r *totalsRecord) *totalsRecord {
	if r == nil {
		return &totalsRecord{}
	}
	return r
}
