// Package shell is the built-in "shell" action: it runs one process per
// attempt and reports its exit code and output.
//
// Arguments: command (required; a string runs as `/bin/sh -c STRING`, a list
// of strings runs directly as argv with no shell), env, dir, stdin, timeout
// and max_output_bytes (default 1 MiB per stream).
//
// Templates: in a workflow a script's ${ } values never become shell code.
// Package dsl renders each one as a quoted reference to an environment
// variable (TQW_ARG_1, TQW_ARG_2, ...) that it adds to env, so the script
// this action runs reads every value as one word (docs/DSL.md, "Shell
// scripts and templates"). The action itself runs the script it is given.
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
// No orphans: the command's process group dies with the worker, however
// the worker dies (SIGKILL, OOM kill, crash): within milliseconds, tested at
// one second. The action does not start the command itself but a
// supervisor, a re-execution of the worker's own binary (/proc/self/exe on
// Linux, os.Executable elsewhere) that the init function of
// internal/supervisor, which this package imports, recognises by the
// TQW_SHELL_SUPERVISOR variable; so every program that links this package
// has it with no extra call. The name is reserved in a step's env. The
// supervisor leads the process group and starts the command in it with the
// step's argv, environment, directory, standard streams and signal
// dispositions unchanged and no extra file descriptor. It reads a pipe
// whose write end only the worker holds; the pipe's end of file, when the
// worker dies, makes it SIGKILL the group. On Linux it also has a
// parent-death signal, for when a copy of that write end outlived the
// worker. It reports the command's exit code or fatal signal back over a
// second pipe, so the step sees exactly how the command ended, and SIGKILLs
// what the command left in the group as the command exits. The setsid
// escape above applies here too: a process that leaves the group does not
// die with the worker either. The program's packages that Go initialises
// before internal/supervisor run their init functions in every supervisor,
// so an embedding program's init functions should have no side effects. If
// the executable cannot be found (no /proc, say), the action logs a
// warning on every step and starts the command directly, with a
// parent-death signal on the direct child only: its descendants then
// outlive a killed worker.
//
// The supervisor reaps the command and the worker reaps the supervisor;
// when the worker dies, init (or the nearest subreaper) reaps what the
// group kill leaves.
//
// Errors: a non-zero exit is `shell.exit` with Status set to the exit code
// and the output attached as Error.Output; it is not retryable. A timeout is
// `timeout` (retryable), cancellation `cancelled`, and a command that cannot
// be started (no such program, bad dir, not an executable) is
// `validation`. A supervisor that fails without reporting how the command
// ended gives a plain error (`custom.unexpected` in a workflow).
//
// Costs: no object-store requests. The supervisor adds one exec of the
// worker's binary (its Go runtime start and the init functions of the
// packages initialised before the supervisor's) per step and, while the
// command runs, one more small process (figures:
// docs/BENCHMARKS.md#shell-supervisor). Not done: resource limits
// (CPU, memory), sandboxing, or pseudo-terminals; the workflow author is
// trusted with the worker's privileges, which is why the CLI can disable
// this action.
package shell
