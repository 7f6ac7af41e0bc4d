// Package faults wraps an objstore.Store and injects failures so tests can
// exercise every error path of the layers above it: returned errors, added
// latency, hung calls, lost responses (the call happened but the caller is
// told it failed) and torn writes (a prefix of the data was stored).
//
// Rules are matched per call in the order given to Set; the first rule that
// fires decides the fault. Randomness comes from a source seeded by New, so
// a sequence of calls made one at a time is affected the same way on every
// run with the same seed. Concurrent calls draw from the same source in the
// order they arrive, so they are deterministic only as far as their order is.
//
// Cost: the wrapper itself makes no request. A fault that says "the call is
// not performed" makes none; LoseResponse and TornWrite make exactly the one
// request of the wrapped call. The wrapper does not retry.
package faults
