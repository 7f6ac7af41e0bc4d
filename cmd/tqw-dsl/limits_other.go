//go:build !unix

package main

import "errors"

// raiseFileLimit reports a generous limit where the OS has no
// RLIMIT_NOFILE.
func raiseFileLimit() (uint64, error) { return 1 << 16, nil }

// freeBytes is not known here.
func freeBytes(string) (uint64, error) { return 0, errors.ErrUnsupported }
