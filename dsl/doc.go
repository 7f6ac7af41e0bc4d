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
//     secrets, error types, durations, embedded JSON Schemas, and the
//     places of a shell script's ${ } pieces (shellscan.go). An
//     expression whose brackets nest deeper than 256 levels is an error
//     before expr parses it (its parser would recurse once per level).
//     These checks never assume what the schema guarantees and do not
//     panic on any tree (FuzzRules); a panic would be a loader bug and is
//     reported as an internal diagnostic rather than crashing the caller.
//
// Every diagnostic has a start and an exclusive end: the YAML token at its
// position (a key, a scalar with its quotes, a flow collection). Lines
// count from 1 and columns count Unicode code points from 1, as
// go.yaml.in/yaml/v3 reports them. ParseOutline reads, from the YAML
// alone, what editors navigate by: where each step is defined and every
// place a step id or a secret is named (package dsl/lsp serves it).
// ActionInfo, ErrorTypeDocs, ExprNames and ExprFunctions document the
// built-in actions, error types and expression names for editors.
//
// The published schema (package schemas) also expresses rules for editors
// that the rule checks report with more precise messages (step kinds and
// their keys, the closed sets of actions and error types, when without
// ${ }, wait_signal's timeout); the loader validates with the same
// document less those rules (loaderRelaxed), so its diagnostics keep
// their codes.
//
// A Workflow is immutable and safe for concurrent use. Its compiled
// expressions and templates evaluate against an Env the caller fills; they
// never read the clock or a random source except through Env.Now and
// Env.UUID.
//
// Costs: no object-store requests and no I/O besides Load reading the file.
// A load runs on the caller's goroutine: parse, schema validation, rule
// checks and expression compilation, in that order (a file that fails the
// schema is not rule-checked). Most of a load's CPU is in
// go.yaml.in/yaml/v3, the JSON Schema validator and expr-lang. An earlier
// version overlapped them on several goroutines; it was removed as not
// worth its complexity (figures: docs/BENCHMARKS.md#dsl).
//
// Shell scripts: the with of a shell step whose command is a string
// compiles to a template that renders each ${ } as a reference to an
// environment variable it adds to env (TQW_ARG_n), quoted for the piece's
// place in the script, so a value is one word and never code; raw(x)
// inserts text where the file asks for code. See docs/DSL.md.
//
// What it does not do: it does not run workflows (package interpreter
// does), does not resolve call.workflow paths (the interpreter resolves
// them relative to the calling file) and does not evaluate templates at
// load time.
package dsl
