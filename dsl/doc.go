// Package dsl loads tqw workflow files: YAML in, a typed, validated and
// compiled *Workflow out, or diagnostics that say what is wrong, where
// (file:line:col) and what to do.
//
// Loading runs in stages, each reporting every problem it finds:
//
//  1. Bounds and YAML: files above Limits.MaxFileBytes, duplicate keys,
//     merge keys, unknown tags, nesting deeper than Limits.MaxDepth and
//     aliases that expand beyond Limits.MaxAliasNodes are rejected. The
//     file is read with go.yaml.in/yaml/v3's Node API, so every value keeps
//     its position; aliases are shared, never copied.
//  2. Schema: the document is validated against the embedded JSON Schema
//     (package schemas). Each error is mapped back to the position of the
//     value it concerns and, under with:, names the action.
//  3. Semantics, only for a file that passed the schema: step kinds and
//     the keys each allows, step references, reachability, expressions
//     (expr-lang, each distinct source compiled once per load, then
//     checked against the environment of the place it is written),
//     secrets, error types, durations, embedded JSON Schemas. An expression
//     whose brackets nest deeper than 256 levels is an error before expr
//     parses it (its parser would recurse once per level). These checks
//     never assume what the schema guarantees and do not panic on any
//     tree (FuzzRules); a panic would be a loader bug and is reported as
//     an internal diagnostic rather than crashing the caller.
//
// A Workflow is immutable and safe for concurrent use. Its compiled
// expressions and templates evaluate against an Env the caller fills; they
// never read the clock or a random source except through Env.Now and
// Env.UUID.
//
// Costs: no object-store requests and no I/O besides Load reading the file.
// A file under 128 KiB loads on the caller's goroutine. A larger one uses
// every core (GOMAXPROCS): while the YAML is parsed, a goroutine compiles
// the expressions a scan of the raw text finds; then schema validation
// runs on one goroutine while the caller's compiles what is left (on up
// to GOMAXPROCS goroutines) and runs the rule checks. The result,
// diagnostics included, is exactly that of a sequential load (the rule
// checks' findings are dropped when the schema fails). The load waits for
// the work it hands out, not for the goroutines: on a busy machine a
// goroutine not yet scheduled when the load returns finds nothing left
// and ends, and the speculative compiler at most finishes the expression
// it was compiling. A 1,000-step (222 KB) workflow costs about 60 ms of
// CPU, garbage collection included, and allocates about 23 MB; with a
// second core free it loads in about 35 ms instead of 45
// (docs/BENCHMARKS.md, section dsl). Two thirds of the work is in
// go.yaml.in/yaml/v3, the JSON Schema validator and expr-lang.
//
// What it does not do: it does not run workflows (package interpreter
// does), does not resolve call.workflow paths (the interpreter resolves
// them relative to the calling file) and does not evaluate templates at
// load time.
package dsl
