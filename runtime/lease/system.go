package lease

import (
	"os"
	"sync"
	"time"
)

// Process identifies a lease holder for the takeover rules. An empty field
// is unknown, and a rule that needs it does not apply.
type Process struct {
	// Host is the host name (os.Hostname).
	Host string
	// BootID changes at every boot of the machine (Linux:
	// /proc/sys/kernel/random/boot_id).
	BootID string
	// PIDNamespace names the pid namespace PID lives in (Linux: the
	// target of /proc/self/ns/pid), so processes in two containers of one
	// machine never judge each other's pids.
	PIDNamespace string
	PID          int
	// Start is the process's start time in clock ticks after boot (Linux:
	// field 22 of /proc/PID/stat); a pid that runs with another start
	// time was reused.
	Start uint64
}

// System is what the takeover rules ask the operating system. Tests
// substitute it; the default reads Linux's /proc and knows only the host
// name and pid elsewhere.
type System interface {
	// Self describes this process.
	Self() Process
	// BootTime is when this machine booted (zero when unknown).
	BootTime() time.Time
	// Probe reports whether pid runs (a zombie does not) and its start
	// time; an error means it cannot tell.
	Probe(pid int) (start uint64, running bool, err error)
}

// OS returns the System of this machine.
func OS() System { return osSystem{} }

type osSystem struct{}

var (
	selfOnce sync.Once
	self     Process
	bootTime time.Time
)

func loadSelf() {
	self = Process{PID: os.Getpid()}
	self.Host, _ = os.Hostname()
	self.BootID, self.PIDNamespace, self.Start, bootTime = platformSelf(self.PID)
}

func (osSystem) Self() Process {
	selfOnce.Do(loadSelf)
	return self
}

func (osSystem) BootTime() time.Time {
	selfOnce.Do(loadSelf)
	return bootTime
}

func (osSystem) Probe(pid int) (uint64, bool, error) { return probeProcess(pid) }
