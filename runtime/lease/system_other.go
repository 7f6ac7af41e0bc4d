//go:build !linux

package lease

import (
	"errors"
	"time"
)

// platformSelf knows nothing beyond the host name and pid here: the
// takeover rules that need a boot id do not apply, and a holder is
// replaced only after its TTL.
func platformSelf(int) (string, string, uint64, time.Time) { return "", "", 0, time.Time{} }

func probeProcess(int) (uint64, bool, error) {
	return 0, false, errors.New("lease: process probing needs Linux's /proc")
}
