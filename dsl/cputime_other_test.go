//go:build !unix

package dsl

// processCPU is not measured here; -1 makes the benchmark omit the metric.
func processCPU() int64 { return -1 }
