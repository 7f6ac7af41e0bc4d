//go:build !unix

package main

// processCPU is not measured on this platform; -1 leaves the CPU fields
// (cpu_ms_per_op, cpu_us_per_step) out.
func processCPU() int64 { return -1 }
