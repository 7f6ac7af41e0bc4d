// Package rttest is the runtime's test fixture for every test outside
// package runtime (the add-ons', the remote-control package's): a
// queuetest.Env with a runtime opened on its queue, a worker the test
// starts and stops, and the steps those tests repeat (submit, read a
// run's status, wait until a run reaches a state).
//
// It imports runtime, so package runtime's own in-package tests cannot
// use it (an import cycle); they build on queuetest, or move to an
// external runtime_test package.
//
// Cost: what the runtime and queue it opens cost on the Env's store. It
// asserts nothing of its own but that opening, submitting, reading and
// stopping succeed and that waits end before queuetest.Deadline.
package rttest
