//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// lockStore takes the writer lock of a file:// store: an exclusive OS lock
// on <dir>/tqw-writer.lock, released by release or when the process dies.
// A store of another kind is not locked (release is a no-op).
func lockStore(url string) (release func(), err error) {
	dir, ok := strings.CutPrefix(url, "file://")
	if !ok {
		return func() {}, nil
	}
	if rest, ok := strings.CutPrefix(dir, "localhost/"); ok {
		dir = "/" + rest
	}
	f, err := os.OpenFile(filepath.Join(dir, "tqw-writer.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the writer lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errStoreBusy
		}
		return nil, fmt.Errorf("take the writer lock: %w", err)
	}
	return func() { _ = f.Close() }, nil
}
