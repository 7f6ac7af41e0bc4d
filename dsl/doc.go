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
//  3. Semantics: step kinds and the keys each allows, step references,
//     reachability, expressions (expr-lang, compiled once here against the
//     environment of the place they are written), secrets, error types,
//     durations, embedded JSON Schemas.
//
// A Workflow is immutable and safe for concurrent use. Its compiled
// expressions and templates evaluate against an Env the caller fills; they
// never read the clock or a random source except through Env.Now and
// Env.UUID.
//
// Costs: no object-store requests and no I/O besides Load reading the file.
// Loading a 1,000-step workflow takes tens of milliseconds (see
// docs/BENCHMARKS.md, section dsl); schema validation runs in parallel with
// the semantic checks.
//
// What it does not do: it does not run workflows (package interpreter
// does), does not resolve call.workflow paths (the interpreter resolves
// them relative to the calling file) and does not evaluate templates at
// load time.
package dsl
