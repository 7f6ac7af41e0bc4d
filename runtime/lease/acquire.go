package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tqw-dsl/tqw/internal/service"
	"github.com/tqw-dsl/tqw/runtime/clock"
	"github.com/tqw-dsl/tqw/runtime/store/objstore"
)

// Acquire takes the store's lease. A free, released or unreadable lease is
// taken at once, and so is one whose holder is known dead (see the package
// documentation for the rules). A holder whose stated expiry has not
// passed gets an *ActiveError (errors.Is(err, ErrActive)). A holder that
// stopped renewing is watched (Options.OnWait reports progress) and
// replaced once this process has seen its lease unchanged for the
// holder's TTL by its own clock; if it renews meanwhile, Acquire returns
// an *ActiveError. With the lease object, a goroutine renews it every
// RenewEvery until Release.
func Acquire(ctx context.Context, store objstore.Store, opts Options) (*Lease, error) {
	opts, err := opts.withDefaults(store)
	if err != nil {
		return nil, err
	}
	l := &Lease{store: store, opts: opts, log: opts.Logger.With("component", "lease", "key", opts.Key),
		lost: make(chan struct{}), changed: make(chan struct{}), state: Valid}
	l.renewer = service.NewLoop(l.renewLoop)
	if opts.LockDir != "" {
		// A file lock needs no renewal: the renewer is never started.
		if err := l.acquireFlock(ctx); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err := l.acquireObject(ctx); err != nil {
		return nil, err
	}
	// Renewals outlive Acquire's ctx: only Release ends them. A new Loop
	// always starts.
	_ = l.renewer.Start(context.Background())
	return l, nil
}

// verdict is what the takeover rules make of a lease record.
type verdict int

const (
	// take: the lease is free or its holder is known dead.
	take verdict = iota
	// live: the holder's stated expiry has not passed.
	live
	// stale: the holder's stated expiry has passed, but not by more than
	// the clock-skew allowance: watch it for its TTL.
	stale
)

// judge applies the takeover rules to cur, read at now; for take it says
// why.
func judge(opts Options, cur Info, now time.Time) (verdict, string) {
	switch {
	case cur.Released:
		return take, "it was released"
	case cur.Owner == opts.Owner:
		return take, "it names this owner"
	}
	if reason, dead := deadHolder(opts, cur); dead {
		return take, reason
	}
	if opts.ClockSkew > 0 && now.Sub(cur.Expires) > opts.ClockSkew {
		return take, fmt.Sprintf("its lease expired %v ago by its own clock, more than the %v clock-skew allowance", now.Sub(cur.Expires).Round(time.Second), opts.ClockSkew)
	}
	if now.Before(cur.Expires) {
		return live, ""
	}
	return stale, ""
}

// deadHolder applies the rules that need no waiting: on this machine (same
// host name), a holder from an earlier boot, or whose pid is gone or was
// reused, is dead.
func deadHolder(opts Options, cur Info) (string, bool) {
	self := opts.self()
	if cur.Host == "" || cur.Host != self.Host || cur.BootID == "" || self.BootID == "" {
		return "", false
	}
	if cur.BootID != self.BootID {
		// A different boot id alone could also be another machine with
		// the same host name: the holder must also have stopped renewing
		// before this machine booted.
		if boot := opts.System.BootTime(); !boot.IsZero() && cur.Renewed.Before(boot) {
			return "its machine rebooted since its last renewal", true
		}
		return "", false
	}
	if cur.PIDNamespace == "" || cur.PIDNamespace != self.PIDNamespace || cur.PID <= 0 {
		return "", false
	}
	start, running, err := opts.System.Probe(cur.PID)
	switch {
	case err != nil:
		return "", false
	case !running:
		return fmt.Sprintf("its process (pid %d) is gone", cur.PID), true
	case cur.PIDStart != 0 && start != cur.PIDStart:
		return fmt.Sprintf("its pid %d now belongs to another process", cur.PID), true
	}
	return "", false
}

// maxRaces bounds how often Acquire re-reads a lease object that another
// process wrote between its read and its conditional write.
const maxRaces = 10

func (l *Lease) acquireObject(ctx context.Context) error {
	key := l.opts.Key
	var (
		watching bool
		watched  Info
		wtag     string
		since    time.Time // when this process first read wtag
	)
	for races := 0; ; {
		cur, etag, found, err := readObject(ctx, l.store, key)
		now := l.opts.Clock.Now()
		if err != nil {
			if !watching || ctx.Err() != nil {
				return err
			}
			// An unchanged ETag read later still proves no renewal
			// happened in between: keep watching.
			l.log.Warn("reading the lease failed while watching its holder; retrying", "err", err)
			if err := clock.Sleep(ctx, l.opts.Clock, l.opts.PollEvery); err != nil {
				return fmt.Errorf("lease: waiting for %s: %w", key, err)
			}
			continue
		}
		v, reason := take, ""
		if found {
			v, reason = judge(l.opts, cur, now)
		}
		if watching && v != take && etag != wtag && cur.Owner == watched.Owner {
			// The holder renewed while this process watched it: it is
			// live, whatever its clock says.
			return &ActiveError{Holder: cur, Where: key, Renewed: true}
		}
		if v == stale {
			if !watching || etag != wtag {
				watching, watched, wtag, since = true, cur, etag, now
			}
			ttl := cur.holderTTL(l.opts.TTL)
			observed := l.opts.Clock.Now().Sub(since)
			if observed < ttl {
				if l.opts.NoWait {
					return &ActiveError{Holder: cur, Where: key}
				}
				if l.opts.OnWait != nil {
					l.opts.OnWait(Waiting{Holder: cur, Where: key, TTL: ttl, Observed: observed, Remaining: ttl - observed})
				}
				if err := clock.Sleep(ctx, l.opts.Clock, min(l.opts.PollEvery, ttl-observed)); err != nil {
					return fmt.Errorf("lease: waiting for %s: %w", key, err)
				}
				continue
			}
			v, reason = take, fmt.Sprintf("it has not renewed its lease for %v", observed.Truncate(100*time.Millisecond))
		}
		if v == live {
			return &ActiveError{Holder: cur, Where: key}
		}
		start := l.opts.Clock.Now()
		l.info = l.opts.newInfo(start, MechanismObject)
		put := objstore.CreateOnly()
		if found {
			put = objstore.IfMatch(etag)
		}
		newTag, err := l.write(ctx, l.info, put)
		if err == nil {
			l.etag, l.renewStart = newTag, start
			if found && !cur.Released {
				l.tookOver, l.tookOverReason = &cur, reason
				l.log.Info("took the lease over", "from", cur.String(), "reason", reason)
			}
			return nil
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			return fmt.Errorf("lease: acquire %s: %w", key, err)
		}
		// Another process wrote the lease meanwhile: judge it afresh.
		if races++; races >= maxRaces {
			return fmt.Errorf("lease: acquire %s: the object changed under %d conditional writes in a row: %w", key, races, err)
		}
		watching = false
	}
}

// flockBusyWait is how long acquireFlock retries a busy lock file before it
// reports a live holder: longer than any momentary Live probe.
const flockBusyWait = 2 * time.Second

// flockHeldChecks is how many checks in a row, 20 ms apart, must find the
// lock file held exclusively for acquireFlock to report its holder at
// once: longer than another process's momentary exclusive hold (one that
// takes the lock, finds a live lease object and lets go), far shorter than
// flockBusyWait.
const flockHeldChecks = 5

func (l *Lease) acquireFlock(ctx context.Context) error {
	path := filepath.Join(l.opts.LockDir, l.opts.LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("lease: open the lock file %s: %w", path, err)
	}
	// Live probes hold a shared lock for a moment, longer on a loaded
	// machine; retry for a while before concluding a holder has it. A
	// lock that stays exclusive (a shared one cannot be taken either)
	// for flockHeldChecks checks in a row is a holder's, as Live judges
	// it: waiting flockBusyWait for it would only delay every command
	// sent to a live worker.
	giveUp := l.opts.Clock.Now().Add(flockBusyWait)
	held := 0
	for {
		busy, err := tryFlock(f, true)
		if err == nil && !busy {
			break
		}
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("lease: lock %s: %w", path, err)
		}
		exclusive, err := tryFlock(f, false)
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("lease: lock %s: %w", path, err)
		}
		if exclusive {
			held++
		} else {
			unflock(f)
			held = 0
		}
		if held >= flockHeldChecks || !l.opts.Clock.Now().Before(giveUp) {
			holder, _ := readLockInfo(f)
			_ = f.Close()
			holder.Mechanism = MechanismFlock
			return &ActiveError{Holder: holder, Where: path}
		}
		if err := clock.Sleep(ctx, l.opts.Clock, 20*time.Millisecond); err != nil {
			_ = f.Close()
			return fmt.Errorf("lease: lock %s: %w", path, err)
		}
	}
	// A holder of the lease object (ObjectLease elsewhere) counts too,
	// unless the rules find it dead: the lock holder does not watch it.
	cur, _, found, err := readObject(ctx, l.store, l.opts.Key)
	if err != nil {
		_ = f.Close()
		return err
	}
	if found {
		if v, _ := judge(l.opts, cur, l.opts.Clock.Now()); v != take {
			_ = f.Close()
			return &ActiveError{Holder: cur, Where: l.opts.Key}
		}
	}
	l.info = l.opts.newInfo(l.opts.Clock.Now(), MechanismFlock)
	b, err := json.Marshal(l.info)
	if err == nil {
		if err = f.Truncate(0); err == nil {
			_, err = f.WriteAt(b, 0)
		}
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("lease: write the lock file %s: %w", path, err)
	}
	l.lock = f
	return nil
}

// Live reports the store's live holder, if any: the holder of the file
// lock (stores with a lock folder), or of a lease object that the rules
// do not find dead and whose stated expiry has not passed. It writes
// nothing. Cost: one GET of the lease object, plus, with a lock folder, an
// open and a momentary shared flock.
func Live(ctx context.Context, store objstore.Store, opts Options) (Info, bool, error) {
	opts, err := opts.withDefaults(store)
	if err != nil {
		return Info{}, false, err
	}
	if opts.LockDir != "" {
		info, held, err := probeFlock(filepath.Join(opts.LockDir, opts.LockFile))
		if err != nil || held {
			return info, held, err
		}
	}
	cur, _, found, err := readObject(ctx, store, opts.Key)
	if err != nil || !found {
		return Info{}, false, err
	}
	v, _ := judge(opts, cur, opts.Clock.Now())
	return cur, v == live, nil
}

// probeFlock reports whether another process holds the lock file, and the
// holder it describes.
func probeFlock(path string) (Info, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Info{}, false, nil
	}
	if err != nil {
		return Info{}, false, fmt.Errorf("lease: open the lock file %s: %w", path, err)
	}
	defer f.Close()
	busy, err := tryFlock(f, false)
	if err != nil {
		return Info{}, false, fmt.Errorf("lease: probe the lock file %s: %w", path, err)
	}
	if !busy {
		unflock(f)
		return Info{}, false, nil
	}
	info, _ := readLockInfo(f)
	info.Mechanism = MechanismFlock
	return info, true, nil
}

// readLockInfo decodes the Info a lock file holds (zero when it holds
// none yet).
func readLockInfo(f *os.File) (Info, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, maxInfo+1))
	if err != nil || len(b) == 0 {
		return Info{}, err
	}
	return decodeInfo(b)
}
