//go:build !unix

package lease

import (
	"errors"
	"os"
)

// tryFlock reports that this platform has no flock(2): file stores there
// use the lease object (Options.ObjectLease).
func tryFlock(*os.File, bool) (bool, error) {
	return false, errors.New("flock is not available on this platform; use Options.ObjectLease")
}

func unflock(*os.File) {}
