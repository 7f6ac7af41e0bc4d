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
