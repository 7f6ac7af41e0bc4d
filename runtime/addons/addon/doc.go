// Package addon holds what the add-ons over the runtime (jobs, bulk)
// share: the options of their runners, declared once, and the one way a
// runner opens its runtime from them. jobs and bulk re-export the options
// under their own names (jobs.WithLogger returns addon.WithLogger), so
// callers import only the add-on they use.
//
// Guarantees: Options.Check rejects settings a runner cannot work with
// before anything opens; Options.NewRuntime gives the runner's own queue
// name, attempts, concurrency and terminal hook precedence over the same
// settings passed through WithRuntimeOptions.
//
// Cost: none of its own. It makes no object-store request; the runtime it
// opens costs what package runtime says.
package addon
