//go:build !linux

package main

// fsType returns "unknown": the filesystem type is only read on Linux.
func fsType(string) string { return "unknown" }
