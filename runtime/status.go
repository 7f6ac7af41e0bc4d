package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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
	recBytes, err := kvGet(ctx, in.r, runKey(runID))
	if err != nil {
		return runstate.Status{}, err
	}
	if recBytes != nil {
		rec, err := decodeRunRecord(recBytes)
		if err != nil {
			return runstate.Status{}, fmt.Errorf("run %s: %w", runID, err)
		}
		return in.activeStatus(ctx, runID, rec)
	}
	b, err := kvGet(ctx, in.r, resultKey(runID))
	if err != nil {
		return runstate.Status{}, err
	}
	if b == nil {
		e, _, err := in.sealedRun(ctx, runID)
		if err != nil {
			return runstate.Status{}, err
		}
		if e == nil {
			return runstate.Status{}, fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		return sealedStatus(e)
	}
	res, err := decodeResultRecord(b)
	if err != nil {
		return runstate.Status{}, fmt.Errorf("run %s: %w", runID, err)
	}
	st := terminalStatus(runID, res)
	if st.Totals, err = in.totals(ctx, runID, res.Nonce); err != nil {
		return runstate.Status{}, err
	}
	return st, nil
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
// window, in run-id order (descending with opts.Descending: newest
// first for ULIDs), from past the cursor opts.After. A run id both terminated and active again is
// listed once, as the active run: of the copies of an id (active, ended
// in the KV, sealed in segments) the newest is the run, and States and
// Labels filter that copy, so an older copy is never listed in its place.
// Checking that costs, per sealed run it lists, memory reads (the KV
// records of its id when the filter skipped them; the run-id hashes of
// newer segments the filter ruled out) and, only when such a segment
// holds the id's hash, that segment's index (cached, else one GET).
func (in *Inspector) ListRuns(ctx context.Context, opts runstate.ListOptions) ([]runstate.Status, error) {
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	keep := stateSet(opts.States)
	if len(opts.Labels) > 0 {
		return in.listLabelled(ctx, opts, limit, keep)
	}
	// Three places hold runs: active and terminated with their result in
	// the KV, and sealed segments. An id in several is listed once, from
	// the first.
	ord := idOrder{desc: opts.Descending}
	cursors := []*kvCursor{
		{r: in.r, prefix: kvRuns, after: opts.After, desc: ord.desc},
		{r: in.r, prefix: kvResults, after: opts.After, desc: ord.desc},
	}
	sealed := &sealedCursor{in: in, after: opts.After, ord: ord}
	if len(opts.States) > 0 {
		sealed.keep = keep
	}
	if len(opts.States) > 0 && !keep(runstate.StatePending) && !keep(runstate.StateRunning) && !keep(runstate.StateWaiting) &&
		!keep(runstate.StateScheduled) && !keep(runstate.StateCancelling) && !keep(runstate.StateFailed) {
		// No active run can be listed (an active run shows Failed when the
		// queue dead-lettered its step): skip them without reading one.
		cursors[0].eof = true
	}
	var out []runstate.Status
	for len(out) < limit {
		var items [2]*kvItem
		first := ""
		for i, c := range cursors {
			it, err := c.peek(ctx)
			if err != nil {
				return nil, err
			}
			items[i] = it
			if it != nil && (first == "" || ord.first(it.id, first)) {
				first = it.id
			}
		}
		se, err := sealed.peek(ctx)
		if err != nil {
			return nil, err
		}
		if se != nil && (first == "" || ord.first(se.ID, first)) {
			first = se.ID
		}
		if first == "" {
			break
		}
		from := -1
		var item *kvItem
		for i, it := range items {
			if it != nil && it.id == first {
				cursors[i].next()
				if from < 0 {
					from, item = i, it
				}
			}
		}
		var st runstate.Status
		ok := false
		if from < 0 {
			sealed.next()
			if st, err = sealedStatus(se); err != nil {
				return nil, err
			}
			ok = keep(st.State)
			if ok && cursors[0].eof {
				// The active runs were skipped: one may be the newest
				// copy of this id (run again after sealing), not listed.
				if ok, err = in.notInKV(ctx, first, kvRuns); err != nil {
					return nil, err
				}
			}
		} else {
			if se != nil && se.ID == first {
				sealed.next()
			}
			if st, ok, err = in.listed(ctx, from, item, keep); err != nil {
				return nil, err
			}
		}
		if ok {
			out = append(out, st)
		}
	}
	if err := in.durable(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// listLabelled is ListRuns through the index of one of opts.Labels: an
// entry counts only while the run's record (active or result) still names
// the entry's nonce, so a stale entry of an earlier run under the same id
// is skipped.
func (in *Inspector) listLabelled(ctx context.Context, opts runstate.ListOptions, limit int, keep func(runstate.State) bool) ([]runstate.Status, error) {
	if err := runstate.ValidateLabels(opts.Labels); err != nil {
		return nil, fmt.Errorf("runtime: list runs: %w", err)
	}
	k, v := pickLabel(opts.Labels)
	ord := idOrder{desc: opts.Descending}
	idx := &kvCursor{r: in.r, prefix: labelPrefix(k, v), after: opts.After, desc: ord.desc}
	// Sealed runs have no index entries: their segments' label filters
	// and state counts pick the segments to read.
	sealed := &sealedCursor{in: in, after: opts.After, labels: opts.Labels, ord: ord}
	if len(opts.States) > 0 {
		sealed.keep = keep
	}
	var out []runstate.Status
	for len(out) < limit {
		e, err := idx.peek(ctx)
		if err != nil {
			return nil, err
		}
		se, err := sealed.peek(ctx)
		if err != nil {
			return nil, err
		}
		if e == nil && se == nil {
			break
		}
		if e == nil || (se != nil && ord.first(se.ID, e.id)) {
			sealed.next()
			st, err := sealedStatus(se)
			if err != nil {
				return nil, err
			}
			// A newer copy of the id in the KV without the label has no
			// index entry here, and it is the one that counts.
			ok, err := in.notInKV(ctx, se.ID, kvRuns, kvResults)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, st)
			}
			continue
		}
		idx.next()
		if se != nil && se.ID == e.id {
			sealed.next()
		}
		st, nonce, err := in.statusOf(ctx, e.id)
		if errors.Is(err, ErrRunNotFound) || (err == nil && nonce != string(e.value)) {
			continue
		}
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

// notInKV reports whether none of the run-keyed records under prefixes
// holds runID (memory reads on the writer).
func (in *Inspector) notInKV(ctx context.Context, runID string, prefixes ...string) (bool, error) {
	for _, p := range prefixes {
		b, err := kvGet(ctx, in.r, p+runID)
		if err != nil || b != nil {
			return false, err
		}
	}
	return true, nil
}

// statusOf returns the status of runID and the nonce of the incarnation
// it describes, without totals.
func (in *Inspector) statusOf(ctx context.Context, runID string) (runstate.Status, string, error) {
	recBytes, err := kvGet(ctx, in.r, runKey(runID))
	if err != nil {
		return runstate.Status{}, "", err
	}
	if recBytes != nil {
		rec, err := decodeRunRecord(recBytes)
		if err != nil {
			return runstate.Status{}, "", fmt.Errorf("run %s: %w", runID, err)
		}
		st, err := in.activeStatus(ctx, runID, rec)
		return st, rec.Nonce, err
	}
	b, err := kvGet(ctx, in.r, resultKey(runID))
	if err != nil {
		return runstate.Status{}, "", err
	}
	if b == nil {
		e, _, err := in.sealedRun(ctx, runID)
		if err != nil {
			return runstate.Status{}, "", err
		}
		if e == nil {
			return runstate.Status{}, "", fmt.Errorf("%w: %s", ErrRunNotFound, runID)
		}
		st, err := sealedStatus(e)
		return st, e.Nonce, err
	}
	res, err := decodeResultRecord(b)
	if err != nil {
		return runstate.Status{}, "", fmt.Errorf("run %s: %w", runID, err)
	}
	return terminalStatus(runID, res), res.Nonce, nil
}

// listed returns the status of a run ListRuns found in key space from
// (0 active, 1 result) and whether keep keeps it.
func (in *Inspector) listed(ctx context.Context, from int, it *kvItem, keep func(runstate.State) bool) (runstate.Status, bool, error) {
	var st runstate.Status
	switch from {
	case 0:
		rec, err := decodeRunRecord(it.value)
		if err != nil {
			return st, false, fmt.Errorf("run %s: %w", it.id, err)
		}
		if st, err = in.activeStatus(ctx, it.id, rec); err != nil {
			return st, false, err
		}
	case 1:
		res, err := decodeResultRecord(it.value)
		if err != nil {
			return st, false, fmt.Errorf("run %s: %w", it.id, err)
		}
		st = terminalStatus(it.id, res)
	}
	return st, keep(st.State), nil
}

type kvItem struct {
	id    string
	value []byte
}

// idOrder is the order a listing visits run ids in: ascending, or
// descending (newest first for ULIDs).
type idOrder struct{ desc bool }

// first reports whether id a comes before id b in the listing.
func (o idOrder) first(a, b string) bool {
	if o.desc {
		return a > b
	}
	return a < b
}

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
