package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The writer lease tells processes that want to open a store as its writer
// whether a live one already does, so they send commands through the inbox
// (Client) instead of fencing it. It is advisory: the kv's fencing is what
// keeps two writers from both committing. A process that takes over an
// expired lease still fences the old writer when it opens the queue; an
// old writer that comes back sees its renewal fail (WriterLease.Lost) and
// its next commit fail with kv.ErrFenced.
//
// Two mechanisms:
//
//   - A lease object (default key "writer-lease"): JSON WriterInfo written
//     create-only, renewed and released with If-Match on its ETag. Cost: one
//     GET and one conditional PUT to acquire, one conditional PUT per
//     renewal, one to release. At the defaults (TTL 60 s, renewed every
//     20 s) that is 4,320 PUTs a day, about $0.022 a day on S3 at $0.005
//     per 1,000 PUTs; with the inbox's idle polling it is the only request
//     an idle writer makes. A writer killed with SIGKILL is replaced once
//     its lease expired (TTL after its last renewal). Expiry compares the
//     holder's stated expiry with the reader's clock, so a clock skew over
//     TTL-RenewEvery (40 s by default) can make a process take over a live
//     writer, which the kv then fences.
//   - On a store with a local folder (file://), an exclusive flock(2) on
//     <folder>/tqw-writer.lock, the file the CLI's store lock uses too. The
//     OS drops it when the process dies, so takeover after kill -9 is
//     immediate, and it costs no request and no renewal. The holder's
//     WriterInfo is written into the file for LiveWriter to report. A file
//     store shared by several machines over a network file system should
//     use the lease object (WriterLeaseOptions.ObjectLease), as flock is
//     not reliable there.

// Defaults of WriterLeaseOptions.
const (
	// DefaultWriterLeaseKey is the object key of the lease object.
	DefaultWriterLeaseKey = "writer-lease"
	// DefaultWriterLeaseTTL is how long a lease object stays live without
	// a renewal.
	DefaultWriterLeaseTTL = 60 * time.Second
	// WriterLockFile is the flock file in a file store's folder.
	WriterLockFile = "tqw-writer.lock"
)

// maxLeaseInfo bounds the lease object or lock file LiveWriter reads.
const maxLeaseInfo = 64 << 10

// ErrWriterActive reports that a live writer holds the store; the error is
// a *WriterActiveError naming the holder. Send commands through a Client
// instead, or stop that writer first.
var ErrWriterActive = errors.New("runtime: a live writer holds the store")

// ErrLeaseLost reports a lease another process took over; the holder
// should stop writing (its kv is fenced once the new writer opens it).
var ErrLeaseLost = errors.New("runtime: writer lease lost to another process")

// WriterInfo describes a writer lease holder.
type WriterInfo struct {
	// Owner identifies one acquisition (a ULID unless the options set it).
	Owner string `json:"owner"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	// Acquired and Renewed are the holder's clock readings.
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	// Expires is when a lease object stops being live without a renewal;
	// zero for a file lock, which lives exactly as long as its process.
	Expires time.Time `json:"expires,omitzero"`
	// Released is set by a clean Release of a lease object.
	Released bool `json:"released,omitempty"`
	// Mechanism is "object" or "flock".
	Mechanism string `json:"mechanism"`
}

// String describes the holder for error messages and logs.
func (w WriterInfo) String() string {
	s := fmt.Sprintf("writer %s (pid %d on %s, %s)", w.Owner, w.PID, w.Host, w.Mechanism)
	if !w.Expires.IsZero() {
		s += ", lease expires " + w.Expires.UTC().Format(time.RFC3339)
	}
	return s
}

func (w WriterInfo) liveAt(now time.Time) bool {
	return !w.Released && now.Before(w.Expires)
}

// WriterActiveError is the error AcquireWriterLease returns when a live
// writer holds the store. It matches ErrWriterActive with errors.Is.
type WriterActiveError struct {
	Holder WriterInfo
	// Where names the lease object or the lock file.
	Where string
}

func (e *WriterActiveError) Error() string {
	return fmt.Sprintf("runtime: a live writer holds the store (%s, at %s); send commands through a runtime.Client or stop that writer first",
		e.Holder, e.Where)
}

// Is reports whether target is ErrWriterActive.
func (e *WriterActiveError) Is(target error) bool { return target == ErrWriterActive }

// WriterLeaseOptions configure AcquireWriterLease and LiveWriter. The zero
// value is usable.
type WriterLeaseOptions struct {
	// Key is the lease object's key (default DefaultWriterLeaseKey).
	Key string
	// TTL is how long a lease object stays live without a renewal (default
	// DefaultWriterLeaseTTL); RenewEvery is the renewal period (default
	// TTL/3, at most TTL/2).
	TTL, RenewEvery time.Duration
	// LockDir is the folder of the flock file; empty means the store's own
	// folder when it has one (a value with a Root() string method, as
	// file.Store), else none.
	LockDir string
	// ObjectLease uses the lease object even when a lock folder is known.
	ObjectLease bool
	// Owner, Host and PID describe this process in WriterInfo (defaults: a
	// fresh ULID, os.Hostname(), os.Getpid()).
	Owner string
	Host  string
	PID   int
	// Clock times expiry and renewals (default the system clock).
	Clock queue.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (o WriterLeaseOptions) withDefaults(store objstore.Store) (WriterLeaseOptions, error) {
	if o.Key == "" {
		o.Key = DefaultWriterLeaseKey
	}
	if err := objstore.ValidateKey(o.Key); err != nil {
		return o, fmt.Errorf("runtime: writer lease key: %w", err)
	}
	if o.TTL == 0 {
		o.TTL = DefaultWriterLeaseTTL
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = o.TTL / 3
	}
	if o.TTL <= 0 || o.RenewEvery <= 0 || o.RenewEvery > o.TTL/2 {
		return o, fmt.Errorf("runtime: writer lease TTL %v, renewal every %v: want positive durations with RenewEvery at most TTL/2", o.TTL, o.RenewEvery)
	}
	if o.LockDir == "" && !o.ObjectLease {
		if r, ok := store.(interface{ Root() string }); ok {
			o.LockDir = r.Root()
		}
	}
	if o.ObjectLease {
		o.LockDir = ""
	}
	if o.Owner == "" {
		o.Owner = ulid.Make().String()
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.Clock == nil {
		o.Clock = queue.SystemClock()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// WriterLease is a held writer lease. Release it when the writer stops.
type WriterLease struct {
	store objstore.Store
	opts  WriterLeaseOptions
	log   *slog.Logger
	lock  *os.File // flock mechanism

	mu       sync.Mutex
	info     WriterInfo
	etag     string
	lost     chan struct{}
	lostErr  error
	released bool

	stop chan struct{}
	done chan struct{}
}

// AcquireWriterLease takes the store's writer lease, or returns a
// *WriterActiveError (errors.Is(err, ErrWriterActive)) naming the live
// holder. Only a released, expired or dead holder is replaced. With the
// lease object it starts a goroutine that renews it every RenewEvery until
// Release; watch Lost for a takeover.
func AcquireWriterLease(ctx context.Context, store objstore.Store, opts WriterLeaseOptions) (*WriterLease, error) {
	opts, err := opts.withDefaults(store)
	if err != nil {
		return nil, err
	}
	l := &WriterLease{store: store, opts: opts, log: opts.Logger.With("component", "writer-lease"),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if opts.LockDir != "" {
		if err := l.acquireFlock(ctx); err != nil {
			return nil, err
		}
		close(l.done)
		return l, nil
	}
	if err := l.acquireObject(ctx); err != nil {
		return nil, err
	}
	go l.renewLoop()
	return l, nil
}

// Info returns what the lease says about this holder.
func (l *WriterLease) Info() WriterInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// Lost is closed when another process took the lease over; Err says why.
func (l *WriterLease) Lost() <-chan struct{} { return l.lost }

// Err returns the reason Lost was closed (wrapping ErrLeaseLost), or nil.
func (l *WriterLease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

func (l *WriterLease) markLost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		l.lostErr = err
		close(l.lost)
	}
}

// flockBusyWait is how long acquireFlock retries a busy lock file before it
// reports a live writer: longer than any momentary LiveWriter probe.
const flockBusyWait = 2 * time.Second

func (l *WriterLease) acquireFlock(ctx context.Context) error {
	path := filepath.Join(l.opts.LockDir, WriterLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("runtime: open the writer lock %s: %w", path, err)
	}
	// LiveWriter probes hold a shared lock for a moment, longer on a loaded
	// machine; retry for a while before concluding a writer holds it.
	giveUp := l.opts.Clock.Now().Add(flockBusyWait)
	for {
		var busy bool
		busy, err = tryFlock(f, true)
		if err == nil && !busy {
			break
		}
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("runtime: take the writer lock %s: %w", path, err)
		}
		if !l.opts.Clock.Now().Before(giveUp) {
			holder, _ := readInfo(f)
			_ = f.Close()
			holder.Mechanism = "flock"
			return &WriterActiveError{Holder: holder, Where: path}
		}
		if !sleepClock(ctx, l.opts.Clock, 20*time.Millisecond) {
			_ = f.Close()
			return fmt.Errorf("runtime: take the writer lock %s: %w", path, ctx.Err())
		}
	}
	// A holder of the lease object (ObjectLease elsewhere) counts too.
	if holder, live, err := l.objectHolder(ctx); err != nil || live {
		_ = f.Close()
		if err != nil {
			return err
		}
		return &WriterActiveError{Holder: holder, Where: l.opts.Key}
	}
	now := l.opts.Clock.Now()
	l.info = WriterInfo{Owner: l.opts.Owner, Host: l.opts.Host, PID: l.opts.PID, Acquired: now, Renewed: now, Mechanism: "flock"}
	b, err := json.Marshal(l.info)
	if err == nil {
		if err = f.Truncate(0); err == nil {
			_, err = f.WriteAt(b, 0)
		}
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("runtime: write the writer lock %s: %w", path, err)
	}
	l.lock = f
	return nil
}

// objectHolder reads the lease object: its holder and whether it is live.
func (l *WriterLease) objectHolder(ctx context.Context) (WriterInfo, bool, error) {
	info, _, found, err := readLeaseObject(ctx, l.store, l.opts.Key)
	if err != nil || !found {
		return WriterInfo{}, false, err
	}
	return info, info.Owner != l.opts.Owner && info.liveAt(l.opts.Clock.Now()), nil
}

func (l *WriterLease) acquireObject(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		cur, etag, found, err := readLeaseObject(ctx, l.store, l.opts.Key)
		if err != nil {
			return err
		}
		now := l.opts.Clock.Now()
		if found && cur.Owner != l.opts.Owner && cur.liveAt(now) {
			return &WriterActiveError{Holder: cur, Where: l.opts.Key}
		}
		l.info = WriterInfo{Owner: l.opts.Owner, Host: l.opts.Host, PID: l.opts.PID, Acquired: now, Renewed: now,
			Expires: now.Add(l.opts.TTL), Mechanism: "object"}
		put := objstore.CreateOnly()
		if found {
			put = objstore.IfMatch(etag)
		}
		err = l.putInfo(ctx, l.info, put)
		if err == nil {
			return nil
		}
		if !errors.Is(err, objstore.ErrPrecondition) || attempt == 2 {
			return fmt.Errorf("runtime: acquire the writer lease %s: %w", l.opts.Key, err)
		}
		// Another process wrote the lease meanwhile: look again.
	}
}

// putInfo writes info with opts and records the new ETag. A write whose
// response was lost is recognised by reading the object back.
func (l *WriterLease) putInfo(ctx context.Context, info WriterInfo, opts objstore.PutOptions) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	oi, err := l.store.Put(ctx, l.opts.Key, b, opts)
	if err == nil {
		l.mu.Lock()
		l.etag = oi.ETag
		l.mu.Unlock()
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	back, etag, found, rerr := readLeaseObject(ctx, l.store, l.opts.Key)
	if rerr == nil && found && back.Owner == info.Owner && back.Renewed.Equal(info.Renewed) && back.Released == info.Released {
		l.mu.Lock()
		l.etag = etag
		l.mu.Unlock()
		return nil
	}
	return err
}

// Renew extends the lease object by TTL from now. The background loop
// calls it every RenewEvery; it returns an error wrapping ErrLeaseLost
// (and closes Lost) when another process took the lease over. A file
// lock needs no renewal: Renew returns nil.
func (l *WriterLease) Renew(ctx context.Context) error {
	if l.lock != nil {
		return nil
	}
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("runtime: renew the writer lease: %w (released)", ErrLeaseLost)
	}
	if l.lostErr != nil {
		err := l.lostErr
		l.mu.Unlock()
		return err
	}
	info, etag := l.info, l.etag
	l.mu.Unlock()
	now := l.opts.Clock.Now()
	info.Renewed, info.Expires = now, now.Add(l.opts.TTL)
	err := l.putInfo(ctx, info, objstore.IfMatch(etag))
	if err == nil {
		l.mu.Lock()
		l.info = info
		l.mu.Unlock()
		return nil
	}
	if errors.Is(err, objstore.ErrPrecondition) {
		holder, _, _, _ := readLeaseObject(ctx, l.store, l.opts.Key)
		lost := fmt.Errorf("%w: the lease %s now names %s", ErrLeaseLost, l.opts.Key, holder)
		l.markLost(lost)
		return lost
	}
	return fmt.Errorf("runtime: renew the writer lease %s: %w", l.opts.Key, err)
}

func (l *WriterLease) renewLoop() {
	defer close(l.done)
	t := l.opts.Clock.NewTimer(l.opts.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.RenewEvery)
		err := l.Renew(ctx)
		cancel()
		if errors.Is(err, ErrLeaseLost) {
			l.log.Error("writer lease lost; this process must stop writing", "err", err)
			return
		}
		if err != nil {
			l.log.Warn("writer lease renewal failed; retrying", "err", err)
		}
		t.Reset(l.opts.RenewEvery)
	}
}

// Release gives the lease up: a lease object is marked released (If-Match,
// so a lease already taken over is left alone), a file lock is unlocked.
// It stops the renewals and is idempotent.
func (l *WriterLease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	if l.lock != nil {
		// Closing the only descriptor drops the flock.
		if err := l.lock.Close(); err != nil {
			return fmt.Errorf("runtime: release the writer lock: %w", err)
		}
		return nil
	}
	if l.Err() != nil {
		return nil // someone else holds it now
	}
	l.mu.Lock()
	info, etag := l.info, l.etag
	l.mu.Unlock()
	info.Released, info.Expires = true, l.opts.Clock.Now()
	err := l.putInfo(ctx, info, objstore.IfMatch(etag))
	if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
		return fmt.Errorf("runtime: release the writer lease %s: %w", l.opts.Key, err)
	}
	return nil
}

// LiveWriter reports the live writer of store, if any: the holder of the
// file lock (stores with a lock folder) or of an unexpired, unreleased
// lease object. It writes nothing. Cost: one GET of the lease object,
// plus, with a lock folder, an open and a momentary shared flock.
func LiveWriter(ctx context.Context, store objstore.Store, opts WriterLeaseOptions) (WriterInfo, bool, error) {
	opts, err := opts.withDefaults(store)
	if err != nil {
		return WriterInfo{}, false, err
	}
	if opts.LockDir != "" {
		info, held, err := probeFlock(filepath.Join(opts.LockDir, WriterLockFile))
		if err != nil || held {
			return info, held, err
		}
	}
	info, _, found, err := readLeaseObject(ctx, store, opts.Key)
	if err != nil || !found {
		return WriterInfo{}, false, err
	}
	return info, info.liveAt(opts.Clock.Now()), nil
}

// probeFlock reports whether another process holds the lock file, and the
// holder it describes.
func probeFlock(path string) (WriterInfo, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return WriterInfo{}, false, nil
	}
	if err != nil {
		return WriterInfo{}, false, fmt.Errorf("runtime: open the writer lock %s: %w", path, err)
	}
	defer f.Close()
	busy, err := tryFlock(f, false)
	if err != nil {
		return WriterInfo{}, false, fmt.Errorf("runtime: probe the writer lock %s: %w", path, err)
	}
	if !busy {
		unflock(f)
		return WriterInfo{}, false, nil
	}
	info, _ := readInfo(f)
	info.Mechanism = "flock"
	return info, true, nil
}

// readInfo decodes the WriterInfo a lock file holds (zero when it holds
// none, e.g. written by an older CLI).
func readInfo(f *os.File) (WriterInfo, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxLeaseInfo))
	if err != nil || len(b) == 0 {
		return WriterInfo{}, err
	}
	return decodeWriterInfo(b)
}

func readLeaseObject(ctx context.Context, store objstore.Store, key string) (WriterInfo, string, bool, error) {
	b, oi, err := store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return WriterInfo{}, "", false, nil
	}
	if err != nil {
		return WriterInfo{}, "", false, fmt.Errorf("runtime: read the writer lease %s: %w", key, err)
	}
	info, err := decodeWriterInfo(b)
	if err != nil {
		// An unreadable lease protects nobody: treat it as expired, so
		// the next writer overwrites it (If-Match on its ETag).
		return WriterInfo{Owner: "(unreadable lease)", Mechanism: "object"}, oi.ETag, true, nil
	}
	return info, oi.ETag, true, nil
}

// decodeWriterInfo decodes a lease object or lock file.
func decodeWriterInfo(b []byte) (WriterInfo, error) {
	if len(b) > maxLeaseInfo {
		return WriterInfo{}, fmt.Errorf("%w: writer lease of %d bytes", ErrCorruptRecord, len(b))
	}
	var w WriterInfo
	if err := json.Unmarshal(b, &w); err != nil {
		return WriterInfo{}, fmt.Errorf("%w: writer lease: %w", ErrCorruptRecord, err)
	}
	if w.Owner == "" {
		return WriterInfo{}, fmt.Errorf("%w: writer lease without an owner", ErrCorruptRecord)
	}
	return w, nil
}

// sleepClock waits d on clock; false when ctx ended first.
func sleepClock(ctx context.Context, clock queue.Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
