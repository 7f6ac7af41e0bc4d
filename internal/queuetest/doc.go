// Package queuetest is the test fixture under the runtime's tests and its
// add-ons': a queue on a fresh mem store, driven by a clock.Mock that
// starts at T0, with a quiet logger and a context that bounds the whole
// test (Deadline), plus Until, the one polling loop those tests share,
// which also advances the clock past retry backoffs.
//
// It imports the storage stack only (objstore, mem, queue), never the
// runtime, so the runtime's in-package tests can use it; rttest adds the
// runtime on top for every test outside package runtime.
//
// Cost: what the queue it opens costs on mem (no network, no disk). It
// asserts nothing of its own but that the queue opens and that a wait
// ends before the deadline.
package queuetest
