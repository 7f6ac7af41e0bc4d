// Package service is the one lifecycle of tqw's background work: a
// goroutine that is started, stopped and watched the same way whether it
// renews a lease, polls an inbox, sweeps a queue or fans events out to
// streams.
//
// A Service has three calls. Start(ctx) starts it; Stop stops it and waits
// until its goroutine returned; Stopped is closed once that goroutine
// returned, whether Stop ended it or it ended by itself (a fatal error,
// which Err then reports).
//
// Guarantees of Loop, the implementation every service uses:
//
//   - One-shot. A Loop runs its function at most once. Start on a running
//     Loop does nothing; Start after it ended, or after Stop, returns an
//     error wrapping ErrStopped and runs nothing. A stopped service is
//     replaced by a new Loop, never restarted: a service's channels and
//     error then describe one run only, so a watcher of Stopped never
//     misses an end or sees a stale one.
//   - Stop before Start ends the Loop without running it: Stopped is
//     closed at once.
//   - Stop is idempotent and safe from any goroutine but the Loop's own
//     (the function ends the Loop by returning instead). Every Stop
//     returns only after the function returned.
//   - Stop cancels the function's context with cause ErrStopped; the
//     context also ends with the one given to Start.
//   - Start, Stop, Stopped and Err are safe for concurrent use.
//
// Not a service: work a caller does on its own goroutine and hands on
// only while others queue behind it, such as the packed file store's
// group commit (the writer that finds the log idle makes the append, and
// a goroutine takes over a backlog) and its next-segment file made ahead
// of a rotation. A long-running loop there would add a hand-off to every
// lone write; the store waits for both when it closes.
//
// It makes no object-store request and reads no clock.
package service
