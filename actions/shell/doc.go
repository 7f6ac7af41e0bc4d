// Package shell is the built-in "shell" action: it runs one process per
// attempt and reports its exit code and output.
//
// Arguments: command (required; a string runs as `/bin/sh -c STRING`, a list
// of strings runs directly as argv with no shell), env, dir, stdin, timeout
// and max_output_bytes (default 1 MiB per stream).
//
// Environment: the process does not inherit the worker's environment. It
// gets only PATH, HOME, USER, LOGNAME, LANG, LC_ALL, LC_CTYPE, TZ and TMPDIR
// from it (Options.Inherit changes the list; PATH falls back to
// /usr/local/bin:/usr/bin:/bin), plus the step's `env` map, which wins. So a
// secret reaches a command only when the workflow maps it explicitly, e.g.
// `env: {TOKEN: "${ secrets.TOKEN }"}`.
//
// Output: {exit_code, stdout, stderr, stdout_truncated, stderr_truncated}.
// Each stream keeps its first max_output_bytes bytes; the rest is read and
// dropped, and the *_truncated flag says so. A process killed by a signal
// reports exit code 128+signal, as shells do.
//
// Process groups: the command runs in its own process group. On timeout or
// cancellation the whole group gets SIGTERM, then SIGKILL after a grace
// period (Options.Grace, default 5s). When the command exits by itself, any
// processes it left in its group get SIGKILL, so a step never leaves
// background work behind. A process that moves itself to another group or
// session (setsid) escapes this; the action stops waiting for its output
// after the grace period.
//
// Errors: a non-zero exit is `shell.exit` with Status set to the exit code
// and the output attached as Error.Output; it is not retryable. A timeout is
// `timeout` (retryable), cancellation `cancelled`, and a command that cannot
// be started (no such program, bad dir) is `validation`.
//
// Costs: no object-store requests. Not done: resource limits (CPU, memory),
// sandboxing, or pseudo-terminals; the workflow author is trusted with the
// worker's privileges, which is why the CLI can disable this action.
package shell
