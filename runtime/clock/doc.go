// Package clock is the one source of time of the storage stack and
// everything above it: the kv, the queue, the runtime, the writer lease, the
// interpreter and the server take a Clock, so a test drives all of them
// with one Mock and no test waits on the wall clock.
//
// Guarantees: System reads time.Now and arms time.Timer values (and
// time.AfterFunc for AfterFunc). Mock moves only when told to (Advance,
// Set) and then fires every due timer in deadline order, an AfterFunc's
// function in its own goroutine; a timer keeps at most one undelivered fire, like
// time.Timer since Go 1.23. Timer.ResetAt arms at a deadline, so a
// deadline read from the store fires on time even when the clock moves
// between reading now and arming the timer. Both are safe for concurrent
// use. Sleep is the one wait on a Clock (retry pauses, polling intervals),
// ending early with its context.
//
// Cost in object-store requests: none. The package imports only the
// standard library, so every layer can import it.
package clock
