// Package dslgen generates synthetic, valid workflow files of any size for
// benchmarks (tqw-bench dsl, BenchmarkParse1000) and fuzz seeds. Every step
// carries expressions that differ from step to step, so a loader cannot
// serve them from a cache. It does no I/O and makes no store requests.
package dslgen
