package archive

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// A Bloom filter of 16 bits per entry and 11 probes errs (says "may
// contain" of a string never added) about once in 2,000 queries. Its
// size is a power of two bytes, at least 32, at most maxBloomBytes.
const (
	bloomBitsPerEntry = 16
	bloomProbes       = 11
	maxBloomBytes     = 1 << 24
)

// newBloom returns the bits and probe count of a filter holding entries.
func newBloom(entries []string) ([]byte, uint8) {
	size := 32
	for size*8 < bloomBitsPerEntry*len(entries) && size < maxBloomBytes {
		size *= 2
	}
	bits := make([]byte, size)
	for _, e := range entries {
		h1, h2 := bloomHashes(e)
		for i := range uint64(bloomProbes) {
			bit := probe(h1, h2, i) & uint64(size*8-1)
			bits[bit/8] |= 1 << (bit % 8)
		}
	}
	return bits, bloomProbes
}

// bloomHashes derives the two hashes of double hashing from one 64-bit
// hash; the second is odd, so the probes cycle through every bit.
func bloomHashes(s string) (uint64, uint64) {
	h := xxhash.Sum64String(s)
	return h, (h>>32 | h<<32) | 1
}

// probe is the i-th bit position: enhanced double hashing (Kirsch and
// Mitzenmacher), whose cubic term keeps probes apart in small filters.
func probe(h1, h2, i uint64) uint64 { return h1 + i*h2 + (i*i*i-i)/6 }

func bloomHas(bits []byte, probes uint8, s string) bool {
	h1, h2 := bloomHashes(s)
	mask := uint64(len(bits)*8 - 1)
	for i := range uint64(probes) {
		bit := probe(h1, h2, i) & mask
		if bits[bit/8]&(1<<(bit%8)) == 0 {
			return false
		}
	}
	return true
}

// checkBloom reports whether bits and probes make a filter bloomHas can
// query.
func checkBloom(bits []byte, probes uint8) error {
	if len(bits) == 0 && probes == 0 {
		return nil
	}
	n := len(bits)
	if n < 32 || n > maxBloomBytes || n&(n-1) != 0 {
		return fmt.Errorf("label filter of %d bytes: want a power of two from 32 to %d", n, maxBloomBytes)
	}
	if probes < 1 || probes > 32 {
		return errors.New("label filter probe count out of range")
	}
	return nil
}
