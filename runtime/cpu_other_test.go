//go:build !unix

package runtime

// processCPU is unavailable here; the benchmark's CPU metric reads 0.
func processCPU() int64 { return 0 }
