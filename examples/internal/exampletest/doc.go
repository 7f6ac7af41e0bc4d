// Package exampletest holds what the runnable examples' tests share: running
// an example in-process on a temporary file store and checking its output,
// and running it in a separate process (the test binary re-executed with the
// example's arguments in an environment variable, which its TestMain hands
// to RunIfChild), so that a test can kill it with SIGKILL or start it again
// on the same store.
//
// It does no object-store requests of its own; Command costs one process
// start. It is for the examples' tests only: it does not capture a child's
// output (callers set the command's Stdout) and it asserts nothing but what
// Contains and NotContains are given.
package exampletest
