// Package engine is the one door for a Go program that embeds tqw: open
// an engine on a store URL, register custom actions once (with the with
// schema they declare), start its worker, submit workflows and await
// their outcomes.
//
//	e, err := engine.Open(ctx, "file://./store", engine.Options{Actions: []actions.Action{myAction}})
//	defer e.Close()
//	w, err := e.Load("workflow.tqw.yaml")
//	e.Start(ctx)
//	o, err := e.Run(ctx, w, input)
//
// What it wires, so the embedder does not: the store (storeurl), the
// store's writer lease (runtime/lease), the queue, the step runtime with
// the lease gate (no step starts unless the lease is locally valid), the
// interpreter with the built-in actions plus the given ones, the
// retention sweep with sealing (a finished run's status, history and
// outputs move into immutable segment objects once its end is handled,
// so memory holds active runs and bounded caches, not the retained
// history; Options.KeepFinishedInKV turns it off), and the store inbox,
// so `tqw-dsl status`, `signal`, `cancel` and `submit` run from other
// processes reach this one.
//
// With Options.TracerProvider set (tracing.FromEnv builds one from the
// OTEL_* environment), runs, steps and the http and llm actions' requests
// are traced (see package tracing); Close ends the spans of runs still
// open, and the caller then shuts the provider down to flush them.
//
// Guarantees: those of the layers below (a step reported complete is
// durable; a run's outcome reaches Await only once its commit is durable).
// An Engine is the store's only writer while it is open: Open fails with
// an error wrapping *lease.ActiveError when another live process holds
// the store. Store wrappers (counting, faults) are transparent to the
// lease: a wrapped file store still takes the flock.
//
// Costs in object-store requests: Open costs the queue's reopen (one GET
// of the kv manifest, one LIST of the WAL plus one GET per WAL object
// after the last checkpoint) and the lease's (on a file store a flock and
// one PUT; elsewhere a GET and a PUT, then one PUT per renewal, every
// TTL/3: 12 a minute at the default TTL). The inbox costs one LIST per
// poll while idle (see runtime/remote). Steps cost what the runtime and
// the interpreter state (a durable commit per step, batched across
// concurrent steps). Sealing, as runs end (a segment once 512 runs ended
// or 2 s after the first of them), costs per segment two create-only PUTs
// and one durable commit (runtime's doc). Close drains the worker and makes everything
// durable before it releases the lease.
//
// Finished runs are sealed into segments (runtime's doc), so a reopened
// engine's heap, its reopen time, a first page of the run list
// (unfiltered, or by state, workflow or label) and the CPU per step of new
// runs do not grow with the runs retained, while every retained run's
// status, result, history and outputs stay readable (figures, with
// 1,000,000 retained: docs/BENCHMARKS.md#scale-yaml-path).
package engine
