// Command tqw-bench measures tqw's layers against any store URL and prints one
// JSON object per measurement on stdout, e.g.
//
//	tqw-bench objstore --store file:///tmp/b --concurrency 1,16 --duration 5s
//
// Every subcommand takes --store (repeatable), --concurrency (repeatable or
// comma-separated), and --duration or --ops. Subcommands register themselves
// from their own files with register: objstore, kv, queue, runtime,
// interpreter, dsl, peers (tqw against DBOS on SQLite, from bench/dbos),
// scale (cost of new runs as sealed runs pile up, with a PNG plot), server
// and signal (the HTTP API of a real `tqw-dsl serve`) and signal-latency
// (a signal through the store's inbox to a live worker).
// They share the plumbing in measure.go: opening each store, the worker loop
// with a shared operation counter (measure), building a Result with requests
// per op, and deleting a run's prefix afterwards.
// Figures, with the commands that produced them, live in
// docs/BENCHMARKS.md#summary.
package main
