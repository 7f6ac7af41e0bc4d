//go:build !linux

package supervisor

import "syscall"

// WithParentDeathSignal returns attr unchanged: only Linux has a
// parent-death signal; elsewhere the supervisor's lifeline pipe alone ends
// a command whose worker died.
func WithParentDeathSignal(attr *syscall.SysProcAttr, _ syscall.Signal) *syscall.SysProcAttr {
	return attr
}
