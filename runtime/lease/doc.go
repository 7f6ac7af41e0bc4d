// Package lease is a store's writer lease: it tells a process that wants
// to work a store whether another one does, lets it take over from a dead
// or stalled holder without waiting longer than it must, and tells the
// holder, from its own clock, whether it may still start work.
//
// It is a guard for side effects, not for the data: the kv's fencing
// (runtime/store/kv) is what keeps two writers from both committing. What
// the lease adds is that a holder that lost contact stops starting steps
// before anyone may take over, so a step's side effects never run on two
// writers because of a takeover.
//
// # Two mechanisms
//
//   - A lease object (key Options.Key, default "writer-lease"): an Info as
//     JSON, written create-only, renewed and released with If-Match on its
//     ETag, so only one writer's conditional PUT can win.
//   - On a store with a local folder (file://), an exclusive flock(2) on
//     <folder>/tqw-writer.lock. The OS drops it when the process dies, so
//     takeover after kill -9 is immediate, it costs no request, and it is
//     valid for exactly as long as it is held. The holder's Info is
//     written into the file for Live to report. A folder shared by several
//     machines over a network file system should use the lease object
//     (Options.ObjectLease): flock is not reliable there.
//
// # Holder side: valid, suspended, lost
//
// The holder renews every RenewEvery (TTL/3). Its lease is valid until
// TTL, less a 1 % allowance for clock-rate drift, after the *start* of the
// last renewal request that succeeded, measured by its own clock (the
// larger of the monotonic and the wall-clock difference, so neither a
// clock step nor a suspended machine stretches it). A request that takes
// long or never answers therefore only shortens validity. When renewals
// keep failing past that point (the store is unreachable) the lease is
// Suspended: AwaitValid blocks and the holder starts nothing. The next
// renewal that finds the object unchanged (If-Match succeeds) makes it
// Valid again; one that finds another holder makes it Lost for good (Lost
// is closed, AwaitValid returns a *LostError). Validity is computed from
// the clock at every AwaitValid call, so a process resumed after a pause
// (SIGSTOP, a stalled VM) sees its lease suspended before any goroutine
// has run.
//
// AwaitValid(ctx, atLeast) returns only while the lease stays valid for
// atLeast more. A caller that passes the longest time from the check to
// its work's first side effect never starts work that a new holder could
// duplicate: a taker waits a full TTL from a moment after that renewal
// began (below). Lease.Margin, TTL/3, is the value the runtime uses: the
// interpreter's work between the gate and an action's first request is
// CPU work and at most one or two small reads, and a healthy lease always
// has more than 2·TTL/3 left, so the gate closes only after renewals
// failed. The bound cannot cover a process paused between the check and
// the side effect itself; such a process sees its lease lost at its next
// check and its commits fenced.
//
// # Taker side: the rules
//
// Acquire reads the lease object and applies, in order:
//
//  1. Missing, released or unreadable: take it (create-only, or If-Match
//     on the ETag read).
//  2. Same host name, same boot id (Linux /proc/sys/kernel/random/boot_id)
//     and same pid namespace, and the holder's pid is gone (or a zombie),
//     or runs with another start time (field 22 of /proc/PID/stat: the pid
//     was reused): the holder is dead; take it at once.
//  3. Same host name, another boot id, and the holder's last renewal
//     predates this machine's boot: it died with the machine; take it at
//     once. The boot-time condition keeps a second machine that happens to
//     share the host name from passing for a reboot.
//  4. The holder's stated expiry is older than ClockSkew (default 1 min)
//     by this process's clock: take it at once. This tolerates a holder
//     whose clock lags by up to ClockSkew.
//  5. The stated expiry has not passed: the holder is live. Acquire
//     returns an *ActiveError at once (send it commands, or give up).
//  6. Otherwise the holder stopped renewing, or its clock runs ahead. The
//     taker does not trust that clock: it reads the object every
//     PollEvery and takes over only once it has itself seen the same ETag
//     for the holder's TTL by its own monotonic clock, counted from the
//     moment its first read returned (after the holder's last successful
//     renewal began). Every read reports progress through OnWait (holder,
//     since when, countdown). A renewal seen meanwhile means the holder is
//     live: *ActiveError. The takeover PUT is If-Match on that ETag, so a
//     renewal that lands first makes the takeover fail instead.
//
// A live, renewing holder is therefore never taken over: every renewal
// changes the ETag and restarts or ends the watch. Rules 2 and 3 need
// Linux's /proc; elsewhere only the TTL rules apply. Hosts are told apart
// by host name: give every machine its own.
//
// # Cost in object-store requests
//
//   - Acquire: one GET and one conditional PUT; while watching a holder
//     that stopped renewing, one GET per PollEvery (TTL/15, so 16 GETs
//     for a takeover after a full TTL).
//   - Renewal: one conditional PUT per RenewEvery; after a failure, one
//     per RenewEvery/5 until one succeeds. A lost response costs one GET
//     to read the object back.
//   - Release: one conditional PUT. Live: one GET.
//   - AwaitValid, State, ValidFor: none.
//   - flock: no request at all.
//
// At the default TTL of 15 s (renewed every 5 s) an idle holder makes 12
// PUTs a minute, 17,280 a day: about $0.086 a day (≈ $2.60 a month) on S3
// at $0.005 per 1,000 PUTs. At 15 s each renewal leaves 2·TTL/3 = 10 s
// of validity to ride out failed or slow attempts (an S3 PUT occasionally
// takes a second or more), retried every second, before the step gate
// (TTL/3) closes, so a healthy holder is not suspended. In exchange a
// writer that stopped renewing is replaced after 15 s of watching (at once
// when it is a dead process on the same machine), and one that lost the
// store stops starting steps at most 15 s after its last good renewal. A
// 5 s TTL would triple the cost and suspend on ordinary latency spikes; a
// 60 s TTL (the former default) costs a quarter but blocks the store for
// a minute after a crash on another machine.
//
// # What it does not do
//
// It does not fence: a holder paused for longer than its TTL between a
// check and a write can still send that write, which is why the kv fences
// on its own. It does not balance leases across processes or shards; keys
// and lock files are configurable so a caller can hold several.
package lease
