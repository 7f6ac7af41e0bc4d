package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/btree"
	"golang.org/x/sys/unix"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// The packed folders of a store: see doc.go, "Packed folders", for what
// they promise and why; segment.go for the bytes on disk.
const (
	logDirName = reserved + "log" // FOLDER/\log: the marker of a packed folder, holding its segments
	lockName   = "lock"           // FOLDER/\log/lock: flock for appends
	// Segment sizes grow from segMin by doubling to segMax, so a small
	// store costs little disk and a busy one seldom makes a segment.
	segMin = 64 << 10
	segMax = 8 << 20
	// maxBatch bounds the records one append writes.
	maxBatch    = 512
	maxBatchLen = 16 << 20
)

var _ objstore.Packer = (*Store)(nil)

// packed is one packed folder as one Store handle sees it.
type packed struct {
	s      *Store
	prefix string // key prefix of its objects: "" or "a/b/"
	dir    string // the folder
	dirF   *os.File
	logF   *os.File // the \log folder
	lockF  *os.File

	// mu guards the index and the segments' scan state. An append holds
	// it (and the flock) from its catch-up scan to its fdatasync, so no
	// reader in this process sees a record before it is durable.
	mu           sync.Mutex
	built        bool
	segs         []*segment // oldest first, as far as this handle knows
	idx          *btree.BTreeG[*record]
	plain        bool // the folder held object files when first looked at
	plainChecked bool
	own          *segment // the segment this handle appends to; nil: make one first
	nextCap      int64
	spareMu      sync.Mutex
	spare        chan *spare // the next segment file, being made or made; nil when none
	spareWG      sync.WaitGroup
	closed       bool  // no more spares
	poison       error // a failed write: no more appends by this handle

	qmu     sync.Mutex // guards the queue; never held with mu
	queue   []*logOp
	busy    bool // an append is in progress or about to be
	qclosed bool
	drainWG sync.WaitGroup
}

// segment is one segment file.
type segment struct {
	num     uint64
	f       *os.File
	size    int64
	salt    [16]byte
	prevEnd int64 // from its header: the end of the previous segment
	next    int64 // records before next are in the index
	stopped stop  // why the last scan stopped at next
	// finished: a later segment exists, whose header says the records of
	// this one end at limit. done: scanned up to limit.
	finished, done bool
	limit          int64
	live           int   // put records in it that are the current version of their key
	liveBytes      int64 // their bytes
	fdClosed       bool  // f was closed: no current object left in it
	resynced       int64 // read past bytes that are no record at this offset (0: never)
}

// record is the current version of one object of a packed folder.
type record struct {
	key     string
	seg     *segment
	dataOff int64
	size    int64
	total   int64 // bytes of the whole record
	etag    string
	mod     time.Time
}

func recordLess(a, b *record) bool { return a.key < b.key }

func (r *record) info() objstore.ObjectInfo {
	return objstore.ObjectInfo{Key: r.key, Size: r.size, ETag: r.etag, ModTime: r.mod}
}

// logOp is one write waiting for an append.
type logOp struct {
	ctx  context.Context
	key  string
	del  bool
	data []byte
	etag string
	opts objstore.PutOptions
	// move: re-append an existing record unchanged (compaction)
	move    *record
	info    objstore.ObjectInfo
	err     error
	decided bool // err and info are final
	done    chan struct{}
}

func segName(num uint64) string { return fmt.Sprintf("%010d", num) }

// folderKey returns the key prefix of key's folder: "" or "a/b/".
func folderKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i+1]
	}
	return ""
}

// Pack implements objstore.Packer: it makes the folder prefix packed (see
// doc.go, "Packed folders"). Cost, once: mkdir of the folder's \log and an
// fsync of the folder.
func (s *Store) Pack(ctx context.Context, prefix string) error {
	if err := ctxErr(ctx, "pack", prefix); err != nil {
		return err
	}
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			return fmt.Errorf("%w prefix %q: a packed folder's prefix ends in '/'", objstore.ErrInvalidKey, prefix)
		}
		if err := objstore.ValidatePrefix(prefix); err != nil {
			return err
		}
		if err := s.mkdirs(prefix + "x"); err != nil {
			return fmt.Errorf("file: pack %q: %w", prefix, err)
		}
	}
	dir := strings.TrimSuffix(s.path(prefix), "/")
	switch err := os.Mkdir(filepath.Join(dir, logDirName), 0o700); {
	case err == nil:
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("file: pack %q: %w", prefix, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("file: pack %q: %w", prefix, err)
	}
	_, err := s.packedFor(prefix)
	return err
}

// packedFor returns the packed folder of the key prefix folder, or nil when
// the folder is not packed. A folder known packed stays known; any other
// costs one stat per call, so a folder another process packs is seen at
// once.
func (s *Store) packedFor(folder string) (*packed, error) {
	s.pmu.Lock()
	p := s.packs[folder]
	s.pmu.Unlock()
	if p != nil {
		return p, nil
	}
	dir := filepath.Clean(s.path(folder))
	if folder == "" {
		dir = s.root
	}
	fi, err := os.Lstat(filepath.Join(dir, logDirName))
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return nil, nil
	case err != nil:
		return nil, err
	case !fi.IsDir():
		return nil, nil
	}
	p, err = s.openPacked(folder, dir)
	if err != nil {
		return nil, err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if q := s.packs[folder]; q != nil { // opened concurrently
		p.close()
		return q, nil
	}
	if s.packs == nil {
		s.packs = map[string]*packed{}
	}
	s.packs[folder] = p
	return p, nil
}

func (s *Store) openPacked(folder, dir string) (*packed, error) {
	p := &packed{s: s, prefix: folder, dir: dir, nextCap: s.segMin,
		idx: btree.NewBTreeGOptions(recordLess, btree.Options{NoLocks: true})}
	var err error
	fail := func(err error) (*packed, error) {
		p.close()
		return nil, fmt.Errorf("file: packed folder %q: %w", folder, err)
	}
	if p.dirF, err = os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
		return fail(err)
	}
	logDir := filepath.Join(dir, logDirName)
	if p.logF, err = os.OpenFile(logDir, os.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
		return fail(err)
	}
	if s.readOnly {
		// A reader creates nothing; without a lock file no writer has
		// appended yet, and flock opens it once one made it.
		if err := p.openLockReadOnly(); err != nil {
			return fail(err)
		}
		return p, nil
	}
	if p.lockF, err = os.OpenFile(filepath.Join(logDir, lockName), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return fail(err)
	}
	return p, nil
}

// openLockReadOnly opens the lock file for a handle of OpenReadOnly (a
// shared flock needs no write access), leaving lockF nil while there is
// none.
func (p *packed) openLockReadOnly() error {
	f, err := os.Open(filepath.Join(p.dir, logDirName, lockName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	p.lockF = f
	return nil
}

// close releases the folder's files; no append may be in progress.
func (p *packed) close() {
	for _, sg := range p.segs {
		sg.f.Close()
	}
	for _, f := range []*os.File{p.dirF, p.logF, p.lockF} {
		if f != nil {
			f.Close()
		}
	}
}

// shutdown waits for appends in progress and closes the folder.
func (p *packed) shutdown() {
	p.qmu.Lock()
	p.qclosed = true
	p.qmu.Unlock()
	p.drainWG.Wait()
	p.dropSpare()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.close()
	p.segs = nil
}

// errNoLockFile: a read-only handle found no lock file to take.
var errNoLockFile = errors.New("no lock file")

func (p *packed) flock(how int) error {
	if p.lockF == nil { // a read-only handle, and no writer had made the lock file
		if err := p.openLockReadOnly(); err != nil {
			return err
		}
		if p.lockF == nil {
			if how == unix.LOCK_UN {
				return nil
			}
			return errNoLockFile
		}
	}
	return withFd(p.lockF, func(fd int) error {
		for {
			err := unix.Flock(fd, how)
			if err != unix.EINTR {
				return err
			}
		}
	})
}

// --- reading ---

// buildLocked reads every segment into the index.
func (p *packed) buildLocked() error {
	des, err := p.logF.ReadDir(-1)
	if err == nil {
		_, err = p.logF.Seek(0, 0)
	}
	if err != nil {
		return err
	}
	var nums []uint64
	for _, de := range des {
		if n, err := strconv.ParseUint(de.Name(), 10, 64); err == nil && len(de.Name()) == 10 {
			nums = append(nums, n)
		}
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	for _, n := range nums {
		if testBeforeOpenSegment != nil {
			testBeforeOpenSegment(n)
		}
		sg, err := p.openSegment(n)
		if errors.Is(err, fs.ErrNotExist) {
			// Reclaimed by an appender meanwhile. Reclaim goes oldest
			// first, so the segments opened before it went too: drop
			// them, or the next one would look like it follows a segment
			// removed by hand, and the last of them would be read past
			// the end its successor's header declares.
			p.dropRetiredLocked()
			continue
		}
		if err != nil {
			return err
		}
		if err := p.addSegmentLocked(sg); err != nil {
			return err
		}
	}
	// Legacy objects: files written before the folder was packed. None
	// are made after, so one look per handle does.
	if !p.plainChecked {
		des, err := os.ReadDir(p.dir)
		if err != nil {
			return err
		}
		for _, de := range des {
			if de.Type().IsRegular() && !strings.Contains(de.Name(), reserved) {
				p.plain = true
				break
			}
		}
		p.plainChecked = true
	}
	p.built = true
	for _, sg := range p.segs {
		if err := p.scanLocked(sg); err != nil {
			return err
		}
	}
	return nil
}

// testBeforeOpenSegment, when set by a test, runs before buildLocked
// opens segment n.
var testBeforeOpenSegment func(n uint64)

// isRetired reports whether sg's file was deleted (by a reclaim).
func isRetired(sg *segment) (bool, error) {
	var st unix.Stat_t
	if err := withFd(sg.f, func(fd int) error { return unix.Fstat(fd, &st) }); err != nil {
		return false, err
	}
	return st.Nlink == 0, nil
}

// dropRetiredLocked closes and forgets the oldest known segments whose
// files were deleted.
func (p *packed) dropRetiredLocked() {
	for len(p.segs) > 0 {
		sg := p.segs[0]
		if retired, err := isRetired(sg); err != nil || !retired {
			return
		}
		sg.f.Close()
		p.segs = p.segs[1:]
	}
}

// nextSegment opens segment n if it exists: one fstatat when it does not.
func (p *packed) nextSegment(n uint64) (*segment, error) {
	var st unix.Stat_t
	err := withFd(p.logF, func(dfd int) error { return unix.Fstatat(dfd, segName(n), &st, 0) })
	if errors.Is(err, unix.ENOENT) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	return p.openSegment(n)
}

// openSegment opens segment n and reads its header. A header that fails
// its checks leaves a segment whose records cannot be read (size 0).
func (p *packed) openSegment(n uint64) (*segment, error) {
	f, err := os.Open(filepath.Join(p.dir, logDirName, segName(n)))
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	sg := &segment{num: n, f: f, size: fi.Size(), next: segHeaderLen}
	b := make([]byte, segHeaderLen)
	_, rerr := f.ReadAt(b, 0)
	h, herr := decodeSegHeader(b)
	if rerr != nil || herr != nil {
		p.s.log.Error("file: packed folder: segment header unreadable; its objects are lost", "segment", f.Name(), "err", errors.Join(rerr, herr))
		sg.size = segHeaderLen
		return sg, nil
	}
	sg.salt, sg.prevEnd = h.salt, h.prevEnd
	return sg, nil
}

// addSegmentLocked appends sg after the last known segment, which its
// header finishes.
func (p *packed) addSegmentLocked(sg *segment) error {
	if n := len(p.segs); n > 0 {
		last, end := p.segs[n-1], sg.prevEnd
		if sg.num != last.num+1 {
			// Segments go oldest first, so one missing in the middle was
			// removed by hand: sg's header speaks of it, not of last.
			p.s.log.Error("file: packed folder: a segment is missing; its objects are lost", "folder", p.dir, "after", last.num, "before", sg.num)
			end = last.size
		}
		if err := p.finishLocked(last, end); err != nil {
			return err
		}
	}
	p.segs = append(p.segs, sg)
	return nil
}

// finishLocked records that sg's records end at end (a later segment's
// header says so) and indexes what lies before it.
func (p *packed) finishLocked(sg *segment, end int64) error {
	if sg.finished {
		return nil
	}
	if end < segHeaderLen || end > sg.size {
		end = sg.size // a header that lies: read what is there
	}
	sg.finished, sg.limit = true, end
	if sg.next > end && p.built {
		// This handle indexed records past the end its successor's writer
		// found (they vanished after a failed flush): start over.
		return p.rebuildLocked()
	}
	if p.built {
		return p.scanLocked(sg)
	}
	return nil
}

// rebuildLocked forgets the index and reads everything again.
func (p *packed) rebuildLocked() error {
	for _, sg := range p.segs {
		sg.f.Close()
	}
	p.segs, p.built, p.own = nil, false, nil
	p.idx.Clear()
	return p.buildLocked()
}

// scanLocked indexes sg's records from sg.next on: up to the first
// offset without a record while sg may still grow, up to its limit
// (skipping damage) once finished.
func (p *packed) scanLocked(sg *segment) error {
	limit, resync := sg.size, false
	if sg.finished {
		if sg.done {
			return nil
		}
		limit, resync = sg.limit, true
	}
	sc := scanner{r: sg.f, salt: sg.salt, limit: limit}
	end, damaged, why := sc.scan(sg.next, resync, func(off int64, r rec) { p.applyLocked(sg, r) })
	if sc.err != nil {
		return fmt.Errorf("read segment %s: %w", sg.f.Name(), sc.err)
	}
	sg.next, sg.stopped = end, why
	if sg.finished {
		sg.done = true
	}
	if damaged > 0 {
		p.s.log.Error("file: packed folder: damaged bytes in a segment skipped; the objects they held are lost, the ones after them kept",
			"segment", sg.f.Name(), "bytes", damaged)
	}
	return nil
}

// resyncLocked reads the last segment sg past bytes that are no record,
// up to its end, indexing every valid record found at an 8-aligned
// offset; the caller holds the flock, so no append is in progress. In the
// last segment only two things leave such bytes: damage, after which the
// records that follow are acknowledged ones, and a write torn by a crash
// of sg's maker, which was its last (a later writer makes a new segment),
// so whatever follows it belongs to writes never acknowledged either way.
// Once done, sg is not read past those bytes again until it grows.
func (p *packed) resyncLocked(sg *segment) error {
	if sg.resynced == sg.next {
		return nil
	}
	sc := scanner{r: sg.f, salt: sg.salt, limit: sg.size}
	end, damaged, _ := sc.scan(sg.next, true, func(off int64, r rec) { p.applyLocked(sg, r) })
	if sc.err != nil {
		return fmt.Errorf("read segment %s: %w", sg.f.Name(), sc.err)
	}
	if damaged > 0 {
		p.s.log.Error("file: packed folder: damaged bytes in a segment skipped; the objects they held are lost, the ones after them kept",
			"segment", sg.f.Name(), "bytes", damaged)
	}
	if end > sg.next {
		sg.next, sg.stopped = end, stopZero
	}
	sg.resynced = sg.next
	return nil
}

// applyLocked makes r, a record of sg, the current version of its key.
func (p *packed) applyLocked(sg *segment, r rec) {
	var old *record
	var had bool
	if r.kind == kindDelete {
		old, had = p.idx.Delete(&record{key: r.key})
	} else {
		nr := &record{key: r.key, seg: sg, dataOff: r.dataOff, size: r.dataLen, total: r.size, etag: r.etagString(), mod: r.modTime}
		old, had = p.idx.Set(nr)
		sg.live++
		sg.liveBytes += r.size
	}
	if had {
		old.seg.live--
		old.seg.liveBytes -= old.total
	}
}

// refreshLocked catches up with appends of other handles: new records in
// the last segment, new segments. Cost when nothing changed: one pread of
// a record header, one fstatat and one fstat. exclusive is set when the caller holds
// the flock, so no append can be in progress.
func (p *packed) refreshLocked(exclusive bool) error {
	if !p.built || len(p.segs) == 0 { // none yet: segments may have appeared; the folder is tiny
		if err := p.rebuildLocked(); err != nil {
			return err
		}
		if len(p.segs) == 0 {
			return nil
		}
	}
	for {
		last := p.segs[len(p.segs)-1]
		// Only its maker appends to a segment, so ours has nothing new.
		if last != p.own {
			if err := p.scanLocked(last); err != nil {
				return err
			}
		}
		nsg, err := p.nextSegment(last.num + 1)
		if errors.Is(err, fs.ErrNotExist) {
			if retired, err := isRetired(last); err != nil || retired {
				if err != nil {
					return err
				}
				// Another handle made segments after it and retired them
				// all while this one looked away (its own included):
				// only the folder says which are left.
				if err := p.rebuildLocked(); err != nil {
					return err
				}
				if len(p.segs) == 0 {
					return nil
				}
				continue
			}
			if last.stopped != stopJunk {
				break
			}
			if exclusive {
				// Bytes that are no record, and no append in progress: a
				// write torn by a crash, or damage. Read on past them as a
				// writer sealing this segment will, so every handle sees
				// the records that follow damage, and none a torn tail.
				if err := p.resyncLocked(last); err != nil {
					return err
				}
				break
			}
			// A write in progress, or one torn by a crash: wait for any
			// append to end and look again.
			if err := p.flock(unix.LOCK_SH); errors.Is(err, errNoLockFile) {
				break // a reader of a folder whose lock file is gone: no read past them unlocked
			} else if err != nil {
				return err
			}
			err := p.refreshLocked(true)
			if uerr := p.flock(unix.LOCK_UN); err == nil {
				err = uerr
			}
			return err
		}
		if err != nil {
			return err
		}
		if p.own == last {
			p.own = nil // another handle took over: ours is finished
		}
		if err := p.addSegmentLocked(nsg); err != nil {
			return err
		}
	}
	// A segment without current objects is not read again: close it, so
	// its disk space goes as soon as an appender deletes it.
	for _, sg := range p.segs[:len(p.segs)-1] {
		if sg.live == 0 && sg.done && !sg.fdClosed {
			sg.f.Close()
			sg.fdClosed = true
		}
	}
	return nil
}

// lookup returns the current version of key, refreshing first.
func (p *packed) lookup(key string) (record, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refreshLocked(false); err != nil {
		return record{}, false, fmt.Errorf("file: packed folder %q: %w", p.prefix, err)
	}
	r, ok := p.idx.Get(&record{key: key})
	if !ok {
		return record{}, false, nil
	}
	return *r, true, nil
}

// get returns the object at key. ok is false when the log does not hold
// it (a legacy file may).
func (p *packed) get(key string, withData bool) ([]byte, objstore.ObjectInfo, bool, error) {
	for attempt := 0; ; attempt++ {
		r, ok, err := p.lookup(key)
		if err != nil || !ok {
			return nil, objstore.ObjectInfo{}, false, err
		}
		if !withData {
			return nil, r.info(), true, nil
		}
		data := make([]byte, r.size)
		_, err = r.seg.f.ReadAt(data, r.dataOff)
		if errors.Is(err, os.ErrClosed) && attempt < 3 {
			continue // the segment was retired meanwhile: the object moved or went
		}
		if err != nil {
			return nil, objstore.ObjectInfo{}, false, fmt.Errorf("file: get %q: read segment: %w", key, err)
		}
		return data, r.info(), true, nil
	}
}

// list returns the infos of up to limit objects of the log with keys
// after startAfter and starting with prefix, in key order.
func (p *packed) list(prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refreshLocked(false); err != nil {
		return nil, fmt.Errorf("file: packed folder %q: %w", p.prefix, err)
	}
	var out []objstore.ObjectInfo
	p.idx.Ascend(&record{key: max(startAfter, prefix)}, func(r *record) bool {
		if !strings.HasPrefix(r.key, prefix) || len(out) == limit {
			return false
		}
		if r.key > startAfter {
			out = append(out, r.info())
		}
		return true
	})
	return out, nil
}

// --- writing ---

// put writes an object of the folder (see Store.Put).
func (p *packed) put(ctx context.Context, key string, data []byte, etag string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if int64(len(data)) > maxRecordData {
		return objstore.ObjectInfo{}, fmt.Errorf("file: put %q: %d bytes is more than an object of a packed folder may hold (%d)", key, len(data), int64(maxRecordData))
	}
	op := &logOp{ctx: ctx, key: key, data: data, etag: etag, opts: opts, done: make(chan struct{})}
	if err := p.submit(op); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return op.info, op.err
}

// delete removes an object of the folder (see Store.Delete).
func (p *packed) delete(ctx context.Context, key string) error {
	op := &logOp{ctx: ctx, key: key, del: true, done: make(chan struct{})}
	if err := p.submit(op); err != nil {
		return err
	}
	return op.err
}

var errClosed = errors.New("file: store closed")

// submit queues op and waits until an append decided it. Writes that
// arrive while one append is in progress share the next one (group
// commit): one fdatasync for all of them. A write that finds no append in
// progress makes it itself, on its own goroutine, so a lone writer pays
// no hand-off; a backlog left once its own write is done goes on in the
// background.
func (p *packed) submit(op *logOp) error {
	p.qmu.Lock()
	if p.qclosed {
		p.qmu.Unlock()
		return errClosed
	}
	p.queue = append(p.queue, op)
	if p.busy {
		p.qmu.Unlock()
		select {
		case <-op.done:
			return nil
		case <-op.ctx.Done():
			// The append may still happen: the outcome is unknown, as the
			// objstore.Store contract allows.
			return fmt.Errorf("file: write %q: %w", op.key, op.ctx.Err())
		}
	}
	p.busy = true
	p.drainWG.Add(1)
	p.qmu.Unlock()
	p.drain(op)
	return nil
}

// drain makes appends until the queue is empty, or, when mine is set,
// until mine is decided; then a goroutine takes over any backlog.
func (p *packed) drain(mine *logOp) {
	for {
		p.qmu.Lock()
		if len(p.queue) == 0 {
			p.busy = false
			p.qmu.Unlock()
			p.drainWG.Done()
			return
		}
		if mine != nil && mine.decided {
			p.qmu.Unlock()
			go p.drain(nil)
			return
		}
		n, size := 0, 0
		for n < len(p.queue) && n < maxBatch && (n == 0 || size+len(p.queue[n].data) <= maxBatchLen) {
			size += len(p.queue[n].data)
			n++
		}
		batch := append([]*logOp(nil), p.queue[:n]...)
		p.queue = append(p.queue[:0], p.queue[n:]...)
		p.qmu.Unlock()
		p.commit(batch)
		for _, op := range batch {
			op.decided = true
			close(op.done)
		}
	}
}

// commit appends the records of batch under the flock and makes them
// durable with one fdatasync.
func (p *packed) commit(batch []*logOp) {
	fail := func(err error) {
		for _, op := range batch {
			if !op.decided {
				op.err = err
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.poison != nil {
		fail(fmt.Errorf("file: packed folder %q: an earlier write failed (%v); reopen the store to write again", p.prefix, p.poison))
		return
	}
	if err := p.flock(unix.LOCK_EX); err != nil {
		fail(fmt.Errorf("file: packed folder %q: lock: %w", p.prefix, err))
		return
	}
	defer p.flock(unix.LOCK_UN)
	if err := p.refreshLocked(true); err != nil {
		fail(fmt.Errorf("file: packed folder %q: %w", p.prefix, err))
		return
	}
	if err := p.appendLocked(batch); err != nil {
		fail(err)
		return
	}
	if err := p.reclaimLocked(); err != nil {
		p.s.log.Warn("file: packed folder: retiring an old segment failed; retried after the next write", "folder", p.dir, "err", err)
	}
}

// planned is a record an append will write.
type planned struct {
	op   *logOp
	kind byte
	data []byte
	etag [16]byte
	mod  time.Time
}

// appendLocked decides each op of batch against the current state (the
// index, then files written before the folder was packed, then earlier
// ops of the batch), writes the records of those that hold and fsyncs.
func (p *packed) appendLocked(batch []*logOp) error {
	type state struct {
		exists bool
		etag   string
	}
	seen := map[string]state{}
	var plans []planned
	var plainGone []string // legacy files superseded by this append
	var size int64
	now := time.Now()
	for _, op := range batch {
		if op.move != nil {
			r := op.move
			data := make([]byte, r.size)
			if _, err := r.seg.f.ReadAt(data, r.dataOff); err != nil {
				op.err, op.decided = fmt.Errorf("file: packed folder %q: read %q to move it: %w", p.prefix, r.key, err), true
				continue
			}
			pl := planned{op: op, kind: kindPut, data: data, mod: r.mod}
			copy(pl.etag[:], etagBytes(r.etag))
			plans = append(plans, pl)
			size += recordSize(len(op.key), len(data))
			continue
		}
		if err := op.ctx.Err(); err != nil {
			op.err, op.decided = fmt.Errorf("file: write %q: %w", op.key, err), true
			continue
		}
		cur, ok := seen[op.key]
		supersedes := false
		if !ok {
			r, inLog := p.idx.Get(&record{key: op.key})
			if inLog {
				cur = state{exists: true, etag: r.etag}
			}
			if p.plain {
				// A file written before the folder was packed. While a file
				// and a record share a key, the record is the object. A
				// Delete removes the file first, a Put after its record is
				// durable: a crash in between never shows an older version.
				etag, inFile, err := p.plainETag(op.key)
				if err != nil {
					op.err, op.decided = err, true
					continue
				}
				if inFile && !inLog {
					cur = state{exists: true, etag: etag}
				}
				switch {
				case inFile && op.del:
					if err := p.removePlain(op.key); err != nil {
						op.err, op.decided = err, true
						continue
					}
					if !inLog {
						op.decided = true
						seen[op.key] = state{}
						continue
					}
				case inFile:
					supersedes = true
				}
			}
		}
		switch {
		case op.del && !cur.exists:
			op.decided = true
			seen[op.key] = state{}
			continue // nothing to delete
		case op.opts.IfNoneMatch && cur.exists:
			op.err, op.decided = fmt.Errorf("file: put %q: object exists: %w", op.key, objstore.ErrPrecondition), true
			continue
		case op.opts.IfMatch != "" && !cur.exists:
			op.err, op.decided = fmt.Errorf("file: put %q: if-match on a missing object: %w", op.key, objstore.ErrPrecondition), true
			continue
		case op.opts.IfMatch != "" && cur.etag != op.opts.IfMatch:
			op.err, op.decided = fmt.Errorf("file: put %q: etag is %s, not %s: %w", op.key, cur.etag, op.opts.IfMatch, objstore.ErrPrecondition), true
			continue
		}
		if supersedes {
			plainGone = append(plainGone, op.key)
		}
		pl := planned{op: op, kind: kindPut, data: op.data, mod: now}
		if op.del {
			pl.kind, pl.data = kindDelete, nil
			seen[op.key] = state{}
		} else {
			copy(pl.etag[:], etagBytes(op.etag))
			seen[op.key] = state{exists: true, etag: op.etag}
		}
		plans = append(plans, pl)
		size += recordSize(len(op.key), len(pl.data))
	}
	if len(plans) == 0 {
		return nil
	}
	sg := p.own
	if sg == nil || sg != p.segs[len(p.segs)-1] || sg.next+size > sg.size {
		var err error
		if sg, err = p.rotateLocked(size); err != nil {
			return fmt.Errorf("file: packed folder %q: new segment: %w", p.prefix, err)
		}
	}
	off := sg.next
	buf := make([]byte, 0, size)
	for _, pl := range plans {
		buf = appendRecord(buf, sg.salt, off+int64(len(buf)), pl.kind, pl.op.key, pl.data, pl.etag, pl.mod)
	}
	if err := pwriteAll(sg.f, buf, off); err != nil {
		p.poison, p.own = err, nil
		return fmt.Errorf("file: packed folder %q: write segment: %w", p.prefix, err)
	}
	if err := withFd(sg.f, unix.Fdatasync); err != nil {
		p.poison, p.own = err, nil
		return fmt.Errorf("file: packed folder %q: fdatasync segment: %w", p.prefix, err)
	}
	// Index exactly what a scan of the bytes will find (the data is what
	// the ETags were computed from).
	at := off
	for _, pl := range plans {
		r, ok := parseRecordHeader(buf[at-off:], sg.salt, at, off+int64(len(buf)))
		if !ok {
			p.poison, p.own = errors.New("records written do not read back"), nil
			return fmt.Errorf("file: packed folder %q: the record of %q written at %d does not read back", p.prefix, pl.op.key, at)
		}
		p.applyLocked(sg, r)
		at += r.size
	}
	sg.next = at
	if sg.next > sg.size/2 {
		// Half full: make the next segment in the background. A handle
		// that writes little (a short command) never makes one.
		p.prepareSpare(p.nextCap)
	}
	for _, pl := range plans {
		if pl.kind == kindPut {
			pl.op.info = objstore.ObjectInfo{Key: pl.op.key, Size: int64(len(pl.data)), ETag: etagString(pl.etag), ModTime: time.Unix(0, pl.mod.UnixNano())}
		}
		pl.op.decided = true
	}
	for _, key := range plainGone {
		if err := p.removePlain(key); err != nil {
			p.s.log.Warn("file: packed folder: removing a superseded file failed; the log's version stays the object", "key", key, "err", err)
		}
	}
	return nil
}

// bytesAt reads a buffer that sits at offset base of a segment.
type bytesAt struct {
	b    []byte
	base int64
}

func (r bytesAt) ReadAt(p []byte, off int64) (int, error) {
	off -= r.base
	if off < 0 || off > int64(len(r.b)) {
		return 0, fs.ErrInvalid
	}
	n := copy(p, r.b[off:])
	if n < len(p) {
		return n, fmt.Errorf("short read: %w", fs.ErrInvalid)
	}
	return n, nil
}

func pwriteAll(f *os.File, b []byte, off int64) error {
	_, err := f.WriteAt(b, off)
	return err
}

func etagBytes(etag string) []byte {
	var b [16]byte
	if len(etag) == 34 {
		_, _ = hex.Decode(b[:], []byte(etag[1:33]))
	}
	return b[:]
}

func etagString(b [16]byte) string { r := rec{etag: b}; return r.etagString() }

// plainETag returns the ETag of the file key, written before the folder
// was packed, if there is one.
func (p *packed) plainETag(key string) (string, bool, error) {
	name := path.Base(key)
	var fd int
	err := withFd(p.dirF, func(dfd int) error {
		var err error
		fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		return err
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("file: %q: %w", key, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(p.dir, name))
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", false, err
	}
	etag, err := readETag(f)
	if err != nil {
		return "", false, fmt.Errorf("file: %q: etag: %w", key, err)
	}
	return etag, true, nil
}

// removePlain deletes the file key written before the folder was packed,
// durably.
func (p *packed) removePlain(key string) error {
	err := withFd(p.dirF, func(dfd int) error { return unix.Unlinkat(dfd, path.Base(key), 0) })
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("file: delete %q: %w", key, err)
	}
	if err := p.dirF.Sync(); err != nil {
		return fmt.Errorf("file: delete %q: sync folder: %w", key, err)
	}
	return nil
}

// rotateLocked makes a new segment of at least need bytes of records,
// after the last one, and appends to it from now on. It first seals the
// last segment where its valid records end, so no record past that point
// is ever read: not the remains of a write torn by a crash, not records of
// a writer that died before its flush. A handle only appends to segments
// it made, so after any crash the next writer starts a new segment.
func (p *packed) rotateLocked(need int64) (*segment, error) {
	var prevEnd int64
	var num uint64 = 1
	if n := len(p.segs); n > 0 {
		last := p.segs[n-1]
		if last.stopped == stopJunk {
			if err := p.resyncLocked(last); err != nil {
				return nil, err
			}
		}
		prevEnd, num = last.next, last.num+1
		// What the new header declares the end of must be durable first,
		// whoever wrote it.
		if err := withFd(last.f, unix.Fdatasync); err != nil {
			return nil, err
		}
	}
	capacity := p.nextCap
	if need+segHeaderLen > capacity {
		capacity = align64k(need + segHeaderLen)
	}
	var h segHeader
	h.prevEnd = prevEnd
	if _, err := rand.Read(h.salt[:]); err != nil {
		return nil, err
	}
	sp, err := p.takeSpare(capacity)
	if err != nil {
		return nil, err
	}
	f, err := p.nameSegment(sp, num, h)
	if errors.Is(err, unix.ENOENT) {
		// The spare was removed under us (a sweep that took this process
		// for a dead one): make another.
		if sp = p.makeSpare(capacity); sp.err != nil {
			return nil, sp.err
		}
		f, err = p.nameSegment(sp, num, h)
	}
	if err != nil {
		return nil, err
	}
	sg := &segment{num: num, f: f, size: sp.size, salt: h.salt, prevEnd: prevEnd, next: segHeaderLen, stopped: stopZero}
	if n := len(p.segs); n > 0 {
		last := p.segs[n-1]
		last.finished, last.limit, last.done = true, prevEnd, true
	}
	p.segs = append(p.segs, sg)
	p.own = sg
	p.nextCap = min(max(capacity, p.nextCap)*2, p.s.segMax)
	return sg, nil
}

func align64k(n int64) int64 { return (n + 64<<10 - 1) &^ (64<<10 - 1) }

var zeros = make([]byte, 1<<20)

// spare is a segment file made ahead of need: zero-filled and fsynced,
// under a temp name in the \log folder.
type spare struct {
	f    *os.File
	name string // its temp name
	size int64
	err  error
}

// prepareSpare makes the next segment file, of size bytes, in the
// background, so a rotation does not wait for megabytes of zeros.
func (p *packed) prepareSpare(size int64) {
	p.spareMu.Lock()
	defer p.spareMu.Unlock()
	if p.spare != nil || p.closed {
		return
	}
	ch := make(chan *spare, 1)
	p.spare = ch
	p.spareWG.Add(1)
	go func() {
		defer p.spareWG.Done()
		ch <- p.makeSpare(size)
	}()
}

// takeSpare returns a zero-filled file of at least size bytes: the one
// prepared in the background (waiting for it if it is still being
// written) when it is large enough, else a new one. Rotations hold p.mu,
// so one takes at a time.
func (p *packed) takeSpare(size int64) (*spare, error) {
	p.spareMu.Lock()
	ch := p.spare
	p.spare = nil
	p.spareMu.Unlock()
	if ch != nil {
		sp := <-ch
		if sp.err == nil && sp.size >= size {
			return sp, nil
		}
		if sp.err == nil { // too small for this batch
			sp.f.Close()
			os.Remove(filepath.Join(p.dir, logDirName, sp.name))
		}
	}
	sp := p.makeSpare(size)
	return sp, sp.err
}

// dropSpare removes a spare not used.
func (p *packed) dropSpare() {
	p.spareMu.Lock()
	ch := p.spare
	p.spare, p.closed = nil, true
	p.spareMu.Unlock()
	if ch != nil {
		if sp := <-ch; sp.err == nil {
			sp.f.Close()
			os.Remove(filepath.Join(p.dir, logDirName, sp.name))
		}
	}
	p.spareWG.Wait()
}

// makeSpare writes a temp file of size zero bytes and fsyncs it. Real
// zeros, not fallocate: fallocate leaves extents marked unwritten, and
// the first write into one changes metadata that fdatasync must then
// journal; written blocks are overwritten in place, so an append's
// fdatasync flushes data only.
func (p *packed) makeSpare(size int64) *spare {
	name := p.s.tmpName()
	path := filepath.Join(p.dir, logDirName, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return &spare{err: err}
	}
	for off := int64(0); off < size && err == nil; off += int64(len(zeros)) {
		_, err = f.WriteAt(zeros[:min(int64(len(zeros)), size-off)], off)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return &spare{err: err}
	}
	return &spare{f: f, name: name, size: size}
}

// nameSegment writes header h into the spare, flushes it (in place: data
// only) and gives the file the name of segment num, only if no segment
// has it, then fsyncs the \log folder.
func (p *packed) nameSegment(sp *spare, num uint64, h segHeader) (*os.File, error) {
	fail := func(err error) (*os.File, error) {
		sp.f.Close()
		os.Remove(filepath.Join(p.dir, logDirName, sp.name))
		return nil, err
	}
	if _, err := sp.f.WriteAt(encodeSegHeader(h), 0); err != nil {
		return fail(err)
	}
	if err := withFd(sp.f, unix.Fdatasync); err != nil {
		return fail(err)
	}
	name := segName(num)
	err := withFd(p.logF, func(dfd int) error {
		err := unix.Renameat2(dfd, sp.name, dfd, name, unix.RENAME_NOREPLACE)
		if err == unix.EINVAL || err == unix.ENOSYS {
			// No RENAME_NOREPLACE here: link(2) fails on an existing name too.
			if err = unix.Linkat(dfd, sp.name, dfd, name, 0); err == nil {
				err = unix.Unlinkat(dfd, sp.name, 0)
			}
		}
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("name segment %s: %w", name, err))
	}
	if err := p.logF.Sync(); err != nil {
		return nil, err
	}
	return sp.f, nil
}

// reclaimLocked deletes the oldest segments that hold no current object.
// Segments go oldest first: a delete record in a later segment is what
// keeps an earlier record from counting, so it may only go after it. An
// oldest segment that holds only a few current objects (fences, say,
// which kv keeps forever), or that holds back too much garbage behind
// it, first has them appended again, unchanged, so it can go: disk use
// stays within eight times what is current plus two segments.
func (p *packed) reclaimLocked() error {
	for len(p.segs) > 1 {
		old := p.segs[0]
		if old == p.own || !old.done {
			return nil
		}
		if old.live > 0 {
			var total, live int64
			for _, sg := range p.segs {
				total, live = total+sg.size, live+sg.liveBytes
			}
			// Mostly current, and not holding back much garbage behind it
			// (segments go oldest first): wait for deletes.
			if old.liveBytes*8 > old.size && total <= 8*live+2*p.s.segMax {
				return nil
			}
			var moves []*logOp
			p.idx.Scan(func(r *record) bool {
				if r.seg == old {
					moves = append(moves, &logOp{ctx: context.Background(), key: r.key, move: r})
				}
				return true
			})
			if err := p.appendLocked(moves); err != nil {
				return err
			}
			for _, m := range moves {
				if m.err != nil {
					return m.err
				}
			}
			if old.live > 0 {
				return fmt.Errorf("segment %s still holds %d objects after moving them", old.f.Name(), old.live)
			}
		}
		err := withFd(p.logF, func(dfd int) error { return unix.Unlinkat(dfd, segName(old.num), 0) })
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		// Durable before any later segment can go: a segment that came
		// back after a crash would need the deletes recorded after it.
		if err := p.logF.Sync(); err != nil {
			return err
		}
		old.f.Close()
		p.segs = p.segs[1:]
	}
	return nil
}
