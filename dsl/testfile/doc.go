// Package testfile reads the test files of tqw workflows: NAME.test.yaml
// beside NAME.tqw.yaml (or NAME.yaml), the cases `tqw-dsl test` runs
// (package interpreter/wftest runs them; docs/TESTING.md is the
// reference). Each case gives an input, mocks for the actions the run
// calls, signals on a virtual clock and what the run must do.
//
// Guarantees: Parse never panics and reports every problem as a
// dsl.Diagnostic at the file:line:col of the value it concerns, with a
// code (test.* and the yaml.* codes of package dsl): first the YAML, then
// the JSON Schema schemas/workflow-test.schema.json (the one statement of
// the format's shape, also used by editors), then the rules the schema
// cannot say (durations, times, unique case names, the result schema
// compiling). Check adds the problems only the workflow under test
// reveals: a mocked, signalled or expected step id that names no step, or
// a step of the wrong kind. A file with an error yields no File.
//
// Load is Parse and Check in one, reading the workflow under test and the
// workflows it calls from disk: the one check that tqw-dsl validate,
// tqw-dsl test and the language server make of a test file.
//
// Cost: no object-store request; Parse reads only the bytes it is given,
// at most dsl.DefaultLimits.MaxFileBytes; Load reads each workflow file
// once (at most 100 of a call tree).
package testfile
