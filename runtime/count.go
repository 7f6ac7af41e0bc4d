package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/tqw-dsl/tqw/runtime/archive"
	"github.com/tqw-dsl/tqw/runtime/inspect"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// CountRuns counts by state the runs ListRuns lists with opts.States
// (every state when empty), without listing them: a sealed run is
// counted from its segment's catalog entry (state counts, kept in
// memory), so only the runs still in the KV are visited, one by one:
// active runs and finished runs not sealed yet. A visit reads nothing
// by key but an active run's job (and its step pointer, when written
// after the scan passed its id), and decodes little: run records, step
// pointers and cancels are scanned side by side (a run record decoded
// only when a cancel names its id), a result's state alone is decoded,
// and of the job only its state and signal header (StateReader.JobState).
// An id held by several (a run id reused after its run ended) is counted
// once, by its newest copy, as ListRuns lists it (runtime/inspect: the
// sealed runs are a tier counted by the catalog's tally, and each id in
// the KV takes back the sealed copy it hides). Cost: memory reads; the
// index of a segment (cached, else one GET) only when a run id may be
// held by two of them or by a segment and the KV, and, after the catalog
// changed, a merge of the run-id hashes of the segments whose id ranges
// overlap. The catalog
// has no per-label counts, so opts.Labels, After and Limit are refused:
// list those.
func (in *Inspector) CountRuns(ctx context.Context, opts runstate.ListOptions) (map[runstate.State]int, error) {
	if len(opts.Labels) > 0 || opts.After != "" || opts.Limit != 0 {
		return nil, errors.New("runtime: count runs: only States selects what CountRuns counts; list the runs to count them by label or from a cursor")
	}
	keep := stateSet(opts.States)
	counts := map[runstate.State]int{}
	sealed, err := in.sealedCounts(ctx)
	if err != nil {
		return nil, err
	}
	for i, n := range sealed.byState {
		counts[runstate.TerminalStatus(i+1).State()] += n
	}
	// Runs in the KV, merged: an active record hides a result record of
	// the same id, and both hide its sealed entries, which the tally
	// counted and are taken back.
	holders := &holderSweep{in: in, segs: sealed.byMinID}
	m := &inspect.Merge[runCopy]{Tiers: []inspect.Tier[runCopy]{
		{Cursor: &kvTierCursor{c: &kvCursor{r: in.r, prefix: kvRuns}, kind: copyActive}},
		{Cursor: &kvTierCursor{c: &kvCursor{r: in.r, prefix: kvResults}, kind: copyResult}},
		{Counted: true, Probe: func(ctx context.Context, id string) (runCopy, bool, error) {
			e, _, err := holders.entry(ctx, id)
			return runCopy{kind: copySealed, entry: e}, e != nil, err
		}},
	}}
	// The step pointers and cancels are scanned beside the run records (all
	// three are keyed by run id), so a run costs no point read but its
	// job's state.
	steps := &kvCursor{r: in.r, prefix: kvSteps}
	cancels := &kvCursor{r: in.r, prefix: kvCancel}
	for {
		r, ok, err := m.Next(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		var st runstate.State
		if r.Copy.kind == copyActive {
			st, err = in.countedState(ctx, &kvItem{id: r.ID, value: r.Copy.value}, steps, cancels)
		} else if st, err = decodeResultState(r.Copy.value); err != nil {
			err = fmt.Errorf("run %s: %w", r.ID, err)
		}
		if err != nil {
			return nil, err
		}
		counts[st]++
		for _, h := range r.Hidden {
			counts[runstate.TerminalStatus(h.entry.Status).State()]--
		}
	}
	for st, n := range counts {
		if !keep(st) || n == 0 {
			delete(counts, st)
		}
	}
	if err := in.durable(ctx); err != nil {
		return nil, err
	}
	return counts, nil
}

// countedState is the state activeState gives the active run it (its run
// record), reading its step pointer and cancel from cursors that follow
// the run ids in order, and of its job only the state and signal header.
// A pointer the scan missed (written after its page was read) is read
// directly, as activeState would.
func (in *Inspector) countedState(ctx context.Context, it *kvItem, steps, cancels *kvCursor) (runstate.State, error) {
	ptrBytes, err := seek(ctx, steps, it.id)
	if err != nil {
		return 0, err
	}
	jobID := ""
	if ptrBytes != nil {
		if jobID, err = decodePointerJob(ptrBytes); err != nil {
			return 0, fmt.Errorf("run %s: %w", it.id, err)
		}
	} else if ptr, err := loadPointer(ctx, in.r, it.id); err != nil {
		return 0, err
	} else if ptr != nil {
		jobID = ptr.JobID
	}
	var job queue.State
	wait := ""
	if jobID != "" {
		job, wait, err = in.r.JobState(ctx, jobID, headerSignalWait)
		if errors.Is(err, queue.ErrNotFound) {
			job, err = "", nil
		}
		if err != nil {
			return 0, fmt.Errorf("runtime: count runs: run %s: job %s: %w", it.id, jobID, err)
		}
	}
	return activeRunState(job, wait, func() (bool, error) {
		c, err := seek(ctx, cancels, it.id)
		if err != nil || c == nil {
			return false, err
		}
		// Only a cancel of this incarnation counts: decode the record
		// for its nonce then alone.
		rec, err := decodeRunRecord(it.value)
		if err != nil {
			return false, fmt.Errorf("run %s: %w", it.id, err)
		}
		return string(c) == rec.Nonce, nil
	})
}

// seek advances c to id and returns its value there, or nil when c holds
// no id; ids must not decrease between calls.
func seek(ctx context.Context, c *kvCursor, id string) ([]byte, error) {
	for {
		it, err := c.peek(ctx)
		if err != nil || it == nil || it.id > id {
			return nil, err
		}
		if it.id == id {
			return it.value, nil
		}
		c.next()
	}
}

// stateSet reports whether a state is among states (every state when
// states is empty).
func stateSet(states []runstate.State) func(runstate.State) bool {
	return func(s runstate.State) bool {
		if len(states) == 0 {
			return true
		}
		for _, w := range states {
			if w == s {
				return true
			}
		}
		return false
	}
}

// sealedTally is the visible sealed runs by terminal state (Succeeded,
// Failed, Cancelled at 0, 1, 2) as of one catalog generation: each
// visible segment's state counts less its entries whose id a newer
// segment also holds (that newer entry is the one listed).
type sealedTally struct {
	gen     string
	byState [3]int
	// byMinID is the visible segments by smallest run id.
	byMinID []*archive.Meta
}

// sealedCounts returns the tally of the current catalog, computed once
// per catalog generation.
func (in *Inspector) sealedCounts(ctx context.Context) (sealedTally, error) {
	c := in.catalog()
	segs, err := c.catalog(ctx, in.r)
	if err != nil {
		return sealedTally{}, err
	}
	c.mu.Lock()
	gen, cached := c.gen, c.tally
	c.mu.Unlock()
	if cached != nil && cached.gen == gen {
		return *cached, nil
	}
	t := sealedTally{gen: gen}
	var visible []*archive.Meta
	for _, m := range segs {
		if m.Slim {
			continue
		}
		visible = append(visible, m)
		for i := range t.byState {
			t.byState[i] += m.StateCount(uint8(i + 1))
		}
	}
	// Only segments whose id ranges overlap can share an id: sweep them
	// in MinID order.
	sort.Slice(visible, func(i, j int) bool { return visible[i].MinID < visible[j].MinID })
	t.byMinID = visible
	for i, a := range visible {
		for _, b := range visible[i+1:] {
			if b.MinID > a.MaxID {
				break
			}
			if !sharesHash(a.Hashes, b.Hashes) {
				continue
			}
			older, newer := a, b
			if older.Seq > newer.Seq {
				older, newer = newer, older
			}
			shadowed, err := in.shadowed(ctx, older, newer)
			if err != nil {
				return sealedTally{}, err
			}
			for i, n := range shadowed {
				t.byState[i] -= n
			}
		}
	}
	c.mu.Lock()
	if c.gen == gen {
		c.tally = &t
	}
	c.mu.Unlock()
	return t, nil
}

// sharesHash reports whether two sorted lists of 8-byte big-endian hashes
// share one.
func sharesHash(a, b []byte) bool {
	for len(a) >= 8 && len(b) >= 8 {
		switch x, y := string(a[:8]), string(b[:8]); {
		case x == y:
			return true
		case x < y:
			a = a[8:]
		default:
			b = b[8:]
		}
	}
	return false
}

// shadowed counts by terminal state the entries of older whose id newer
// also holds, reading both indexes.
func (in *Inspector) shadowed(ctx context.Context, older, newer *archive.Meta) ([3]int, error) {
	var out [3]int
	if in.segments == nil {
		return out, fmt.Errorf("runtime: segments %d and %d may share a run and this Inspector reads no object store; use NewArchiveInspector", older.Seq, newer.Seq)
	}
	xo, err := in.segments.index(ctx, older)
	if err != nil {
		return out, err
	}
	xn, err := in.segments.index(ctx, newer)
	if err != nil {
		return out, err
	}
	for i := range xo.Entries {
		e := &xo.Entries[i]
		if xn.Find(e.ID) != nil && e.Status >= 1 && int(e.Status) <= len(out) {
			out[e.Status-1]++
		}
	}
	return out, nil
}

// holderSweep finds the sealed entry ListRuns would list for each of a
// sequence of increasing (desc: decreasing) run ids: the newest visible
// segment holding it.
// It keeps the segments whose id range covers the current id, so an id
// costs the hash lookups of those (with ULIDs, a few), not of every
// segment, and a segment's index only when its hashes say it may hold
// the id.
type holderSweep struct {
	in *Inspector
	// segs is the visible segments by MinID (by MaxID, the greatest
	// first, when desc); next the first not yet reached, active those
	// reached whose id range is not passed.
	segs   []*archive.Meta
	desc   bool
	next   int
	active []*archive.Meta
}

// newHolderSweep returns a sweep of segs for ids in order ord; it sorts segs.
func newHolderSweep(in *Inspector, segs []*archive.Meta, ord idOrder) *holderSweep {
	if ord.desc {
		sort.Slice(segs, func(i, j int) bool { return segs[i].MaxID > segs[j].MaxID })
	} else {
		sort.Slice(segs, func(i, j int) bool { return segs[i].MinID < segs[j].MinID })
	}
	return &holderSweep{in: in, segs: segs, desc: ord.desc}
}

// entry returns the newest sealed entry of id, or nil, and the Seq of
// its segment; ids must not decrease (increase, when desc).
func (s *holderSweep) entry(ctx context.Context, id string) (*archive.Entry, uint64, error) {
	reached := func(m *archive.Meta) bool { return m.MinID <= id }
	passed := func(m *archive.Meta) bool { return m.MaxID < id }
	if s.desc {
		reached = func(m *archive.Meta) bool { return m.MaxID >= id }
		passed = func(m *archive.Meta) bool { return m.MinID > id }
	}
	for s.next < len(s.segs) && reached(s.segs[s.next]) {
		s.active = append(s.active, s.segs[s.next])
		s.next++
	}
	var best *archive.Entry
	var bestSeq uint64
	kept := s.active[:0]
	for _, m := range s.active {
		if passed(m) {
			continue
		}
		kept = append(kept, m)
		if (best != nil && m.Seq < bestSeq) || !m.MayHold(id) {
			continue
		}
		if s.in.segments == nil {
			return nil, 0, fmt.Errorf("runtime: run %s may be sealed in segment %d and this Inspector reads no object store; use NewArchiveInspector", id, m.Seq)
		}
		x, err := s.in.segments.index(ctx, m)
		if err != nil {
			return nil, 0, err
		}
		if e := x.Find(id); e != nil {
			best, bestSeq = e, m.Seq
		}
	}
	clear(s.active[len(kept):])
	s.active = kept
	return best, bestSeq, nil
}
