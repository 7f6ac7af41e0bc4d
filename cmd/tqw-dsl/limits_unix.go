//go:build unix

package main

import "syscall"

// raiseFileLimit raises the soft limit of open files to the hard limit
// (connections and the store's files share it) and returns the limit.
func raiseFileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		up := rl
		up.Cur = up.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up); err == nil {
			rl = up
		}
	}
	return rl.Cur, nil
}

// freeBytes is the space an unprivileged process may still write in the
// filesystem holding dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
