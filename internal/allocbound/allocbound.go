// Package allocbound lets tests and fuzz targets bound the heap memory a
// decoder allocates for its input, so a decoder that trusts a declared
// length fails a test instead of a production process. It is imported
// only from _test.go files and makes no object-store requests.
//
// It reads the process-wide count of heap bytes allocated, which the Go
// runtime updates exactly for large allocations and in steps of a span
// (a few KiB) for small ones; other goroutines allocating at the same
// time count too, which the slack in Limit absorbs.
package allocbound

import (
	"runtime/metrics"
	"testing"
)

const allocsMetric = "/gc/heap/allocs:bytes"

// Measure returns the heap bytes the process allocated while f ran.
func Measure(f func()) uint64 {
	s := []metrics.Sample{{Name: allocsMetric}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}

// Limit is what decoding n bytes may allocate: a fixed 1 MiB of slack
// plus 128 bytes per input byte (decoded structures are larger than
// their encoding, but only by a constant factor).
func Limit(n int) uint64 { return 1<<20 + 128*uint64(n) }

// Check runs decode and fails t if it allocated more than Limit(inputLen).
func Check(t testing.TB, inputLen int, decode func()) {
	t.Helper()
	if got, limit := Measure(decode), Limit(inputLen); got > limit {
		t.Fatalf("decoding %d bytes allocated %d bytes, more than the %d allowed: a declared length or count is trusted", inputLen, got, limit)
	}
}
