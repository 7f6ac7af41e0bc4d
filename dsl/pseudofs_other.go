//go:build !linux

package dsl

import "os"

// pseudoFS is "" off Linux: the regular-file check alone applies.
func pseudoFS(*os.File) string { return "" }
