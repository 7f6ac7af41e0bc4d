package supervisor

import "syscall"

// WithParentDeathSignal returns attr (a new one when nil) with sig as the
// signal the child gets when the thread that started it exits. Callers
// start the child from a thread that stays locked while the child lives.
func WithParentDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Pdeathsig = sig
	return attr
}
