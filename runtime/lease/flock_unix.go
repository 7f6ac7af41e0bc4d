//go:build unix

package lease

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// tryFlock takes flock(2) on f without blocking, exclusive or shared. busy
// reports that another open file description holds a conflicting lock; an
// interrupted call counts as busy so the caller's retry loop tries again.
func tryFlock(f *os.File, exclusive bool) (busy bool, err error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) || errors.Is(err, unix.EINTR) {
		return true, nil
	}
	return false, err
}

// unflock drops a lock tryFlock took.
func unflock(f *os.File) { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }
