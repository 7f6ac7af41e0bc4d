//go:build !unix

package main

// processCPU is not measured on this platform; -1 leaves cpu_ms_per_op out.
func processCPU() int64 { return -1 }
