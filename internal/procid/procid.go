package procid

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Identity names one process.
type Identity struct {
	Host   string `json:"host,omitempty" msgpack:"h,omitempty"`
	BootID string `json:"boot_id,omitempty" msgpack:"b,omitempty"`
	PID    int    `json:"pid,omitempty" msgpack:"p,omitempty"`
	// Start is the process's start time in clock ticks since boot, as
	// /proc/<pid>/stat field 22 says ("" where unknown).
	Start string `json:"pid_start,omitempty" msgpack:"s,omitempty"`
}

var (
	selfOnce sync.Once
	self     Identity
)

// Self returns the calling process's identity.
func Self() Identity {
	selfOnce.Do(func() {
		self.Host, _ = os.Hostname()
		self.BootID = bootID()
		self.PID = os.Getpid()
		self.Start = startTime(self.PID)
	})
	return self
}

// Dead reports whether the process id names has certainly exited; known
// is false when that cannot be told from here (another host, no /proc).
func (id Identity) Dead() (dead, known bool) {
	me := Self()
	if id.Host == "" || id.Host != me.Host || id.PID <= 0 {
		return false, false
	}
	if id.BootID != "" && me.BootID != "" && id.BootID != me.BootID {
		return true, true // the machine rebooted since
	}
	if id.PID == me.PID && id.Start == me.Start {
		return false, true
	}
	switch err := syscall.Kill(id.PID, 0); {
	case errors.Is(err, syscall.ESRCH):
		return true, true
	case err != nil && !errors.Is(err, syscall.EPERM):
		return false, false
	}
	if id.Start == "" {
		return false, true // alive as far as can be told
	}
	now := startTime(id.PID)
	if now == "" {
		// It exited between the two looks, or /proc is gone: say so only
		// when the pid is gone for sure.
		return errors.Is(syscall.Kill(id.PID, 0), syscall.ESRCH), true
	}
	return now != id.Start, true
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// startTime reads field 22 of /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may hold spaces and parentheses, so fields are
// counted after its last ')'.
func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// After the name: field 3 (state) is f[0], so field 22 is f[19].
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
