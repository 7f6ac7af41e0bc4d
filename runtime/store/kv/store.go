package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/btree"

	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// objects names the objects of one store and performs retried requests.
type objects struct {
	store objstore.Store
	pfx   string // "" or "prefix/"
	log   *slog.Logger
	rmu   sync.Mutex
	rnd   *rand.Rand
	// timeout bounds one store request, so a hung request becomes a
	// retryable error instead of a stuck writer.
	timeout time.Duration
	// clock times the pauses between attempts and stamps health.
	clock  clock.Clock
	health healthTracker
}

// healthTracker remembers whether the store answers: requests failing
// with errors a retry may fix, since when, and the last such error. Reads
// and writes are tracked apart, so a read that answers (the read-back of
// a failed PUT) does not hide writes that keep failing.
type healthTracker struct {
	clock         clock.Clock
	mu            sync.Mutex
	reads, writes healthRun
}

type healthRun struct {
	since    time.Time
	last     error
	failures int64
}

func (h *healthTracker) run(write bool) *healthRun {
	if write {
		return &h.writes
	}
	return &h.reads
}

func (h *healthTracker) failed(write bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.run(write)
	if r.failures == 0 {
		r.since = h.clock.Now()
	}
	r.failures++
	r.last = err
}

func (h *healthTracker) answered(write bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.run(write) = healthRun{}
}

func (h *healthTracker) get() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.writes
	if r.failures == 0 || (h.reads.failures > 0 && h.reads.since.Before(r.since)) {
		if h.reads.failures > 0 {
			r = h.reads
		}
	}
	return Health{Failing: r.failures > 0, Since: r.since, LastError: r.last, Failures: r.failures}
}

func newObjects(store objstore.Store, opts Options) (*objects, error) {
	pfx := ""
	if opts.Prefix != "" {
		pfx = strings.TrimSuffix(opts.Prefix, "/") + "/"
		if err := objstore.ValidateKey(pfx + "manifest"); err != nil {
			return nil, fmt.Errorf("kv: Options.Prefix %q: %w", opts.Prefix, err)
		}
	}
	// A private source: opts.Rand may be shared by several handles.
	rnd := rand.New(rand.NewPCG(opts.Rand.Uint64(), opts.Rand.Uint64()))
	return &objects{store: store, pfx: pfx, log: opts.Logger, rnd: rnd, timeout: opts.RequestTimeout,
		clock: opts.Clock, health: healthTracker{clock: opts.Clock}}, nil
}

func (o *objects) manifestKey() string         { return o.pfx + "manifest" }
func (o *objects) walKey(seq uint64) string    { return fmt.Sprintf("%swal/%020d", o.pfx, seq) }
func (o *objects) chunkKey(name string) string { return o.pfx + "chunk/" + name }
func (o *objects) largeKey(name string) string { return o.pfx + "large/" + name }

// walSeqOf parses the sequence out of a WAL key, or returns false.
func (o *objects) walSeqOf(key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, o.pfx+"wal/")
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

func (o *objects) jitter(d time.Duration) time.Duration {
	o.rmu.Lock()
	defer o.rmu.Unlock()
	return d/2 + time.Duration(o.rnd.Int64N(int64(d/2)+1))
}

// permanent reports errors a retry cannot fix.
func permanent(err error) bool {
	return errors.Is(err, objstore.ErrNotExist) || errors.Is(err, objstore.ErrPrecondition) ||
		errors.Is(err, objstore.ErrInvalidKey) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrFenced)
}

// retry runs fn until it succeeds, fails permanently or ctx ends, backing
// off exponentially between attempts. Each attempt gets Options.RequestTimeout.
func (o *objects) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	return o.retryOp(ctx, what, false, fn)
}

// retryOp is retry for a read (write false) or a write, as Health counts them.
func (o *objects) retryOp(ctx context.Context, what string, write bool, fn func(ctx context.Context) error) error {
	backoff := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.timeout)
		err := fn(actx)
		cancel()
		if err == nil || permanent(err) {
			o.health.answered(write)
			return err
		}
		o.health.failed(write, err)
		if ctx.Err() != nil {
			return fmt.Errorf("kv: %s: gave up after %d attempts: %w", what, attempt, errors.Join(ctx.Err(), err))
		}
		if attempt == 3 || attempt%20 == 0 {
			o.log.Warn("kv: store request failing, retrying", "op", what, "attempt", attempt, "err", err)
		}
		if serr := clock.Sleep(ctx, o.clock, o.jitter(backoff)); serr != nil {
			return fmt.Errorf("kv: %s: gave up after %d attempts: %w", what, attempt, errors.Join(serr, err))
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (o *objects) get(ctx context.Context, key string) ([]byte, objstore.ObjectInfo, error) {
	var data []byte
	var info objstore.ObjectInfo
	err := o.retry(ctx, "get "+key, func(ctx context.Context) error {
		var err error
		data, info, err = o.store.Get(ctx, key)
		return err
	})
	return data, info, err
}

func (o *objects) put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	var info objstore.ObjectInfo
	err := o.retryOp(ctx, "put "+key, true, func(ctx context.Context) error {
		var err error
		info, err = o.store.Put(ctx, key, data, opts)
		return err
	})
	return info, err
}

// putVerified writes a conditional PUT whose outcome may be unknown: after
// any failure (a timeout or lost response may hide a write that landed,
// and a precondition failure may be our own earlier attempt) it reads the
// object back and asks ours whether it holds this write. It returns nil
// once our write is in the store, an error wrapping ErrPrecondition when
// another write holds the key, or the error that stopped it (ctx).
func (o *objects) putVerified(ctx context.Context, key string, data []byte, opts objstore.PutOptions, ours func(got []byte) bool) (objstore.ObjectInfo, error) {
	backoff := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, o.timeout)
		info, err := o.store.Put(actx, key, data, opts)
		cancel()
		if err == nil || errors.Is(err, objstore.ErrPrecondition) {
			o.health.answered(true)
		}
		if err == nil {
			return info, nil
		}
		if errors.Is(err, objstore.ErrInvalidKey) {
			return info, err
		}
		if !permanent(err) {
			o.health.failed(true, err)
		}
		got, ginfo, gerr := o.get(ctx, key)
		switch {
		case gerr == nil && ours(got):
			return ginfo, nil // an attempt of ours landed; its response was lost
		case gerr == nil && errors.Is(err, objstore.ErrPrecondition):
			return info, err // someone else's write holds the key
		case gerr != nil && !errors.Is(gerr, objstore.ErrNotExist):
			return info, fmt.Errorf("kv: read back %s after %v: %w", key, err, gerr)
		}
		// Our write did not land (yet): try again after a pause.
		if attempt == 3 || attempt%20 == 0 {
			o.log.Warn("kv: store write failing, retrying", "object", key, "attempt", attempt, "err", err)
		}
		if serr := clock.Sleep(ctx, o.clock, o.jitter(backoff)); serr != nil {
			return info, fmt.Errorf("kv: put %s: gave up after %d attempts: %w", key, attempt, errors.Join(serr, err))
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (o *objects) del(ctx context.Context, key string) error {
	return o.retryOp(ctx, "delete "+key, true, func(ctx context.Context) error { return o.store.Delete(ctx, key) })
}

// list returns every object under prefix sorting after startAfter.
func (o *objects) list(ctx context.Context, prefix, startAfter string) ([]objstore.ObjectInfo, error) {
	var out []objstore.ObjectInfo
	for {
		var page []objstore.ObjectInfo
		err := o.retry(ctx, "list "+prefix, func(ctx context.Context) error {
			var err error
			page, err = o.store.List(ctx, prefix, startAfter, 1000)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		startAfter = page[len(page)-1].Key
	}
}

// repairHint ends every ErrCorrupt message: what an operator does next.
const repairHint = "run 'tqw-dsl store check' to list every problem, and see docs/OPERATIONS.md for the repair"

func corrupt(key string, err error) error {
	return fmt.Errorf("%w %q: %v; %s", ErrCorrupt, key, err, repairHint)
}

// readManifest returns the manifest and its ETag, or (nil, "", nil) if the
// store has none yet.
func (o *objects) readManifest(ctx context.Context) (*manifest, string, error) {
	data, info, err := o.get(ctx, o.manifestKey())
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, "", corrupt(o.manifestKey(), err)
	}
	return m, info.ETag, nil
}

func newTree() *btree.BTreeG[*entry] {
	return btree.NewBTreeGOptions(entryLess, btree.Options{NoLocks: true, Degree: 32})
}

// loadCheckpoint reads the chunks of m in parallel into a new tree.
func (o *objects) loadCheckpoint(ctx context.Context, m *manifest) (*btree.BTreeG[*entry], error) {
	tree := newTree()
	if len(m.chunks) == 0 {
		return tree, nil
	}
	decoded := make([][]entry, len(m.chunks))
	errs := make([]error, len(m.chunks))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, c := range m.chunks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			key := o.chunkKey(c.name)
			data, _, err := o.get(ctx, key)
			if errors.Is(err, objstore.ErrNotExist) {
				// A Reader may see this when a checkpoint replaced the
				// manifest it read; it checks the ErrNotExist and retries.
				errs[i] = fmt.Errorf("%w %q: checkpoint chunk listed by the manifest is missing (%w); %s", ErrCorrupt, key, err, repairHint)
				return
			}
			if err != nil {
				errs[i] = fmt.Errorf("kv: read checkpoint chunk: %w", err)
				return
			}
			es, err := decodeChunk(data)
			if err == nil && len(es) != c.count {
				err = fmt.Errorf("%w: %d entries, manifest says %d", errDecode, len(es), c.count)
			}
			if err == nil && len(es) > 0 && string(es[0].key) != string(c.first) {
				err = fmt.Errorf("%w: first key differs from the manifest", errDecode)
			}
			if err != nil {
				errs[i] = corrupt(key, err)
				return
			}
			decoded[i] = es
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, es := range decoded {
		for j := range es {
			if _, replaced := tree.Load(&es[j]); replaced {
				return nil, corrupt(o.manifestKey(), fmt.Errorf("%w: chunks overlap at key %q", errDecode, es[j].key))
			}
		}
	}
	return tree, nil
}

// replayer applies WAL objects in sequence order to a tree.
type replayer struct {
	o    *objects
	tree *btree.BTreeG[*entry]
	// base is the first live WAL sequence of the checkpoint tree came
	// from: the log below it is in the tree. Error messages use it.
	base     uint64
	next     uint64 // next WAL sequence to apply
	maxEpoch uint64 // highest epoch seen in the WAL replayed so far
	objects  int    // WAL objects applied
	bytes    int64  // WAL bytes applied
	fences   []uint64
	touched  func(key []byte) // called for every key written, may be nil
}

// gapError reports a WAL sequence missing from the store while the log
// goes on past it: a later object exists, or an object listed a moment
// earlier was gone when fetched. Only the caller can tell a checkpoint
// that moved past it (a Reader racing the writer) from a damaged store;
// it turns the gap into ErrCorrupt with replayer.gapCorrupt.
type gapError struct {
	missing uint64 // the first missing sequence
	present uint64 // the first sequence after it that exists; 0 when a listed object vanished
}

func (g *gapError) Error() string { return fmt.Sprintf("kv: WAL sequence %d missing", g.missing) }

// lastGood names the last object the log is good up to.
func (r *replayer) lastGood() string {
	if r.next > r.base {
		return fmt.Sprintf("%q", r.o.walKey(r.next-1))
	}
	return fmt.Sprintf("the checkpoint (%q says the log starts at WAL sequence %d)", r.o.manifestKey(), r.base)
}

// walCorrupt is the ErrCorrupt of the WAL slot seq: what is wrong there,
// the last good object, and what to do.
func (r *replayer) walCorrupt(seq uint64, what string) error {
	return fmt.Errorf("%w %q: %s; the log is good up to %s, and no commit from %q on can be replayed. "+
		"Restore the object from a backup or bucket versioning, or cut the log there with 'tqw-dsl store truncate' "+
		"(it reports the commits it discards); %s",
		ErrCorrupt, r.o.walKey(seq), what, r.lastGood(), r.o.walKey(seq), repairHint)
}

// gapCorrupt is the ErrCorrupt of a gap the caller found to be real.
func (r *replayer) gapCorrupt(g *gapError) error {
	if g.present != 0 {
		return r.walCorrupt(g.missing, fmt.Sprintf("missing while %q exists (a gap in the WAL)", r.o.walKey(g.present)))
	}
	return r.walCorrupt(g.missing, "listed, then missing when read, and no checkpoint moved past it")
}

// decodedWAL is a fetched and decoded WAL object.
type decodedWAL struct {
	seq  uint64
	size int
	h    walHeader
	recs [][]walOp
	err  error // the fetch error, or a decoding error (wrapping errDecode)
	// misplaced: the object decodes but its header names another sequence.
	misplaced bool
}

func decodeWALAt(seq uint64, data []byte) decodedWAL {
	d := decodedWAL{seq: seq, size: len(data)}
	h, recs, err := decodeWAL(data)
	if err != nil {
		d.err = err
		return d
	}
	if h.seq != seq {
		// Renamed, copied or swapped with another slot: applying it here
		// would reorder commits.
		d.err = fmt.Errorf("%w: its header says sequence %d (renamed, copied or reordered)", errDecode, h.seq)
		d.misplaced = true
	}
	d.h, d.recs = h, recs
	return d
}

// apply decodes and applies wal/<seq> (already fetched).
func (r *replayer) apply(seq uint64, data []byte) error {
	return r.applyDecoded(decodeWALAt(seq, data))
}

// applyDecoded applies one decoded WAL object; objects must come in
// sequence order.
//
// Invariant (see doc.go, "Fencing"): epochs never decrease along the WAL. A
// writer only writes sequence s+1 after s succeeded, and a newer writer's
// fence takes the first sequence the older one has not written, so no
// object of an older epoch can follow a newer one. A decrease therefore
// means a damaged store and stops the replay with ErrCorrupt.
func (r *replayer) applyDecoded(d decodedWAL) error {
	if d.err != nil {
		return r.walCorrupt(d.seq, d.err.Error())
	}
	if d.h.epoch < r.maxEpoch {
		return r.walCorrupt(d.seq, fmt.Sprintf("written by epoch %d after an object of epoch %d: objects were reordered or restored from an older copy, or a fenced writer wrote past a fence",
			d.h.epoch, r.maxEpoch))
	}
	r.maxEpoch = d.h.epoch
	r.applyRecords(d)
	return nil
}

// applyRecords applies the commits of d, a good WAL object at r.next.
func (r *replayer) applyRecords(d decodedWAL) {
	if d.h.fence {
		r.fences = append(r.fences, d.seq)
	}
	n := 0
	for _, ops := range d.recs {
		n += len(ops)
	}
	slab := make([]entry, n) // one allocation for every entry of the object
	for _, ops := range d.recs {
		for _, op := range ops {
			e := &slab[0]
			slab = slab[1:]
			applyOpTo(r.tree, op, e)
			if r.touched != nil {
				r.touched(op.key)
			}
		}
	}
	r.next = d.seq + 1
	r.objects++
	r.bytes += int64(d.size)
}

// applyOpTo applies op to tree, using e (zeroed) as the new entry.
func applyOpTo(tree *btree.BTreeG[*entry], op walOp, e *entry) {
	switch op.kind {
	case opPut:
		e.key, e.val = op.key, op.value
		tree.Set(e)
	case opPutLarge:
		ref := op.large
		e.key, e.large = op.key, &ref
		tree.Set(e)
	case opDelete:
		tree.Delete(&entry{key: op.key})
	}
}

// replayAll applies every WAL object from r.next to the end of the log. It
// lists to find the run, then fetches in parallel windows. The log ends
// where the listing does; a missing sequence with a later object after
// it, or a listed object gone when fetched, stops the replay with a
// *gapError for the caller to judge (see gapError). What was applied is
// a prefix of the log.
//
// A listing may miss an object written while it ran (a later page, a
// directory read racing a create), never one that existed throughout; so
// a sequence is called missing only after a GET of it says so.
func (r *replayer) replayAll(ctx context.Context) error {
	for {
		infos, err := r.o.list(ctx, r.o.pfx+"wal/", r.o.walKey(r.next-1))
		if err != nil {
			return err
		}
		var run []uint64
		var after uint64 // first listed sequence past the run, 0 if none
		for _, in := range infos {
			seq, ok := r.o.walSeqOf(in.Key)
			if !ok {
				continue
			}
			if seq != r.next+uint64(len(run)) {
				after = seq
				break
			}
			run = append(run, seq)
		}
		if len(run) == 0 {
			if after == 0 {
				return nil // the end of the log
			}
			data, _, err := r.o.get(ctx, r.o.walKey(r.next))
			if errors.Is(err, objstore.ErrNotExist) {
				return &gapError{missing: r.next, present: after}
			}
			if err != nil {
				return err
			}
			if err := r.apply(r.next, data); err != nil {
				return err
			}
			continue
		}
		for i := 0; i < len(run); i += walWindow {
			for _, d := range r.o.fetchWAL(ctx, run[i:min(i+walWindow, len(run))]) {
				if errors.Is(d.err, objstore.ErrNotExist) {
					return &gapError{missing: d.seq}
				}
				if d.err != nil && !errors.Is(d.err, errDecode) {
					return fmt.Errorf("kv: read %s: %w", r.o.walKey(d.seq), d.err)
				}
				if err := r.applyDecoded(d); err != nil {
					return err
				}
			}
		}
	}
}

// walWindow is how many WAL objects are fetched at once.
const walWindow = 16

// fetchWAL fetches and decodes the WAL objects seqs in parallel. A failed
// fetch is in decodedWAL.err as the store returned it.
func (o *objects) fetchWAL(ctx context.Context, seqs []uint64) []decodedWAL {
	decoded := make([]decodedWAL, len(seqs))
	var wg sync.WaitGroup
	for j, seq := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, _, err := o.get(ctx, o.walKey(seq))
			if err != nil {
				decoded[j] = decodedWAL{seq: seq, err: err}
				return
			}
			decoded[j] = decodeWALAt(seq, data)
		}()
	}
	wg.Wait()
	return decoded
}

// openState loads the checkpoint of m and replays the WAL after it, for
// the writer whose epoch bump wrote m. From that bump on, nobody deletes
// an object the replay needs: an older writer's checkpoint fails its
// If-Match manifest write and deletes nothing, collection of leftovers
// only touches WAL below the first live sequence it opened with, and
// fences are never deleted. So a missing chunk or WAL object is
// corruption, unless a newer writer opened the store meanwhile (its
// checkpoint may delete what this one is reading): then ErrFenced.
func (o *objects) openState(ctx context.Context, m *manifest, touched func(key []byte)) (*replayer, error) {
	tree, err := o.loadCheckpoint(ctx, m)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, o.fencedOr(ctx, m.epoch, err)
	}
	if err != nil {
		return nil, err
	}
	r := &replayer{o: o, tree: tree, base: m.firstLiveWAL, next: m.firstLiveWAL, touched: touched}
	err = r.replayAll(ctx)
	if g := (*gapError)(nil); errors.As(err, &g) {
		return nil, o.fencedOr(ctx, m.epoch, r.gapCorrupt(g))
	}
	if err != nil {
		return nil, err
	}
	if r.maxEpoch > m.epoch {
		return nil, o.fencedOr(ctx, m.epoch, fmt.Errorf("%w: the WAL holds objects of epoch %d, newer than the manifest's epoch %d: the manifest is older than the log (restored from an older copy?); %s",
			ErrCorrupt, r.maxEpoch, m.epoch, repairHint))
	}
	return r, nil
}

// fencedOr returns ErrFenced when the manifest moved past epoch (a newer
// writer opened the store, which explains what the caller saw), else
// corruptErr.
func (o *objects) fencedOr(ctx context.Context, epoch uint64, corruptErr error) error {
	m, _, err := o.readManifest(ctx)
	if err != nil {
		return fmt.Errorf("%w (re-reading the manifest to rule out a newer writer failed: %v)", corruptErr, err)
	}
	if m != nil && m.epoch > epoch {
		return fmt.Errorf("%w: a writer of epoch %d opened the store while this one (epoch %d) was opening", ErrFenced, m.epoch, epoch)
	}
	return corruptErr
}

// refuseManifestless is called when the store has no manifest, before
// Open creates one: it returns ErrCorrupt if WAL or chunk objects exist
// anyway (the manifest was deleted; a fresh store over them would hide
// their data, and its collection of leftovers would delete it), or
// created = true if the manifest appeared meanwhile (another opener; a
// writer creates the manifest before any other object). Cost: 1 LIST per
// folder, only on a store without a manifest.
func (o *objects) refuseManifestless(ctx context.Context) (created bool, err error) {
	for _, dir := range []string{"wal/", "chunk/"} {
		key, found, err := o.firstObject(ctx, dir)
		if err != nil || !found {
			if err != nil {
				return false, err
			}
			continue
		}
		m, _, err := o.readManifest(ctx)
		if err != nil || m != nil {
			return m != nil, err
		}
		return false, fmt.Errorf("%w %q: missing, but %q and maybe more objects of the store exist: starting a fresh store over them would lose their data; restore the manifest from a backup or bucket versioning; %s",
			ErrCorrupt, o.manifestKey(), key, repairHint)
	}
	return false, nil
}

// firstObject returns the first object under dir of the store, if any.
func (o *objects) firstObject(ctx context.Context, dir string) (string, bool, error) {
	var page []objstore.ObjectInfo
	err := o.retry(ctx, "list "+o.pfx+dir, func(ctx context.Context) error {
		var err error
		page, err = o.store.List(ctx, o.pfx+dir, "", 1)
		return err
	})
	if err != nil || len(page) == 0 {
		return "", false, err
	}
	return page[0].Key, true, nil
}

// fetchLarge reads a large value.
func (o *objects) fetchLarge(ctx context.Context, ref *largeRef) ([]byte, error) {
	data, _, err := o.get(ctx, o.largeKey(ref.name))
	if err != nil {
		return nil, fmt.Errorf("kv: read large value %q: %w", ref.name, err)
	}
	if int64(len(data)) != ref.size {
		return nil, corrupt(o.largeKey(ref.name), fmt.Errorf("%w: %d bytes, expected %d", errDecode, len(data), ref.size))
	}
	return data, nil
}
