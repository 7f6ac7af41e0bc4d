package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tqw-dsl/tqw/runtime/archive"
	"github.com/tqw-dsl/tqw/runtime/inspect"
	"github.com/tqw-dsl/tqw/runtime/runstate"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// StateReader is the read surface Inspector needs; *queue.Queue and
// *queue.Reader implement it.
type StateReader interface {
	KVGet(ctx context.Context, key string) ([]byte, error)
	KVScan(ctx context.Context, prefix, startAfter string, limit int) ([]queue.KVEntry, error)
	// KVScanDesc is KVScan from the greatest key down, before startBefore.
	KVScanDesc(ctx context.Context, prefix, startBefore string, limit int) ([]queue.KVEntry, error)
	GetJob(ctx context.Context, id string) (queue.Job, error)
	// JobState is GetJob's State and Headers[header] alone, for visits of
	// many jobs.
	JobState(ctx context.Context, id, header string) (queue.State, string, error)
}

var (
	_ StateReader = (*queue.Queue)(nil)
	_ StateReader = (*queue.Reader)(nil)
)

// Inspector answers Status and ListRuns from the runtime's records alone,
// so a process that only opened a queue.Reader on the store can follow runs
// (call the Reader's Refresh to catch up). It writes nothing. It reports
// durable state only: a Reader reads nothing else, and on the writer's
// queue every answer waits, after its last read, until the commits it may
// have read are durable (AwaitDurable: free when nothing is pending, else
// the wait for the WAL PUT holding them, bounded by kv.Options.CommitDelay
// more). A caller that reads more after an answer (a run's history) needs
// the barrier after that read too. A step whose claim is not durable yet
// may show as pending on a Reader.
type Inspector struct {
	r StateReader
	// segments reads sealed runs (nil: this Inspector cannot).
	segments *segmentCache
	// cat is the catalog cache of an Inspector without segments.
	catOnce sync.Once
	cat     *catalogCache
}

// durable waits until what in read is durable (AwaitDurable).
func (in *Inspector) durable(ctx context.Context) error { return AwaitDurable(ctx, in.r) }

// NewInspector returns an Inspector reading r.
func NewInspector(r StateReader) *Inspector { return &Inspector{r: r} }

// Status returns the state of runID, or ErrRunNotFound when the run is
// neither active nor within its result retention window. Cost: in-memory
// reads only.
func (rt *Runtime) Status(ctx context.Context, runID string) (runstate.Status, error) {
	return rt.insp.Status(ctx, runID)
}

// ListRuns lists active and retained runs; see Inspector.ListRuns.
func (rt *Runtime) ListRuns(ctx context.Context, opts runstate.ListOptions) ([]runstate.Status, error) {
	return rt.insp.ListRuns(ctx, opts)
}

// Status returns the state of runID, or ErrRunNotFound.
func (in *Inspector) Status(ctx context.Context, runID string) (runstate.Status, error) {
	if err := runstate.ValidateRunID(runID); err != nil {
		return runstate.Status{}, err
	}
	// The reads are not one snapshot: a run that terminates between them
	// shows an active record without its step pointer. Read again then.
	for attempt := 0; ; attempt++ {
		st, err := in.status(ctx, runID)
		if err != nil || st.JobID != "" || st.State.Terminal() || attempt == 2 {
			if err == nil || errors.Is(err, ErrRunNotFound) {
				if berr := in.durable(ctx); berr != nil {
					return runstate.Status{}, berr
				}
			}
			return st, err
		}
	}
}

func (in *Inspector) status(ctx context.Context, runID string) (runstate.Status, error) {
	c, _, ok, err := inspect.Lookup(ctx, in.pointTiers(), runID)
	if err != nil {
		return runstate.Status{}, err
	}
	if !ok {
		return runstate.Status{}, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
	}
	return in.copyStatus(ctx, runID, c, true)
}

// totals reads the run's totals record of incarnation nonce, or nil.
func (in *Inspector) totals(ctx context.Context, runID, nonce string) (*runstate.Totals, error) {
	t, err := loadTotals(ctx, in.r, runID, nonce)
	if err != nil {
		return nil, err
	}
	if t.Puts+t.Gets+t.Lists+t.Deletes+t.Heads == 0 && len(t.Counters) == 0 {
		return nil, nil
	}
	return t.totals(), nil
}

func terminalStatus(runID string, r *resultRecord) runstate.Status {
	return runstate.Status{RunID: runID, State: r.Status.State(), Step: r.Step, Result: r.Result, ResultOmitted: r.ResultOmitted,
		Error: r.Error, Headers: r.Headers, Labels: r.Labels, SubmittedAt: timeFromMs(r.SubmittedMs), FinishedAt: timeFromMs(r.FinishedMs)}
}

func (in *Inspector) activeStatus(ctx context.Context, runID string, rec *runRecord) (runstate.Status, error) {
	st, err := in.activeState(ctx, runID, rec)
	if err != nil {
		return runstate.Status{}, err
	}
	if st.Totals, err = in.totals(ctx, runID, rec.Nonce); err != nil {
		return runstate.Status{}, err
	}
	return st, nil
}

// activeState is activeStatus without the totals.
func (in *Inspector) activeState(ctx context.Context, runID string, rec *runRecord) (runstate.Status, error) {
	st := runstate.Status{RunID: runID, State: runstate.StatePending, Headers: rec.Headers, Labels: rec.Labels, SubmittedAt: timeFromMs(rec.SubmittedMs)}
	ptr, err := loadPointer(ctx, in.r, runID)
	if err != nil {
		return runstate.Status{}, err
	}
	var job queue.Job
	if ptr != nil {
		st.Step, st.JobID = ptr.Step, ptr.JobID
		job, err = in.r.GetJob(ctx, ptr.JobID)
		switch {
		case errors.Is(err, queue.ErrNotFound):
		case err != nil:
			return runstate.Status{}, fmt.Errorf("runtime: status of run %s: job %s: %w", runID, ptr.JobID, err)
		default:
			st.Attempt, st.LastError = job.Attempts, job.LastError
			switch job.State {
			case queue.StateScheduled:
				st.Until = job.RunAt
				st.SignalKey = job.Headers[headerSignalWait]
			case queue.StateDead:
				st.Error, st.FinishedAt = job.LastError, job.FailedAt
			}
		}
	}
	st.State, err = activeRunState(job.State, job.Headers[headerSignalWait], func() (bool, error) {
		c, err := kvGet(ctx, in.r, cancelKey(runID))
		return c != nil && string(c) == rec.Nonce, err
	})
	return st, err
}

// activeRunState is the state of an active run whose live step job is in
// queue state job ("" when the run has none or it is gone) with signal
// wait header wait; cancelled reports whether a cancel of this
// incarnation is recorded, and is asked only when it can matter. Status
// and CountRuns both derive a state here, so they cannot disagree.
func activeRunState(job queue.State, wait string, cancelled func() (bool, error)) (runstate.State, error) {
	st := runstate.StatePending
	switch job {
	case queue.StateClaimed:
		st = runstate.StateRunning
	case queue.StateScheduled:
		st = runstate.StateScheduled
		if wait != "" {
			st = runstate.StateWaiting
		}
	case queue.StateDead:
		// Dead-lettered by the queue; the worker reconciles it to Failed.
		return runstate.StateFailed, nil
	}
	c, err := cancelled()
	if err != nil {
		return 0, err
	}
	if c {
		return runstate.StateCancelling, nil
	}
	return st, nil
}

// ListRuns returns active runs and terminated runs within their retention
// window, in run-id order (descending with opts.Descending: newest first
// for ULIDs), from past the cursor opts.After. Of the copies of a run id
// (active, ended in the KV, sealed in segments; an id reused after its
// run ended) the newest is the run, and States and Labels filter that
// copy (runtime/inspect), so an id is listed once, and an older copy is
// never listed in its place. Checking that costs, per run it lists from
// a place the filter lets it skip a newer one (the active runs, when no
// active state is listed; the KV, when listing by label; the segments
// the filter ruled out, their run-id hashes), memory reads and, only
// when such a segment's hashes hold the id, that segment's index
// (cached, else one GET).
func (in *Inspector) ListRuns(ctx context.Context, opts runstate.ListOptions) ([]runstate.Status, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(opts.Labels) > 0 {
		if err := runstate.ValidateLabels(opts.Labels); err != nil {
			return nil, fmt.Errorf("runtime: list runs: %w", err)
		}
	}
	keep := stateSet(opts.States)
	m := in.listMerge(opts, keep)
	var out []runstate.Status
	for len(out) < limit {
		r, ok, err := m.Next(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		st, err := in.copyStatus(ctx, r.ID, r.Copy, false)
		if err != nil {
			return nil, err
		}
		if keep(st.State) && hasLabels(st.Labels, opts.Labels) {
			out = append(out, st)
		}
	}
	if err := in.durable(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// listMerge is the merge of the places holding runs that ListRuns walks
// for opts; keep is opts.States. A place is walked only as far as the
// filter may keep its runs, and read by id where that skipped a copy
// newer than one listed.
func (in *Inspector) listMerge(opts runstate.ListOptions, keep func(runstate.State) bool) *inspect.Merge[runCopy] {
	ord := idOrder{desc: opts.Descending}
	sealed := &sealedCursor{in: in, after: opts.After, labels: opts.Labels, ord: ord}
	if len(opts.States) > 0 {
		sealed.keep = keep
	}
	// The oldest place: nothing older asks it for an id.
	sealedTier := inspect.Tier[runCopy]{Cursor: sealedTierCursor{sealed}, Partial: sealed.keep != nil || len(opts.Labels) > 0}
	if len(opts.Labels) > 0 {
		// Runs not sealed are found through the index of one label:
		// active and ended runs are one place, the newest of an id's
		// two records its copy.
		k, v := pickLabel(opts.Labels)
		idx := &kvCursor{r: in.r, prefix: labelPrefix(k, v), after: opts.After, desc: ord.desc}
		return &inspect.Merge[runCopy]{Desc: ord.desc, Tiers: []inspect.Tier[runCopy]{
			{Cursor: &labelTierCursor{in: in, idx: idx}, Partial: true, Probe: in.kvCopy},
			sealedTier,
		}}
	}
	active := inspect.Tier[runCopy]{Cursor: &kvTierCursor{c: &kvCursor{r: in.r, prefix: kvRuns, after: opts.After, desc: ord.desc}, kind: copyActive}}
	if len(opts.States) > 0 && !keep(runstate.StatePending) && !keep(runstate.StateRunning) && !keep(runstate.StateWaiting) &&
		!keep(runstate.StateScheduled) && !keep(runstate.StateCancelling) && !keep(runstate.StateFailed) {
		// No active run can be listed (an active run shows Failed when the
		// queue dead-lettered its step): they are read by id alone.
		active = inspect.Tier[runCopy]{Probe: in.kvProbe(kvRuns, copyActive)}
	}
	return &inspect.Merge[runCopy]{Desc: ord.desc, Tiers: []inspect.Tier[runCopy]{
		active,
		{Cursor: &kvTierCursor{c: &kvCursor{r: in.r, prefix: kvResults, after: opts.After, desc: ord.desc}, kind: copyResult}},
		sealedTier,
	}}
}

// copyKind is where a copy of a run is: active, ended in the KV, sealed.
type copyKind uint8

const (
	copyActive copyKind = iota
	copyResult
	copySealed
)

// runCopy is one place's copy of a run id: its run record (active), its
// result record (ended in the KV) or its segment's index entry (sealed).
type runCopy struct {
	kind  copyKind
	value []byte
	entry *archive.Entry
}

// pointTiers are the places holding runs, the newest first, read by id.
func (in *Inspector) pointTiers() []inspect.Tier[runCopy] {
	return []inspect.Tier[runCopy]{
		{Probe: in.kvProbe(kvRuns, copyActive)},
		{Probe: in.kvProbe(kvResults, copyResult)},
		{Probe: func(ctx context.Context, id string) (runCopy, bool, error) {
			e, _, err := in.sealedRun(ctx, id)
			return runCopy{kind: copySealed, entry: e}, e != nil, err
		}},
	}
}

// kvProbe reads the run-keyed record under prefix by id.
func (in *Inspector) kvProbe(prefix string, kind copyKind) func(context.Context, string) (runCopy, bool, error) {
	return func(ctx context.Context, id string) (runCopy, bool, error) {
		b, err := kvGet(ctx, in.r, prefix+id)
		return runCopy{kind: kind, value: b}, b != nil, err
	}
}

// kvCopy returns the newest copy of id in the KV: its run record, else
// its result record.
func (in *Inspector) kvCopy(ctx context.Context, id string) (runCopy, bool, error) {
	c, _, ok, err := inspect.Lookup(ctx, in.pointTiers()[:2], id)
	return c, ok, err
}

// copyStatus returns the status c gives run id; a result's totals are
// read only with resultTotals (ListRuns leaves them out).
func (in *Inspector) copyStatus(ctx context.Context, id string, c runCopy, resultTotals bool) (runstate.Status, error) {
	switch c.kind {
	case copyActive:
		rec, err := decodeRunRecord(c.value)
		if err != nil {
			return runstate.Status{}, fmt.Errorf("run %s: %w", id, err)
		}
		return in.activeStatus(ctx, id, rec)
	case copyResult:
		res, err := decodeResultRecord(c.value)
		if err != nil {
			return runstate.Status{}, fmt.Errorf("run %s: %w", id, err)
		}
		st := terminalStatus(id, res)
		if resultTotals {
			if st.Totals, err = in.totals(ctx, id, res.Nonce); err != nil {
				return runstate.Status{}, err
			}
		}
		return st, nil
	default:
		return sealedStatus(c.entry)
	}
}

// kvTierCursor walks the run-keyed records of one key space as copies.
type kvTierCursor struct {
	c    *kvCursor
	kind copyKind
}

func (t *kvTierCursor) Peek(ctx context.Context) (string, runCopy, bool, error) {
	it, err := t.c.peek(ctx)
	if err != nil || it == nil {
		return "", runCopy{}, false, err
	}
	return it.id, runCopy{kind: t.kind, value: it.value}, true, nil
}

func (t *kvTierCursor) Next() { t.c.next() }

// labelTierCursor walks the ids of a label's index entries that the KV
// still holds a run of, each with the newest copy of it there: a stale
// entry (an earlier run of the id) gives a copy the label filter
// rejects. Cost per entry: the point reads of kvCopy.
type labelTierCursor struct {
	in   *Inspector
	idx  *kvCursor
	id   string
	copy runCopy
	ok   bool
}

func (t *labelTierCursor) Peek(ctx context.Context) (string, runCopy, bool, error) {
	for !t.ok {
		e, err := t.idx.peek(ctx)
		if err != nil || e == nil {
			return "", runCopy{}, false, err
		}
		c, ok, err := t.in.kvCopy(ctx, e.id)
		if err != nil {
			return "", runCopy{}, false, err
		}
		if !ok {
			// Sealed since, or gone: the segments answer for it.
			t.idx.next()
			continue
		}
		t.id, t.copy, t.ok = e.id, c, true
	}
	return t.id, t.copy, true, nil
}

func (t *labelTierCursor) Next() {
	t.idx.next()
	t.ok = false
}

// sealedTierCursor walks a sealedCursor's entries as copies.
type sealedTierCursor struct{ c *sealedCursor }

func (t sealedTierCursor) Peek(ctx context.Context) (string, runCopy, bool, error) {
	e, err := t.c.peek(ctx)
	if err != nil || e == nil {
		return "", runCopy{}, false, err
	}
	return e.ID, runCopy{kind: copySealed, entry: e}, true, nil
}

func (t sealedTierCursor) Next() { t.c.next() }

type kvItem struct {
	id    string
	value []byte
}

// idOrder is the order a listing visits run ids in: ascending, or
// descending (newest first for ULIDs).
type idOrder struct{ desc bool }

// first reports whether id a comes before id b in the listing.
func (o idOrder) first(a, b string) bool { return inspect.Before(o.desc, a, b) }

// kvCursor pages through one key space of run-keyed records, in key
// order or (desc) its reverse; after is the last id passed.
type kvCursor struct {
	r      StateReader
	prefix string
	after  string
	desc   bool
	page   []queue.KVEntry
	pos    int
	eof    bool
}

func (c *kvCursor) peek(ctx context.Context) (*kvItem, error) {
	if c.pos >= len(c.page) {
		if c.eof {
			return nil, nil
		}
		startAfter := ""
		if c.after != "" {
			startAfter = c.prefix + c.after
		}
		scan := c.r.KVScan
		if c.desc {
			scan = c.r.KVScanDesc
		}
		page, err := scan(ctx, c.prefix, startAfter, 128)
		if err != nil {
			return nil, fmt.Errorf("runtime: list runs: %w", err)
		}
		c.page, c.pos, c.eof = page, 0, len(page) < 128
		if len(page) == 0 {
			return nil, nil
		}
	}
	e := c.page[c.pos]
	return &kvItem{id: strings.TrimPrefix(e.Key, c.prefix), value: e.Value}, nil
}

func (c *kvCursor) next() {
	if c.pos < len(c.page) {
		c.after = strings.TrimPrefix(c.page[c.pos].Key, c.prefix)
		c.pos++
	}
}
