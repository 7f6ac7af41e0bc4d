//go:build unix

package main

import "syscall"

// processCPU returns the user and system CPU time this process has used, in
// nanoseconds, or -1 when it cannot be read. The dsl and runtime benchmarks
// report it per op: unlike wall time, other processes do not inflate it.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
