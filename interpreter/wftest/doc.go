// Package wftest runs the cases of a workflow's test file (package
// dsl/testfile; `tqw-dsl test`, docs/TESTING.md) on the real interpreter
// and runtime: each case is one run on a fresh in-memory store
// (runtime/store/objstore/mem) whose every clock is one clock.Mock.
//
// # Guarantees
//
//   - Virtual time. The clock moves only when the store is idle: no job
//     is pending or claimed in any of the runtime's queues and none is
//     scheduled at or before now. The queue is the one place work waits,
//     so this is the runtime's own account, read from one consistent
//     snapshot (every commit made durable by Queue.Sync, then read by a
//     storage.Reader): reading the live indexes one by one could miss a
//     job moving between them. Only then does the clock jump, to the
//     earliest of the next scheduled job (a sleep, a retry's delay, a
//     wait_signal's timeout) and the next timed signal of the case. A
//     wait for work ends with the job's completion
//     (Queue.WaitForCompletion), never with a sleep, so a 30-day sleep
//     costs what a step costs.
//   - Every action a run calls (in the case's run and its child runs)
//     goes through the case's mocks: a step's mock, else its action's;
//     attempt n gets the mock's n-th reply, the last repeating. An action
//     with no mock fails the case with a message naming the step and the
//     action (its attempt fails with a validation error), unless
//     Options.Real gives the real actions. sleep and wait_signal are the
//     interpreter's own and run on the virtual clock.
//   - A case's signals are sent by the runtime's Signal, as tqw-dsl signal
//     sends them: a timed one once the clock reaches it and the store is
//     idle, the others as soon as the store is idle and a run waits on
//     their key (or in their step), in file order per key. A signal never
//     sent fails the case.
//   - The expectations are checked against durable records: the run's
//     status, result and error (runtime Status), its history (path,
//     attempts, the failing step's error type) and its variables after its
//     last step (the interpreter's end event).
//
// # Costs
//
// No object-store request leaves the process: the store is in memory and
// is dropped with the case. Each idle check costs a Sync (a WAL PUT to
// memory when a commit is pending) and the Reader's Refresh (the new WAL
// objects' GETs, in memory). Wall time is that of the steps themselves.
package wftest
