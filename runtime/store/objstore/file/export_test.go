package file

// Test hooks for the external test package (the kill tests' children).

// SetSegmentSize makes every new segment of s's packed folders n bytes.
func SetSegmentSize(s *Store, n int64) { s.segMin, s.segMax = n, n }

// TornTail reports whether the last segment of the packed folder prefix
// ends in bytes that are not a record (a write torn by a kill), and how
// many segments the folder has.
func TornTail(s *Store, prefix string) (torn bool, segments int, err error) {
	p, err := s.packedFor(prefix)
	if err != nil || p == nil {
		return false, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refreshLocked(true); err != nil {
		return false, 0, err
	}
	if len(p.segs) == 0 {
		return false, 0, nil
	}
	return p.segs[len(p.segs)-1].stopped == stopJunk, len(p.segs), nil
}
