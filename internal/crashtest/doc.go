// Package crashtest is the shared harness of tqw's SIGKILL crash tests; it
// is imported only from _test.go files.
//
// A crash test re-executes its own test binary as a child process (chosen
// by an environment variable the child's TestMain or test function reads),
// lets it work, kills it with SIGKILL at a random moment, reaps it, repeats
// that a number of times taken from an environment variable, and then
// checks its invariants on what the children left behind. This package
// holds the mechanics: [IfChild] dispatches the child in TestMain and
// [Parent] skips the parent test inside it, [Command] builds the child,
// [Start] runs it with its stdout read line by line (and kills it when the
// test ends, should the test fail before it does), [Child.WaitReady] waits
// for a marker line, [Child.Kill] and [Child.KillAfter] kill and reap it,
// [Count] reads the kill count, [Rand] and [Delay] give the seeded kill
// moments, and [AppendLine] and [ReadLines] keep a log that survives the
// kill.
//
// It makes no object-store requests itself. It does not decide what the
// child does or what is checked afterwards: each test keeps its own child
// work and its own assertions.
package crashtest
