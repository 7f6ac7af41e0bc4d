package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tqw-dsl/tqw/internal/service"
	"github.com/tqw-dsl/tqw/runtime/clock"

	"github.com/oklog/ulid/v2"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Defaults and bounds of Options.
const (
	// DefaultKey is the object key of the lease object.
	DefaultKey = "writer-lease"
	// DefaultTTL is how long a lease stays valid without a renewal; see the
	// package documentation for why 15 s and what it costs.
	DefaultTTL = 15 * time.Second
	// MaxTTL bounds Options.TTL, and the TTL a taker honours from a lease
	// record.
	MaxTTL = time.Hour
	// DefaultClockSkew is how far a holder's clock may lag this process's
	// before a lease whose stated expiry is older than that is taken over
	// without watching it for a TTL.
	DefaultClockSkew = time.Minute
	// DefaultLockFile is the flock file in a file store's folder.
	DefaultLockFile = "tqw-writer.lock"
)

// maxInfo bounds the lease object or lock file that is read.
const maxInfo = 64 << 10

// ErrActive reports that a holder that is not known dead holds the lease;
// the error is an *ActiveError naming it.
var ErrActive = errors.New("lease: held by a live holder")

// ErrLost reports a lease this process no longer holds: another process
// took it over (a *LostError names it), or this process released it. The
// former holder must stop writing.
var ErrLost = errors.New("lease: lost")

// errCorrupt reports a lease record that does not decode.
var errCorrupt = errors.New("lease: corrupt lease record")

// Mechanisms of Info.Mechanism.
const (
	MechanismObject = "object"
	MechanismFlock  = "flock"
)

// Info describes a lease holder: the lease object's content, or what a
// lock file says about the process holding it.
type Info struct {
	// Owner identifies one acquisition (a ULID unless Options.Owner sets it).
	Owner string `json:"owner"`
	// Host, BootID, PIDNamespace, PID and PIDStart identify the holder's
	// process for the takeover rules (see Process).
	Host         string `json:"host,omitempty"`
	BootID       string `json:"boot_id,omitempty"`
	PIDNamespace string `json:"pid_ns,omitempty"`
	PID          int    `json:"pid,omitempty"`
	PIDStart     uint64 `json:"pid_start,omitempty"`
	// Endpoint is where the holder serves (Options.Endpoint), if anywhere.
	Endpoint string `json:"endpoint,omitempty"`
	// Acquired and Renewed are the holder's clock readings when it took
	// the lease and when it started its last renewal; Renewals counts them.
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	Renewals uint64    `json:"renewals,omitempty"`
	// TTL is how long the holder considers the lease valid after starting
	// a renewal.
	TTL time.Duration `json:"ttl,omitempty"`
	// Expires is Renewed + TTL, by the holder's clock; zero for a file
	// lock, which lives exactly as long as its process.
	Expires time.Time `json:"expires,omitzero"`
	// Released is set by a clean Release of a lease object.
	Released bool `json:"released,omitempty"`
	// Mechanism is MechanismObject or MechanismFlock.
	Mechanism string `json:"mechanism"`
}

// String describes the holder for messages and logs: owner, pid, host,
// mechanism and since when it holds the lease.
func (i Info) String() string {
	s := fmt.Sprintf("writer %s (pid %d on %s, %s", i.Owner, i.PID, i.Host, i.Mechanism)
	if !i.Acquired.IsZero() {
		s += ", since " + i.Acquired.UTC().Format(time.RFC3339)
	}
	if i.Endpoint != "" {
		s += ", serving " + i.Endpoint
	}
	return s + ")"
}

// holderTTL is the TTL a taker waits for: the one the record states (older
// records state only Expires), bounded by MaxTTL; def when it states none.
func (i Info) holderTTL(def time.Duration) time.Duration {
	ttl := i.TTL
	if ttl <= 0 {
		ttl = i.Expires.Sub(i.Renewed)
	}
	if ttl <= 0 {
		return def
	}
	return min(ttl, MaxTTL)
}

// ActiveError is the error Acquire returns when a holder that is not known
// dead holds the lease: its stated expiry has not passed, or it renewed
// while this process watched it. It matches ErrActive with errors.Is.
type ActiveError struct {
	Holder Info
	// Where names the lease object or the lock file.
	Where string
	// Renewed is set when this process saw the holder renew.
	Renewed bool
}

func (e *ActiveError) Error() string {
	return fmt.Sprintf("lease: %s holds %s", e.Holder, e.Where)
}

// Is reports whether target is ErrActive.
func (e *ActiveError) Is(target error) bool { return target == ErrActive }

// LostError reports that another process holds a lease this process held.
// It matches ErrLost with errors.Is.
type LostError struct {
	// Where names the lease object.
	Where string
	// Holder is the holder the lease object names now; zero when it was
	// deleted or could not be read.
	Holder Info
}

func (e *LostError) Error() string {
	if e.Holder.Owner == "" {
		return fmt.Sprintf("lease: lost %s: the lease object was removed or replaced", e.Where)
	}
	return fmt.Sprintf("lease: lost %s to %s", e.Where, e.Holder)
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// State is a held lease's state.
type State int

const (
	// Valid: this process knows no other may hold the lease for a while
	// (ValidFor), so it may start work.
	Valid State = iota + 1
	// Suspended: renewals failed for longer than the TTL, so another
	// process may be taking over; start nothing. A renewal that finds the
	// lease object unchanged makes it Valid again.
	Suspended
	// Lost: another process took the lease over; final.
	Lost
	// Released: this process gave the lease up; final.
	Released
)

func (s State) String() string {
	switch s {
	case Valid:
		return "valid"
	case Suspended:
		return "suspended"
	case Lost:
		return "lost"
	case Released:
		return "released"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Waiting is what Acquire reports (Options.OnWait) while it watches a
// holder that stopped renewing before it takes the lease over.
type Waiting struct {
	Holder Info
	// Where names the lease object.
	Where string
	// TTL is how long the lease must stay unchanged before the takeover:
	// the holder's TTL.
	TTL time.Duration
	// Observed is how long this process has seen the lease unchanged, by
	// its own clock; Remaining = TTL - Observed.
	Observed, Remaining time.Duration
}

// Options configure Acquire and Live. The zero value is usable.
type Options struct {
	// Key is the lease object's key (default DefaultKey): several leases
	// can share one store under different keys.
	Key string
	// LockDir is the folder of the flock file; empty means the store's own
	// folder when it has one (a value with a Root() string method, as
	// file.Store), else none. LockFile names the file (default
	// DefaultLockFile).
	LockDir, LockFile string
	// ObjectLease uses the lease object even when a lock folder is known
	// (a folder shared over a network file system, where flock is not
	// reliable).
	ObjectLease bool
	// TTL is how long the lease stays valid after a renewal starts
	// (default DefaultTTL, at most MaxTTL); RenewEvery is the renewal
	// period (default TTL/3, at most TTL/2).
	TTL, RenewEvery time.Duration
	// ClockSkew bounds how far a holder's clock may lag this one's: a
	// lease whose stated expiry is older than that is taken over without
	// watching it for a TTL (default DefaultClockSkew; negative: always
	// watch).
	ClockSkew time.Duration
	// PollEvery is how often Acquire reads the lease object while it
	// watches a holder that stopped renewing (default TTL/15, between
	// 50 ms and 1 s).
	PollEvery time.Duration
	// NoWait makes Acquire return an *ActiveError for a holder that
	// stopped renewing instead of watching it for its TTL.
	NoWait bool
	// OnWait, when set, is called at every read while Acquire watches a
	// holder that stopped renewing.
	OnWait func(Waiting)
	// OnState, when set, is called by the renewal goroutine when the
	// lease's state changes, with the renewal error that caused it.
	OnState func(State, error)
	// Owner, Host and PID describe this process in Info (defaults: a fresh
	// ULID, and what System reports; a PID other than System's is recorded
	// without a start time).
	Owner string
	Host  string
	PID   int
	// Endpoint is stored in Info.Endpoint, for holders that serve
	// something other processes should reach.
	Endpoint string
	// System answers the takeover rules' questions (default OS()).
	System System
	// Clock times expiry, renewals and watching (default the system
	// clock, whose readings carry a monotonic clock).
	Clock clock.Clock
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults(store objstore.Store) (Options, error) {
	if o.Key == "" {
		o.Key = DefaultKey
	}
	if err := objstore.ValidateKey(o.Key); err != nil {
		return o, fmt.Errorf("lease: key: %w", err)
	}
	if o.LockFile == "" {
		o.LockFile = DefaultLockFile
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = o.TTL / 3
	}
	if o.TTL <= 0 || o.TTL > MaxTTL || o.RenewEvery <= 0 || o.RenewEvery > o.TTL/2 {
		return o, fmt.Errorf("lease: TTL %v, renewal every %v: want a TTL up to %v and RenewEvery between 0 and TTL/2", o.TTL, o.RenewEvery, MaxTTL)
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = DefaultClockSkew
	}
	if o.PollEvery <= 0 {
		o.PollEvery = min(max(o.TTL/15, 50*time.Millisecond), time.Second)
	}
	if o.LockDir == "" && !o.ObjectLease {
		if r, ok := rootOf(store); ok {
			o.LockDir = r.Root()
		}
	}
	if o.ObjectLease {
		o.LockDir = ""
	}
	if o.Owner == "" {
		o.Owner = ulid.Make().String()
	}
	if o.System == nil {
		o.System = OS()
	}
	if o.Clock == nil {
		o.Clock = clock.System()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// self is this process as the options describe it.
func (o Options) self() Process {
	p := o.System.Self()
	if o.Host != "" {
		p.Host = o.Host
	}
	if o.PID != 0 && o.PID != p.PID {
		// Another process's pid: its start time is not this one's.
		p.PID, p.Start = o.PID, 0
	}
	return p
}

// newInfo is this process's lease record, acquired and renewed at now.
func (o Options) newInfo(now time.Time, mechanism string) Info {
	p := o.self()
	info := Info{Owner: o.Owner, Host: p.Host, BootID: p.BootID, PIDNamespace: p.PIDNamespace, PID: p.PID, PIDStart: p.Start,
		Endpoint: o.Endpoint, Acquired: now.Round(0), Renewed: now.Round(0), Mechanism: mechanism}
	if mechanism == MechanismObject {
		info.TTL, info.Expires = o.TTL, info.Renewed.Add(o.TTL)
	}
	return info
}

// driftAllowance is taken off a holder's validity for the rate difference
// between its clock and a taker's: 1 % of the TTL, far above the 0.01 %
// that real clocks drift.
func driftAllowance(ttl time.Duration) time.Duration { return ttl / 100 }

// Lease is a held lease. Release it when the work stops.
type Lease struct {
	store objstore.Store
	opts  Options
	log   *slog.Logger
	lock  *os.File // flock mechanism

	renewMu sync.Mutex // one renewal request at a time

	mu sync.Mutex
	// info and etag are the lease object as last written; renewStart is
	// the clock reading when the request that wrote it started.
	info       Info
	etag       string
	renewStart time.Time
	state      State // as last reported through OnState
	lost       chan struct{}
	lostErr    error
	released   bool
	// changed is closed and replaced whenever validity may have grown or
	// the lease ended, waking AwaitValid.
	changed chan struct{}
	// tookOver is the holder this lease replaced without its release.
	tookOver       *Info
	tookOverReason string

	// renewer renews a lease object every RenewEvery until Release
	// stops it or the lease is lost (never started for a file lock).
	renewer *service.Loop
}

// Info returns what the lease says about this holder.
func (l *Lease) Info() Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info
}

// TookOver returns the holder this lease replaced without that holder's
// release (it was dead, or stopped renewing) and why; ok is false when the
// lease was free.
func (l *Lease) TookOver() (from Info, reason string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tookOver == nil {
		return Info{}, "", false
	}
	return *l.tookOver, l.tookOverReason, true
}

// Lost is closed when another process took the lease over; Err says who.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns the *LostError that closed Lost, or nil.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// Margin is the validity a caller should ask of AwaitValid before starting
// work whose first side effect follows within it: TTL/3. With renewals
// every TTL/3 a healthy lease always has more than 2·TTL/3 left, so the
// gate only closes after a renewal failed.
func (l *Lease) Margin() time.Duration { return l.opts.TTL / 3 }

// TTL is the lease's TTL.
func (l *Lease) TTL() time.Duration { return l.opts.TTL }

// remainingLocked is how long the lease stays valid after now: TTL, less
// the drift allowance, after the start of the last successful renewal
// request. Elapsed time is the larger of the monotonic and the wall-clock
// difference: the monotonic clock ignores clock steps, the wall clock
// keeps running while the machine is suspended.
func (l *Lease) remainingLocked(now time.Time) time.Duration {
	elapsed := max(now.Sub(l.renewStart), now.Round(0).Sub(l.renewStart.Round(0)))
	return l.opts.TTL - driftAllowance(l.opts.TTL) - elapsed
}

func (l *Lease) stateLocked(now time.Time) State {
	switch {
	case l.lostErr != nil:
		return Lost
	case l.released:
		return Released
	case l.lock != nil || l.remainingLocked(now) > 0:
		return Valid
	}
	return Suspended
}

// State returns the lease's state now.
func (l *Lease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked(l.opts.Clock.Now())
}

// ValidFor returns how long the lease stays valid without another
// renewal; 0 when it is not valid. A file lock is valid while held: it
// returns the TTL.
func (l *Lease) ValidFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stateLocked(l.opts.Clock.Now()) != Valid {
		return 0
	}
	if l.lock != nil {
		return l.opts.TTL
	}
	return l.remainingLocked(l.opts.Clock.Now())
}

// AwaitValid returns nil once the lease is valid for at least atLeast from
// now, and blocks while it is not (suspended, or valid for less: only a
// renewal extends it). It returns an error wrapping ErrLost once the lease
// is lost or released, and ctx's error when ctx ends first. Validity is
// computed from the clock at each call, so a process that was paused past
// its lease sees it suspended at once, before any renewal ran. A file lock
// is valid while held. It makes no request.
func (l *Lease) AwaitValid(ctx context.Context, atLeast time.Duration) error {
	if l.lock == nil && atLeast >= l.opts.TTL-driftAllowance(l.opts.TTL) {
		return fmt.Errorf("lease: AwaitValid(%v): a lease with TTL %v is never valid that long; ask for less than TTL - TTL/100", atLeast, l.opts.TTL)
	}
	for {
		l.mu.Lock()
		if l.lostErr != nil {
			err := l.lostErr
			l.mu.Unlock()
			return err
		}
		if l.released {
			l.mu.Unlock()
			return fmt.Errorf("%w: %s was released by this process", ErrLost, l.opts.Key)
		}
		if l.lock != nil || l.remainingLocked(l.opts.Clock.Now()) >= atLeast {
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// broadcastLocked wakes AwaitValid callers.
func (l *Lease) broadcastLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *Lease) markLost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr == nil {
		l.lostErr = err
		close(l.lost)
		l.broadcastLocked()
	}
}

// Renew extends the lease object by TTL from the start of its request
// (one conditional PUT). It returns a *LostError (and closes Lost) when
// another process holds the lease now, and a plain error when the store
// could not be written: the lease stays valid until TTL after the start of
// the last successful renewal, then it is suspended until one succeeds.
// The background goroutine calls it every RenewEvery. A file lock needs no
// renewal: Renew returns nil.
func (l *Lease) Renew(ctx context.Context) error {
	if l.lock != nil {
		return nil
	}
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	for adopted := false; ; adopted = true {
		l.mu.Lock()
		if l.released {
			l.mu.Unlock()
			return fmt.Errorf("%w: %s was released by this process", ErrLost, l.opts.Key)
		}
		if l.lostErr != nil {
			err := l.lostErr
			l.mu.Unlock()
			return err
		}
		info, etag := l.info, l.etag
		l.mu.Unlock()

		start := l.opts.Clock.Now()
		info.Renewed, info.Renewals = start.Round(0), info.Renewals+1
		info.Expires = info.Renewed.Add(l.opts.TTL)
		newTag, err := l.write(ctx, info, objstore.IfMatch(etag))
		if err == nil {
			l.mu.Lock()
			l.info, l.etag, l.renewStart = info, newTag, start
			l.broadcastLocked()
			l.mu.Unlock()
			return nil
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			return fmt.Errorf("lease: renew %s: %w", l.opts.Key, err)
		}
		cur, curTag, found, rerr := readObject(ctx, l.store, l.opts.Key)
		if rerr != nil {
			return fmt.Errorf("lease: renew %s: the object changed and could not be read back: %w", l.opts.Key, rerr)
		}
		if found && cur.Owner == l.opts.Owner && !cur.Released {
			if adopted {
				return fmt.Errorf("lease: renew %s: %w twice on this process's own lease object", l.opts.Key, err)
			}
			// One of this process's own renewals landed although its
			// response was lost: adopt its ETag and renew again, so
			// validity counts from a request known to have landed.
			l.mu.Lock()
			l.etag = curTag
			l.mu.Unlock()
			continue
		}
		lost := &LostError{Where: l.opts.Key}
		if found {
			lost.Holder = cur
		}
		l.markLost(lost)
		return lost
	}
}

// write puts info with opts and returns the new ETag. A write whose
// response was lost is recognised by reading the object back.
func (l *Lease) write(ctx context.Context, info Info, opts objstore.PutOptions) (string, error) {
	b, err := json.Marshal(info)
	if err != nil {
		return "", err
	}
	oi, err := l.store.Put(ctx, l.opts.Key, b, opts)
	if err == nil {
		return oi.ETag, nil
	}
	if ctx.Err() != nil || errors.Is(err, objstore.ErrPrecondition) {
		return "", err
	}
	back, etag, found, rerr := readObject(ctx, l.store, l.opts.Key)
	if rerr == nil && found && back.Owner == info.Owner && back.Renewals == info.Renewals &&
		back.Renewed.Equal(info.Renewed) && back.Released == info.Released {
		return etag, nil
	}
	return "", err
}

// retryEvery is the pause between renewal attempts after a failure.
func (l *Lease) retryEvery() time.Duration { return max(l.opts.RenewEvery/5, 10*time.Millisecond) }

// renewLoop is the renewer: it renews every RenewEvery (sooner after a
// failure) until ctx ends, and ends with the error of a lost lease.
func (l *Lease) renewLoop(ctx context.Context) error {
	wait := l.opts.RenewEvery
	for {
		if clock.Sleep(ctx, l.opts.Clock, wait) != nil {
			return nil
		}
		start := l.opts.Clock.Now()
		// Not ctx: Release waits for a renewal under way instead of
		// cutting it off, so the release's If-Match finds its ETag.
		rctx, cancel := context.WithTimeout(context.Background(), l.opts.RenewEvery)
		err := l.Renew(rctx)
		cancel()
		if errors.Is(err, ErrLost) {
			l.reportState(err)
			return err
		}
		if err != nil {
			wait = l.retryEvery()
		} else {
			wait = max(l.opts.RenewEvery-l.opts.Clock.Now().Sub(start), 0)
		}
		l.reportState(err)
	}
}

// reportState logs a change of state and passes it to OnState.
func (l *Lease) reportState(cause error) {
	l.mu.Lock()
	s := l.stateLocked(l.opts.Clock.Now())
	changed := s != l.state
	l.state = s
	l.mu.Unlock()
	if !changed {
		if cause != nil && s == Valid {
			l.log.Debug("lease renewal failed; retrying", "err", cause)
		}
		return
	}
	switch s {
	case Suspended:
		l.log.Warn("lease suspended: renewals failed for longer than its TTL; this process starts no work until a renewal succeeds",
			"ttl", l.opts.TTL, "err", cause)
	case Lost:
		l.log.Error("lease lost; this process must stop writing", "err", cause)
	case Valid:
		l.log.Warn("lease valid again: a renewal found it unchanged")
	}
	if l.opts.OnState != nil {
		l.opts.OnState(s, cause)
	}
}

// Release gives the lease up: a lease object is marked released (If-Match,
// so a lease already taken over is left alone), a file lock is unlocked.
// It stops the renewals and is idempotent. Cost: one conditional PUT.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.broadcastLocked()
	l.mu.Unlock()
	l.renewer.Stop()
	if l.lock != nil {
		// Closing the only descriptor drops the flock.
		if err := l.lock.Close(); err != nil {
			return fmt.Errorf("lease: release the lock file: %w", err)
		}
		return nil
	}
	if l.Err() != nil {
		return nil // someone else holds it now
	}
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	l.mu.Lock()
	info, etag := l.info, l.etag
	l.mu.Unlock()
	info.Released, info.Expires = true, l.opts.Clock.Now().Round(0)
	if _, err := l.write(ctx, info, objstore.IfMatch(etag)); err != nil && !errors.Is(err, objstore.ErrPrecondition) {
		return fmt.Errorf("lease: release %s: %w", l.opts.Key, err)
	}
	return nil
}

func readObject(ctx context.Context, store objstore.Store, key string) (Info, string, bool, error) {
	b, oi, err := store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotExist) {
		return Info{}, "", false, nil
	}
	if err != nil {
		return Info{}, "", false, fmt.Errorf("lease: read %s: %w", key, err)
	}
	info, err := decodeInfo(b)
	if err != nil {
		// An unreadable lease protects nobody: it reads as released, so
		// the next holder overwrites it (If-Match on its ETag).
		return Info{Owner: "(unreadable lease)", Released: true, Mechanism: MechanismObject}, oi.ETag, true, nil
	}
	return info, oi.ETag, true, nil
}

// decodeInfo decodes a lease object or lock file.
func decodeInfo(b []byte) (Info, error) {
	if len(b) > maxInfo {
		return Info{}, fmt.Errorf("%w: %d bytes", errCorrupt, len(b))
	}
	var i Info
	if err := json.Unmarshal(b, &i); err != nil {
		return Info{}, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	if i.Owner == "" {
		return Info{}, fmt.Errorf("%w: no owner", errCorrupt)
	}
	return i, nil
}

// rootOf finds the local folder of store, looking through wrappers (a
// counting or fault-injecting store) that expose Unwrap, so wrapping a
// file store does not change how its lease is taken.
func rootOf(store objstore.Store) (interface{ Root() string }, bool) {
	for i := 0; store != nil && i < 16; i++ {
		if r, ok := store.(interface{ Root() string }); ok {
			return r, true
		}
		u, ok := store.(interface{ Unwrap() objstore.Store })
		if !ok {
			return nil, false
		}
		store = u.Unwrap()
	}
	return nil, false
}
