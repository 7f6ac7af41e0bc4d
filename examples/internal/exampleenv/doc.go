// Package exampleenv is the plumbing the runnable examples share, so that
// each example's main.go shows what it teaches (its step runner, its
// outcomes) and not the same setup eight times.
//
// It opens a store by URL, a logger on stderr and a queue on the store;
// builds a runtime.Runtime whose terminal hook hands one run's outcome to
// Await; and wraps the program's output so the worker's goroutines and the
// main goroutine can print to it at once. Main runs an example's run
// function the way every example's main does: Ctrl-C cancels its context and
// an error exits with status 1.
//
// Cost in object-store requests: only what queue.Open, the runtime and
// runtime.Status cost; Await and the hook read nothing.
//
// It does not pick the examples' queue configuration, runtime options or
// flags, and it is internal: it is not an API for programs outside
// examples/.
package exampleenv
