package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tqw-dsl/tqw/runtime/archive"
	"github.com/tqw-dsl/tqw/runtime/store/kv"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// Sealing defaults (SealOptions).
const (
	defaultSealPrefix        = "workflow-sealed"
	defaultSealBatch         = 512
	defaultSealCacheSegments = 64
	defaultSealDelay         = 2 * time.Second
)

// errSealRaced reports a seal pass whose commit found a run's records
// changed since it read them: nothing was sealed; the next pass retries.
var errSealRaced = errors.New("runtime: a sealed run changed while it was sealed")

// SealOptions configure sealing (Options.Sealing).
type SealOptions struct {
	// Prefix holds the sealed segments' objects (default "workflow-sealed").
	Prefix string
	// BatchRuns bounds the runs of one segment (default 512).
	BatchRuns int
	// CacheSegments bounds the decoded segment indexes kept in memory
	// for Status and ListRuns (default 64).
	CacheSegments int
	// Delay bounds how long a finished run waits to be sealed by Run:
	// a seal pass starts once BatchRuns runs wait or Delay after the
	// first of them ended (default 2s), so the KV holds only the runs of
	// the last few seconds. Negative: Run seals only at its retention
	// sweeps (for tests that drive Seal by hand).
	Delay time.Duration
}

func (o SealOptions) withDefaults() SealOptions {
	if o.Prefix == "" {
		o.Prefix = defaultSealPrefix
	}
	if o.BatchRuns <= 0 {
		o.BatchRuns = defaultSealBatch
	}
	if o.CacheSegments <= 0 {
		o.CacheSegments = defaultSealCacheSegments
	}
	if o.Delay == 0 {
		o.Delay = defaultSealDelay
	}
	return o
}

// RunRecordOwner is implemented by a StepRunner that keeps records of its
// runs in the caller KV (history, outputs): sealing moves every record
// under the run's prefixes into its segment, and Inspector.SealedRecords
// reads them back; a run handed to the sealer whose result expires
// unsealed loses them with its result. Prefixes must lie outside
// ReservedKVPrefix.
type RunRecordOwner interface {
	RunRecordPrefixes(runID string) []string
}

// RunRecordExpirer is a RunRecordOwner that also keeps things of a run
// outside the KV store (objects). The runtime calls ExpireRunRecords
// before each commit that removes the records of a run sealed or handed
// to the sealer (its segment expiring or turning slim, or the run expired
// before it was sealed), so they all leave together; finished is the
// run's end as its result recorded it. A crash before that commit calls
// it again, so it must be idempotent.
type RunRecordExpirer interface {
	RunRecordOwner
	ExpireRunRecords(ctx context.Context, runID string, finished time.Time) error
}

const (
	// kvSealedRuns held one row per sealed run (sealedRow) in stores
	// sealed by earlier builds; their expiry still deletes them.
	kvSealedRuns = kvSealed + "runs/"
	kvSealedSegs = kvSealed + "seg/"
	kvSealNext   = kvSealed + "next"
	// kvSealGen changes with every commit that changes the catalog
	// (seal, slimming, expiry), so a reader reloads its decoded catalog
	// only then.
	kvSealGen = kvSealed + "gen"
)

func sealedRunKey(runID string) string { return kvSealedRuns + runID }
func segmentKey(seq uint64) string     { return fmt.Sprintf("%s%020d", kvSealedSegs, seq) }

// sealedRow is a sealed run's row in the KV as earlier builds wrote it:
// its incarnation, its segment and its state. This build writes none (a
// sealed run is found through its segment's catalog entry) and deletes
// the rows of older segments when they expire.
type sealedRow struct {
	Nonce string                  `msgpack:"n"`
	Seq   uint64                  `msgpack:"q"`
	State runstate.TerminalStatus `msgpack:"s"`
}

// sealMarker is the KV put that hands a finished run to the sealer.
func (rt *Runtime) sealMarker(runID string, finished time.Time) queue.KVWrite {
	return queue.KVWrite{Key: timedKey(kvSealQ, finished, runID), Value: []byte{1}}
}

// Seals reports whether the runtime seals finished runs (WithSealing,
// with a result retention), so a RunRecordOwner's records of a run leave
// the KV store with it.
func (rt *Runtime) Seals() bool { return rt.sealing() }

// sealing reports whether finished runs are sealed.
func (rt *Runtime) sealing() bool { return rt.cfg.seal != nil && rt.cfg.resultRetention > 0 }

// segmentCache keeps decoded segment indexes, by segment object key, and
// the decoded catalog.
type segmentCache struct {
	store objstore.Store
	lru   *lru.Cache[string, *archive.Index]
	cat   catalogCache
}

// catalogCache is the decoded catalog (every segment's Meta, by sequence)
// as of one catalog generation (kvSealGen and kvSealNext).
type catalogCache struct {
	mu     sync.Mutex
	loaded bool
	gen    string
	segs   []*archive.Meta
	// tally is CountRuns's sealed counts, computed once per generation.
	tally *sealedTally
}

// catalog returns every catalog entry of r, oldest segment first: the
// cached decoding while the catalog generation is unchanged (two KV
// reads), else a scan of the catalog rows (memory reads).
func (c *catalogCache) catalog(ctx context.Context, r StateReader) ([]*archive.Meta, error) {
	g, err := kvGet(ctx, r, kvSealGen)
	if err != nil {
		return nil, err
	}
	n, err := kvGet(ctx, r, kvSealNext)
	if err != nil {
		return nil, err
	}
	gen := string(g) + "/" + string(n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded && c.gen == gen {
		return c.segs, nil
	}
	var rows []queue.KVEntry
	if err := scanAll(ctx, r, kvSealedSegs, func(e queue.KVEntry) { rows = append(rows, e) }); err != nil {
		return nil, err
	}
	segs := make([]*archive.Meta, 0, len(rows))
	for _, e := range rows {
		m, err := archive.DecodeMeta(e.Value)
		if err != nil {
			return nil, fmt.Errorf("runtime: catalog row %s: %w", e.Key, err)
		}
		segs = append(segs, m)
	}
	// Read before the scan: a change after it makes the next call reload.
	c.loaded, c.gen, c.segs = true, gen, segs
	return segs, nil
}

func newSegmentCache(store objstore.Store, size int) *segmentCache {
	c, err := lru.New[string, *archive.Index](size)
	if err != nil {
		panic(err) // size is at least 1 (withDefaults)
	}
	return &segmentCache{store: store, lru: c}
}

// index returns the decoded index of m: a cache hit, else one GET.
func (c *segmentCache) index(ctx context.Context, m *archive.Meta) (*archive.Index, error) {
	if x, ok := c.lru.Get(m.Key); ok {
		return x, nil
	}
	b, _, err := c.store.Get(ctx, m.IndexKey())
	if err != nil {
		return nil, fmt.Errorf("runtime: read sealed segment %s: %w", m.IndexKey(), err)
	}
	x, err := archive.DecodeIndex(b)
	if err != nil {
		return nil, fmt.Errorf("runtime: sealed segment %s: %w", m.IndexKey(), err)
	}
	c.lru.Add(m.Key, x)
	return x, nil
}

// sealer is the writer's sealing state.
type sealer struct {
	mu sync.Mutex
	// collected: the orphans of earlier processes' interrupted seals
	// were deleted.
	collected bool
	// pending counts the seal markers made durable since the seal loop
	// last looked; wake (1-buffered) tells it of a new one.
	pending atomic.Int64
	wake    chan struct{}
}

// sealNudge tells the seal loop of one more durable seal marker. It runs
// in the OnDurable of a commit that puts a marker, so the pass it starts
// finds that marker.
func (rt *Runtime) sealNudge() {
	rt.sealer.pending.Add(1)
	select {
	case rt.sealer.wake <- struct{}{}:
	default:
	}
}

// sealLoop seals finished runs as they end, for Run: a pass once
// BatchRuns markers are pending or Delay after the first pending one
// (rt.clock). Markers of earlier processes wait for the retention sweep.
func (rt *Runtime) sealLoop(ctx context.Context) {
	if !rt.sealing() || rt.cfg.seal.Delay < 0 {
		return
	}
	batch, delay := int64(rt.cfg.seal.BatchRuns), rt.cfg.seal.Delay
	for {
		for rt.sealer.pending.Load() == 0 {
			select {
			case <-rt.sealer.wake:
			case <-ctx.Done():
				return
			}
		}
		if !rt.waitSealBatch(ctx, batch, delay) {
			return
		}
		// Markers nudged during the pass may be sealed by it or not:
		// they stay counted, so at worst the next pass finds none.
		n := rt.sealer.pending.Load()
		if _, err := rt.Seal(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			rt.log.Warn("sealing finished runs failed; retrying", "err", err)
			if !rt.pause(ctx, delay) {
				return
			}
			continue
		}
		rt.sealer.pending.Add(-n)
	}
}

// waitSealBatch waits until batch markers are pending or delay has
// passed; it returns false once ctx is done.
func (rt *Runtime) waitSealBatch(ctx context.Context, batch int64, delay time.Duration) bool {
	t := rt.clock.NewTimer(delay)
	defer t.Stop()
	if h := rt.sealWaits; h != nil {
		h()
	}
	for rt.sealer.pending.Load() < batch {
		select {
		case <-rt.sealer.wake:
		case <-t.C():
			return true
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Seal seals every finished run whose end is handled, in segments of at
// most SealOptions.BatchRuns runs, and returns how many it sealed. A run
// already past its result retention is not sealed but expired whole: its
// result and the runner's records (RunRecordOwner) leave in the commit
// that drops its seal marker. The retention sweep calls it; without
// Options.Sealing it does nothing. Per segment: two create-only PUTs
// (index and data objects), then one durable commit that swaps the runs'
// KV records for their rows; a crash before that commit leaves
// unreferenced objects, deleted by the next process's first pass (one
// LIST per 1,000 objects under the prefix).
func (rt *Runtime) Seal(ctx context.Context) (int, error) {
	sealed, _, err := rt.seal(ctx)
	return sealed, err
}

// seal is Seal, also counting the runs it expired.
func (rt *Runtime) seal(ctx context.Context) (sealed, expired int, err error) {
	if !rt.sealing() {
		return 0, 0, nil
	}
	rt.sealer.mu.Lock()
	defer rt.sealer.mu.Unlock()
	if !rt.sealer.collected {
		if err := rt.collectOrphanSegments(ctx); err != nil {
			return 0, 0, err
		}
		rt.sealer.collected = true
	}
	for {
		page, err := rt.q.KVScan(ctx, kvSealQ, "", rt.cfg.seal.BatchRuns)
		if err != nil {
			return sealed, expired, fmt.Errorf("runtime: seal: list finished runs: %w", err)
		}
		if len(page) == 0 {
			return sealed, expired, nil
		}
		s, x, err := rt.sealBatch(ctx, page)
		sealed, expired = sealed+s, expired+x
		if err != nil || len(page) < rt.cfg.seal.BatchRuns {
			return sealed, expired, err
		}
	}
}

// sealBatch seals the runs of markers into one segment, and expires those
// past their result retention. A marker whose result is gone (it expired
// before the run's end was handled) takes the runner's records of the run
// with it, so nothing of a run outlives its result.
func (rt *Runtime) sealBatch(ctx context.Context, markers []queue.KVEntry) (sealed, expired int, err error) {
	eff := &queue.SettlementEffects{}
	var guards []queue.KVWrite
	var runs []archive.Run
	now := rt.clock.Now()
	for _, mk := range markers {
		eff.KVDeletes = append(eff.KVDeletes, mk.Key)
		finished, runID, err := parseTimedKey(kvSealQ, mk.Key)
		if err != nil {
			rt.log.Warn("dropping a malformed seal marker", "key", mk.Key, "err", err)
			continue
		}
		b, err := kvGet(ctx, rt.q, resultKey(runID))
		if err != nil {
			return 0, 0, err
		}
		if b == nil {
			// Expired unhandled, or sealed already. A run under the id
			// now owns its records; else they are the expired run's (an
			// id is not reused while they exist).
			if active, err := kvGet(ctx, rt.q, runKey(runID)); err != nil {
				return 0, 0, err
			} else if active != nil {
				continue
			}
			recs, err := rt.ownerRecords(ctx, runID)
			if err != nil {
				return 0, 0, err
			}
			if len(recs) > 0 {
				if err := rt.expireOwned(ctx, runID, finished); err != nil {
					return 0, 0, err
				}
				guards = append(guards, queue.KVWrite{Key: resultKey(runID)}, queue.KVWrite{Key: runKey(runID)})
				eff.KVCompareDeletes = append(eff.KVCompareDeletes, recs...)
			}
			continue
		}
		res, err := decodeResultRecord(b)
		if err != nil {
			rt.log.Warn("not sealing a run whose result record is unreadable", "run", runID, "err", err)
			continue
		}
		if res.FinishedMs != finished.UnixMilli() {
			continue // a later run under the same id owns the record
		}
		guards = append(guards, queue.KVWrite{Key: resultKey(runID), Value: b})
		eff.KVDeletes = append(eff.KVDeletes, timedKey(kvExpiry, timeFromMs(res.FinishedMs), runID))
		recs, err := rt.ownerRecords(ctx, runID)
		if err != nil {
			return 0, 0, err
		}
		if rt.resultExpired(res.FinishedMs, now) {
			// Sealed only to be dropped: its records leave now, together.
			// Its memo-retention marker stays for the memo sweep.
			dels, err := rt.resultExpiry(ctx, runID, b)
			if err != nil {
				return 0, 0, err
			}
			if err := rt.expireOwned(ctx, runID, finished); err != nil {
				return 0, 0, err
			}
			eff.KVCompareDeletes = append(append(eff.KVCompareDeletes, dels...), recs...)
			expired++
			continue
		}
		r := archive.Run{Entry: archive.Entry{ID: runID, Nonce: res.Nonce, Status: uint8(res.Status), Step: res.Step,
			Result: res.Result, ResultOmitted: res.ResultOmitted, Error: res.Error, SubmittedMs: res.SubmittedMs,
			FinishedMs: res.FinishedMs, Headers: res.Headers, Labels: res.Labels}}
		eff.KVDeletes = append(eff.KVDeletes, resultKey(runID))
		// Nothing of the run stays in the KV: its label entries and its
		// memo-retention marker move into the segment's catalog entry
		// (label Bloom filter, memo retention; expireSegments clears the
		// runs' memo entries when it expires).
		eff.KVCompareDeletes = append(eff.KVCompareDeletes, labelCompareDeletes(res.Labels, runID, res.Nonce)...)
		if rt.cfg.memoRetention > 0 {
			eff.KVCompareDeletes = append(eff.KVCompareDeletes,
				queue.KVWrite{Key: timedKey(kvTerminals, timeFromMs(res.FinishedMs), runID), Value: []byte(res.Nonce)})
		}
		if t, err := kvGet(ctx, rt.q, totalsKey(runID)); err != nil {
			return 0, 0, err
		} else if t != nil {
			var tr totalsRecord
			if decodeRecord("totals", t, &tr) == nil && tr.Nonce == res.Nonce {
				r.Totals = t
				eff.KVCompareDeletes = append(eff.KVCompareDeletes, queue.KVWrite{Key: totalsKey(runID), Value: t})
			}
		}
		for _, e := range recs {
			r.Records = append(r.Records, archive.Record{Key: e.Key, Value: e.Value})
		}
		// The state a Redrive resumes from goes with the run.
		resume, err := rt.resumeCompareDelete(ctx, runID, res.Nonce)
		if err != nil {
			return 0, 0, err
		}
		for _, e := range resume {
			r.Records = append(r.Records, archive.Record{Key: e.Key, Value: e.Value})
		}
		eff.KVCompareDeletes = append(eff.KVCompareDeletes, resume...)
		eff.KVCompareDeletes = append(eff.KVCompareDeletes, recs...)
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		applied, err := rt.q.ApplyEffects(ctx, eff, guards)
		switch {
		case err != nil:
			return 0, 0, fmt.Errorf("runtime: seal: drop stale markers: %w", err)
		case !applied:
			return 0, 0, fmt.Errorf("%w: expiring %d runs", errSealRaced, expired)
		}
		return 0, expired, nil
	}
	next, err := kvGet(ctx, rt.q, kvSealNext)
	if err != nil {
		return 0, 0, err
	}
	seq := uint64(1)
	if next != nil {
		if seq, err = strconv.ParseUint(string(next), 10, 64); err != nil {
			return 0, 0, fmt.Errorf("%w: %s holds %q", ErrCorruptRecord, kvSealNext, next)
		}
	}
	guards = append(guards, queue.KVWrite{Key: kvSealNext, Value: next})
	idx, data, meta, err := archive.Build(runs)
	if err != nil {
		return 0, 0, fmt.Errorf("runtime: seal: %w", err)
	}
	meta.Seq = seq
	meta.Key = fmt.Sprintf("%s/seg/%020d-%s", rt.cfg.seal.Prefix, seq, rt.newID())
	meta.ResultRetentionMs = rt.cfg.resultRetention.Milliseconds()
	meta.MemoRetentionMs = rt.cfg.memoRetention.Milliseconds()
	mb, err := archive.EncodeMeta(meta)
	if err != nil {
		return 0, 0, err
	}
	// The data object first: an index never names a missing one.
	if _, err := rt.store.Put(ctx, meta.DataKey(), data, objstore.CreateOnly()); err != nil {
		return 0, 0, fmt.Errorf("runtime: seal: write %s: %w", meta.DataKey(), err)
	}
	if _, err := rt.store.Put(ctx, meta.IndexKey(), idx, objstore.CreateOnly()); err != nil {
		rt.deleteSegmentObjects(ctx, meta.Key)
		return 0, 0, fmt.Errorf("runtime: seal: write %s: %w", meta.IndexKey(), err)
	}
	eff.KVPuts = append(eff.KVPuts, queue.KVWrite{Key: segmentKey(seq), Value: mb},
		queue.KVWrite{Key: kvSealNext, Value: []byte(strconv.FormatUint(seq+1, 10))}, rt.catalogGen())
	if h := rt.beforeSealCommit; h != nil {
		h(meta.Key)
	}
	applied, err := rt.q.ApplyEffects(ctx, eff, guards)
	switch {
	case errors.Is(err, kv.ErrCommitUncertain):
		// Maybe applied: the objects stay; if not, the next process's
		// first pass deletes them.
		return 0, 0, fmt.Errorf("runtime: seal segment %d: %w", seq, err)
	case err != nil:
		rt.deleteSegmentObjects(ctx, meta.Key)
		return 0, 0, fmt.Errorf("runtime: seal segment %d: %w", seq, err)
	case !applied:
		rt.deleteSegmentObjects(ctx, meta.Key)
		return 0, 0, fmt.Errorf("%w: segment %d of %d runs", errSealRaced, seq, len(runs))
	}
	return len(runs), expired, nil
}

// ownerRecords returns the records the runner keeps under runID's
// RunRecordPrefixes (RunRecordOwner; none for another runner), as
// compare-deletes of the values read.
func (rt *Runtime) ownerRecords(ctx context.Context, runID string) ([]queue.KVWrite, error) {
	owner, ok := rt.runner.(RunRecordOwner)
	if !ok {
		return nil, nil
	}
	var out []queue.KVWrite
	for _, p := range owner.RunRecordPrefixes(runID) {
		if strings.HasPrefix(p, ReservedKVPrefix) || p == "" {
			return nil, fmt.Errorf("%w: RunRecordPrefixes(%q) returned %q", ErrReserved, runID, p)
		}
		if err := scanAll(ctx, rt.q, p, func(e queue.KVEntry) { out = append(out, queue.KVWrite(e)) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// expireOwned lets the runner remove what it keeps of runID outside the
// KV store (RunRecordExpirer), before the commit that removes the run.
func (rt *Runtime) expireOwned(ctx context.Context, runID string, finished time.Time) error {
	x, ok := rt.runner.(RunRecordExpirer)
	if !ok {
		return nil
	}
	if err := x.ExpireRunRecords(ctx, runID, finished); err != nil {
		return fmt.Errorf("runtime: expire the records of run %s: %w", runID, err)
	}
	return nil
}

// deleteSegmentObjects deletes a segment's objects no KV row names; a
// failure leaves them to the next process's collection.
func (rt *Runtime) deleteSegmentObjects(ctx context.Context, key string) {
	for _, k := range []string{key + ".idx", key + ".dat"} {
		if err := rt.store.Delete(ctx, k); err != nil {
			if ctx.Err() != nil {
				// Shutdown: not a failure; the next process deletes it.
				rt.log.Debug("left an unreferenced sealed object at shutdown; the next process deletes it", "key", k)
				continue
			}
			rt.log.Warn("could not delete an unreferenced sealed object; the next process deletes it", "key", k, "err", err)
		}
	}
}

// collectOrphanSegments deletes the segment objects no catalog row names:
// those of a seal whose commit never applied, or of an expired segment
// whose objects outlived its rows. Only the writer seals, so an object
// without a row is never one about to be committed.
func (rt *Runtime) collectOrphanSegments(ctx context.Context) error {
	prefix := rt.cfg.seal.Prefix + "/seg/"
	after := ""
	for {
		page, err := rt.store.List(ctx, prefix, after, 1000)
		if err != nil {
			return fmt.Errorf("runtime: seal: list %s: %w", prefix, err)
		}
		for _, o := range page {
			after = o.Key
			base := strings.TrimSuffix(strings.TrimSuffix(o.Key, ".idx"), ".dat")
			if ok, err := rt.segmentReferenced(ctx, strings.TrimPrefix(base, prefix), base); err != nil {
				return err
			} else if !ok {
				if err := rt.store.Delete(ctx, o.Key); err != nil {
					return fmt.Errorf("runtime: seal: delete unreferenced %s: %w", o.Key, err)
				}
			}
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

// segmentReferenced reports whether the catalog row of the segment named
// name ("<seq>-<id>") names base.
func (rt *Runtime) segmentReferenced(ctx context.Context, name, base string) (bool, error) {
	seqText, _, ok := strings.Cut(name, "-")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !ok || err != nil {
		rt.log.Warn("an object under the sealed prefix is not a segment; leaving it", "key", base)
		return true, nil
	}
	b, err := kvGet(ctx, rt.q, segmentKey(seq))
	if err != nil || b == nil {
		return false, err
	}
	m, err := archive.DecodeMeta(b)
	if err != nil {
		return false, fmt.Errorf("runtime: catalog row %s: %w", segmentKey(seq), err)
	}
	return m.Key == base, nil
}

// catalogGen is the KV put that marks a change of the catalog.
func (rt *Runtime) catalogGen() queue.KVWrite {
	return queue.KVWrite{Key: kvSealGen, Value: []byte(rt.newID())}
}

// expireSegments handles, also when this runtime does not seal, the
// segments whose newest run left its result retention: a segment whose
// memo entries outlive the results (MemoRetentionMs longer) turns slim
// (its runs invisible; one durable commit), and a segment past both is
// dropped: its runs' memo entries cleared (one LIST per run plus a DELETE
// per memo object, when sealed under memo retention), then one durable
// commit and two DELETEs. A segment's runs stay visible until its newest
// expires, at most the seal interval longer than their own retention, and
// whatever the runner keeps of them outside the KV (RunRecordExpirer)
// goes just before the commit that hides them, not earlier.
func (rt *Runtime) expireSegments(ctx context.Context, now time.Time) (int, error) {
	runs, after := 0, ""
	for {
		page, err := rt.q.KVScan(ctx, kvSealedSegs, after, 64)
		if err != nil {
			return runs, fmt.Errorf("runtime: sweep sealed segments: %w", err)
		}
		for _, e := range page {
			after = e.Key
			m, err := archive.DecodeMeta(e.Value)
			if err != nil {
				return runs, fmt.Errorf("runtime: catalog row %s: %w", e.Key, err)
			}
			resultsGone := now.UnixMilli() >= m.MaxFinishedMs+m.ResultRetentionMs
			memoGone := now.UnixMilli() >= m.MaxFinishedMs+max(m.MemoRetentionMs, m.ResultRetentionMs)
			var n int
			switch {
			case !resultsGone || (m.Slim && !memoGone):
				continue
			case !memoGone:
				n, err = rt.slimSegment(ctx, e, m)
			default:
				n, err = rt.expireSegment(ctx, e, m)
			}
			runs += n
			if err != nil {
				return runs, err
			}
		}
		if len(page) < 64 {
			return runs, nil
		}
	}
}

// oldRowDeletes are the compare-deletes of what earlier builds kept in the
// KV per sealed run of x (a row and label entries); absent keys are left
// alone, so on a segment of this build they delete nothing.
func oldRowDeletes(x *archive.Index, m *archive.Meta) ([]queue.KVWrite, error) {
	var out []queue.KVWrite
	for i := range x.Entries {
		e := &x.Entries[i]
		b, err := encodeRecord(&sealedRow{Nonce: e.Nonce, Seq: m.Seq, State: runstate.TerminalStatus(e.Status)})
		if err != nil {
			return nil, err
		}
		out = append(out, queue.KVWrite{Key: sealedRunKey(e.ID), Value: b})
		out = append(out, labelCompareDeletes(e.Labels, e.ID, e.Nonce)...)
	}
	return out, nil
}

// slimSegment hides the runs of a segment whose results expired and whose
// memo entries are still retained: its catalog entry loses its run-id
// hashes and label filter, and stays until expireSegment clears the memo
// entries.
func (rt *Runtime) slimSegment(ctx context.Context, row queue.KVEntry, m *archive.Meta) (int, error) {
	x, err := rt.insp.segments.index(ctx, m)
	if err != nil {
		return 0, err
	}
	dels, err := oldRowDeletes(x, m)
	if err != nil {
		return 0, err
	}
	if err := rt.expireEntries(ctx, x, m.Seq); err != nil {
		return 0, err
	}
	slim := *m
	slim.Slim, slim.Hashes, slim.LabelBloom, slim.LabelProbes = true, nil, nil, 0
	b, err := archive.EncodeMeta(&slim)
	if err != nil {
		return 0, err
	}
	eff := &queue.SettlementEffects{KVPuts: []queue.KVWrite{{Key: row.Key, Value: b}, rt.catalogGen()}, KVCompareDeletes: dels}
	applied, err := rt.q.ApplyEffects(ctx, eff, []queue.KVWrite{{Key: row.Key, Value: row.Value}})
	if err != nil || !applied {
		return 0, err
	}
	return len(x.Entries), nil
}

func (rt *Runtime) expireSegment(ctx context.Context, row queue.KVEntry, m *archive.Meta) (int, error) {
	x, err := rt.insp.segments.index(ctx, m)
	if err != nil {
		return 0, err
	}
	if m.MemoRetentionMs > 0 {
		// Before the commit: a crash in between clears them again.
		for i := range x.Entries {
			if sup, err := rt.superseded(ctx, x.Entries[i].ID, m.Seq); err != nil {
				return 0, err
			} else if sup {
				continue // redriven: the newer copy's memo entries
			}
			if _, err := rt.memo.ClearRun(ctx, x.Entries[i].ID); err != nil {
				return 0, fmt.Errorf("runtime: clear the memo entries of sealed run %s: %w", x.Entries[i].ID, err)
			}
		}
	}
	eff := &queue.SettlementEffects{KVDeletes: []string{row.Key}, KVPuts: []queue.KVWrite{rt.catalogGen()}}
	if !m.Slim {
		if err := rt.expireEntries(ctx, x, m.Seq); err != nil {
			return 0, err
		}
		if eff.KVCompareDeletes, err = oldRowDeletes(x, m); err != nil {
			return 0, err
		}
	}
	applied, err := rt.q.ApplyEffects(ctx, eff, []queue.KVWrite{{Key: row.Key, Value: row.Value}})
	if err != nil || !applied {
		return 0, err
	}
	rt.insp.segments.lru.Remove(m.Key)
	rt.deleteSegmentObjects(ctx, m.Key)
	if m.Slim {
		return 0, nil // counted when it turned slim
	}
	return len(x.Entries), nil
}

// expireEntries lets the runner remove what it keeps outside the KV store
// of each run of x (RunRecordExpirer), before the commit that hides them,
// but for runs a newer copy supersedes.
func (rt *Runtime) expireEntries(ctx context.Context, x *archive.Index, seq uint64) error {
	for i := range x.Entries {
		if sup, err := rt.superseded(ctx, x.Entries[i].ID, seq); err != nil {
			return err
		} else if sup {
			continue // redriven: what it keeps belongs to the newer copy
		}
		if err := rt.expireOwned(ctx, x.Entries[i].ID, timeFromMs(x.Entries[i].FinishedMs)); err != nil {
			return err
		}
	}
	return nil
}

// scanAll calls fn for every KV entry under prefix, in key order.
func scanAll(ctx context.Context, r StateReader, prefix string, fn func(queue.KVEntry)) error {
	after := ""
	for {
		page, err := r.KVScan(ctx, prefix, after, 256)
		if err != nil {
			return fmt.Errorf("runtime: scan %s: %w", prefix, err)
		}
		for _, e := range page {
			fn(e)
		}
		if len(page) < 256 {
			return nil
		}
		after = page[len(page)-1].Key
	}
}

// sealedRun returns the index entry of runID's sealed run and its
// segment's catalog entry, or nil when the run is not sealed (or its
// segment expired meanwhile). The newest segment holding the id wins (an
// id reused after its run was sealed). Cost: memory reads of the catalog
// (each segment's id range and run-id hashes), plus the index of a
// segment that may hold the id (cached; else one GET).
func (in *Inspector) sealedRun(ctx context.Context, runID string) (*archive.Entry, *archive.Meta, error) {
	segs, err := in.catalog().catalog(ctx, in.r)
	if err != nil {
		return nil, nil, err
	}
	for i := len(segs) - 1; i >= 0; i-- {
		m := segs[i]
		if !m.MayHold(runID) {
			continue
		}
		if in.segments == nil {
			return nil, nil, fmt.Errorf("runtime: run %s may be sealed in segment %d and this Inspector reads no object store; use NewArchiveInspector", runID, m.Seq)
		}
		x, err := in.segments.index(ctx, m)
		if err != nil {
			return nil, nil, err
		}
		if e := x.Find(runID); e != nil {
			return e, m, nil
		}
	}
	return nil, nil, nil
}

// catalog returns the Inspector's catalog cache.
func (in *Inspector) catalog() *catalogCache {
	if in.segments != nil {
		return &in.segments.cat
	}
	in.catOnce.Do(func() { in.cat = &catalogCache{} })
	return in.cat
}

func sealedStatus(e *archive.Entry) (runstate.Status, error) {
	st := runstate.Status{RunID: e.ID, State: runstate.TerminalStatus(e.Status).State(), Step: e.Step, Result: e.Result,
		ResultOmitted: e.ResultOmitted, Error: e.Error, Headers: e.Headers, Labels: e.Labels,
		SubmittedAt: timeFromMs(e.SubmittedMs), FinishedAt: timeFromMs(e.FinishedMs)}
	if len(e.Totals) > 0 {
		var t totalsRecord
		if err := decodeRecord("totals", e.Totals, &t); err != nil {
			return runstate.Status{}, fmt.Errorf("run %s: %w", e.ID, err)
		}
		st.Totals = t.totals()
	}
	return st, nil
}

// SealedRecords returns the records a RunRecordOwner kept under prefix
// for runID, if the run is sealed: nil, false when it is not (read the
// KV then). Cost: the segment's index (cached) and one GET of its data
// object.
func (in *Inspector) SealedRecords(ctx context.Context, runID, prefix string) ([]queue.KVEntry, bool, error) {
	// A copy in the KV (a redriven run) is newer than any segment's: the
	// run's records are the KV's then.
	if _, ok, err := in.kvCopy(ctx, runID); err != nil || ok {
		return nil, false, err
	}
	e, m, err := in.sealedRun(ctx, runID)
	if err != nil || e == nil {
		return nil, false, err
	}
	data, _, err := in.segments.store.Get(ctx, m.DataKey())
	if err != nil {
		return nil, false, fmt.Errorf("runtime: read sealed segment %s: %w", m.DataKey(), err)
	}
	recs, err := archive.DecodeRecords(data, e)
	if err != nil {
		return nil, false, fmt.Errorf("runtime: sealed segment %s: %w", m.DataKey(), err)
	}
	var out []queue.KVEntry
	for _, r := range archive.Records(recs, prefix) {
		out = append(out, queue.KVEntry{Key: r.Key, Value: r.Value})
	}
	return out, true, nil
}

// NewArchiveInspector returns an Inspector reading r that also reads
// sealed runs from store (SealOptions.Prefix's segments, through a cache
// of SealOptions.CacheSegments indexes).
func NewArchiveInspector(r StateReader, store objstore.Store, o SealOptions) *Inspector {
	o = o.withDefaults()
	return &Inspector{r: r, segments: newSegmentCache(store, o.CacheSegments)}
}

// sealedCursor lists sealed runs in run-id order (or its reverse, ord),
// merging the segments lazily: a segment's index is read (cache, else
// one GET) only when its first id not yet listed could be next, so a page reads the segments
// its runs lie in (with ids that sort by submission time, ULIDs, one or
// two), never one whose catalog entry rules it out: no run in a wanted
// state (its state counts), or no run with a wanted label (its Bloom
// filter).
type sealedCursor struct {
	in *Inspector
	// after is the last id passed (in ord; "" before the first).
	after  string
	ord    idOrder
	keep   func(runstate.State) bool
	labels map[string]string
	heap   []*segPos
	// hiders sweeps the segments keep or labels ruled out (nil when
	// none): none holds a run the cursor lists, but one may hold the
	// newest copy of an id whose older copy, in a segment of the heap,
	// the filter would keep.
	hiders *holderSweep
	inited bool
	// last is the id the cursor passed last, listed or not: the same id in
	// an older segment (an id reused after sealing) is skipped, since the
	// newest copy decides whether the id is listed.
	last string
}

// segPos is a segment's position in a sealedCursor: x is nil until its
// index is read, and key is then its next entry's id, else a bound on it
// in the cursor's order (its first id in that order or the cursor's start).
type segPos struct {
	m   *archive.Meta
	x   *archive.Index
	pos int
	key string
}

func (c *sealedCursor) less(a, b *segPos) bool {
	if a.key != b.key {
		return c.ord.first(a.key, b.key)
	}
	if (a.x == nil) != (b.x == nil) {
		return a.x == nil // read before deciding
	}
	return a.m.Seq > b.m.Seq // the newest first
}

func (c *sealedCursor) init(ctx context.Context) error {
	c.inited = true
	segs, err := c.in.catalog().catalog(ctx, c.in.r)
	if err != nil {
		return err
	}
	var hiders []*archive.Meta
	for _, m := range segs {
		if m.Slim || c.passed(m) {
			continue
		}
		if !c.mayKeep(m) {
			hiders = append(hiders, m)
			continue
		}
		key := max(m.MinID, c.after)
		if c.ord.desc {
			key = m.MaxID
			if c.after != "" {
				key = min(m.MaxID, c.after)
			}
		}
		c.heap = append(c.heap, &segPos{m: m, key: key})
	}
	if len(hiders) > 0 {
		c.hiders = newHolderSweep(c.in, hiders, c.ord)
	}
	sort.Slice(c.heap, func(i, j int) bool { return c.less(c.heap[i], c.heap[j]) })
	return nil
}

// passed reports whether every id of m lies at or before the cursor's
// start, in its order.
func (c *sealedCursor) passed(m *archive.Meta) bool {
	if c.ord.desc {
		return c.after != "" && m.MinID >= c.after
	}
	return m.MaxID <= c.after
}

// start is the position in x of the first entry past the cursor.
func (c *sealedCursor) start(x *archive.Index) int {
	if c.ord.desc {
		return x.Before(c.after)
	}
	return x.After(c.after)
}

// advance moves h to its next entry in the cursor's order and reports
// whether it has one.
func (c *sealedCursor) advance(h *segPos) bool {
	if c.ord.desc {
		h.pos--
	} else {
		h.pos++
	}
	return h.pos >= 0 && h.pos < len(h.x.Entries)
}

// mayKeep reports whether m may hold a run the cursor lists.
func (c *sealedCursor) mayKeep(m *archive.Meta) bool {
	for k, v := range c.labels {
		if !m.MayHaveLabel(k, v) {
			return false
		}
	}
	if c.keep == nil {
		return true
	}
	for _, st := range []runstate.TerminalStatus{runstate.Succeeded, runstate.Failed, runstate.Cancelled} {
		if m.StateCount(uint8(st)) > 0 && c.keep(st.State()) {
			return true
		}
	}
	return false
}

// wants reports whether the cursor lists e, the newest copy of its id.
func (c *sealedCursor) wants(e *archive.Entry) bool {
	return (c.keep == nil || c.keep(runstate.TerminalStatus(e.Status).State())) && hasLabels(e.Labels, c.labels)
}

// hidden reports whether a segment newer than m that the filter ruled out
// holds id: its copy is the newest, and not listed. Cost: the in-memory
// hashes of the segments whose id range covers id, and the index of one
// that may hold it (cached, else one GET).
func (c *sealedCursor) hidden(ctx context.Context, m *archive.Meta, id string) (bool, error) {
	e, seq, err := c.hiders.entry(ctx, id)
	return e != nil && seq > m.Seq, err
}

// fix restores the heap order after the head's key grew.
func (c *sealedCursor) fix() {
	for i := 0; i+1 < len(c.heap) && c.less(c.heap[i+1], c.heap[i]); i++ {
		c.heap[i], c.heap[i+1] = c.heap[i+1], c.heap[i]
	}
}

// peek returns the next sealed run's entry, or nil at the end.
func (c *sealedCursor) peek(ctx context.Context) (*archive.Entry, error) {
	if c.in.segments == nil {
		return nil, nil
	}
	if !c.inited {
		if err := c.init(ctx); err != nil {
			return nil, err
		}
	}
	for len(c.heap) > 0 {
		h := c.heap[0]
		if h.x == nil {
			x, err := c.in.segments.index(ctx, h.m)
			if err != nil {
				return nil, err
			}
			h.x, h.pos = x, c.start(x)
		}
		if h.pos < 0 || h.pos == len(h.x.Entries) {
			c.heap = c.heap[1:]
			continue
		}
		e := &h.x.Entries[h.pos]
		if e.ID != h.key {
			h.key = e.ID
			c.fix()
			if c.heap[0] != h {
				continue
			}
		}
		// h holds the first id left in the cursor's order, and of the
		// segments holding it the newest (less): its copy decides, older
		// ones are skipped.
		skip := e.ID == c.last || !c.wants(e)
		if !skip && c.hiders != nil {
			hid, err := c.hidden(ctx, h.m, e.ID)
			if err != nil {
				return nil, err
			}
			skip = hid
		}
		if skip {
			c.last, c.after = e.ID, e.ID
			if c.advance(h) {
				h.key = h.x.Entries[h.pos].ID
				c.fix()
			} else {
				c.heap = c.heap[1:]
			}
			continue
		}
		return e, nil
	}
	return nil, nil
}

// next moves past the entry peek returned.
func (c *sealedCursor) next() {
	if len(c.heap) == 0 || c.heap[0].x == nil {
		return
	}
	h := c.heap[0]
	c.last = h.x.Entries[h.pos].ID
	c.after = c.last
	if c.advance(h) {
		h.key = h.x.Entries[h.pos].ID
		c.fix()
	} else {
		c.heap = c.heap[1:]
	}
}
