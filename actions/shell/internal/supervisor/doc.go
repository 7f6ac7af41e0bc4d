// Package supervisor is the child side of the shell action's supervisor:
// a re-execution of the worker's own binary that stands between the worker
// and a command and kills the command's process group when the worker
// dies, however it dies.
//
//	worker ──lifeline pipe──▶ supervisor (process group leader) ──▶ command and its descendants
//
// The package's init function turns any program that links it (every
// program that links the shell action) into a supervisor when the
// environment variable [Env] is set, and exits before the program's main;
// otherwise it does nothing. It is a package of its own, with only
// standard-library imports, so that Go initialises it early: a supervisor
// runs the init functions of fewer of the program's packages before its
// own, which shortens every shell step (figures:
// docs/BENCHMARKS.md#shell-supervisor).
//
// Protocol: the worker starts the supervisor as the leader of a new
// process group, with argv [Arg0, program, argv...], only [Env] in its
// environment, and two pipes: [LifelineFD], whose write end only the worker
// holds, and [StatusFD]. The worker writes the command's environment to the
// lifeline as one JSON array of "NAME=value" strings, then nothing more.
// The supervisor makes both pipes close-on-exec, starts the command in its
// own group with the standard streams, directory and signal dispositions
// it was given (and on Linux a parent-death signal, SIGKILL, so the
// command dies if the supervisor does), and reports on the status pipe
// ([ReportExit] or [ReportSignal]; [ReportStartErr] or [ReportFail] when
// it cannot). It then SIGKILLs its own group, itself
// included, when any of these happens first:
//   - the command exits: its exit is reported first, and what it left in
//     the group dies with it;
//   - the lifeline reaches EOF: the worker's last copy of the write end
//     closed, because the step is over or the worker died;
//   - SIGTERM arrives after the supervisor was reparented: the worker
//     died and this is the supervisor's parent-death signal (Linux), which
//     covers a copy of the lifeline's write end outliving the worker. A
//     SIGTERM while the worker lives is the worker stopping the command's
//     group; the supervisor stays to report how the command ended.
//
// It makes no object-store requests. A process that leaves the group
// (setsid) is not killed, as in the shell action generally.
package supervisor
