// Command dbos is the DBOS Transact peer of `tqw-bench peers`: it runs the
// same 10-step no-op workflow as tqw on DBOS Transact for Go with a SQLite
// system database and prints one JSON line per concurrency level.
//
// It lives in its own Go module so the tqw module never depends on DBOS.
//
// Guarantees: every measured run is a DBOS workflow whose 10 steps are each
// checkpointed by DBOS in the SQLite system database before the next one
// starts; the program checks every run's result and the number of step
// executions, and exits non-zero if any run failed or was short. With the
// default --synchronous FULL every checkpoint is fsynced (WAL mode commits
// sync the WAL), which is the durability tqw gives each commit.
//
// Cost: DBOS writes one row per workflow start, one per step and one update
// per completion, each in its own SQLite write transaction (12 commits per
// run); there is no object store involved.
//
// It does not measure recovery, queues, or Postgres, and each concurrency
// level gets a fresh database so levels do not influence one another.
package main
