//go:build !unix

package runtime

import (
	"errors"
	"os"
)

// tryFlock reports that this platform has no flock(2): file stores there
// use the lease object (WriterLeaseOptions.ObjectLease).
func tryFlock(*os.File, bool) (bool, error) {
	return false, errors.New("flock is not available on this platform; use WriterLeaseOptions.ObjectLease")
}

func unflock(*os.File) {}
