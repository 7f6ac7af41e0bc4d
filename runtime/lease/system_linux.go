//go:build linux

package lease

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// platformSelf reads this process's boot id, pid namespace, start time
// and the machine's boot time from /proc; what cannot be read stays empty.
func platformSelf(pid int) (bootID, pidNS string, start uint64, boot time.Time) {
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		bootID = strings.TrimSpace(string(b))
	}
	if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil {
		pidNS = ns
	}
	if _, s, err := readStat(pid); err == nil {
		start = s
	}
	if f, err := os.Open("/proc/stat"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
				if sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					boot = time.Unix(sec, 0)
				}
				break
			}
		}
		_ = f.Close()
	}
	return bootID, pidNS, start, boot
}

// probeProcess reports whether pid runs and its start time.
func probeProcess(pid int) (uint64, bool, error) {
	if pid <= 0 {
		return 0, false, fmt.Errorf("lease: probe pid %d: not a process id", pid)
	}
	state, start, err := readStat(pid)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	// A zombie (Z) or dead (X) process holds nothing any more.
	return start, state != 'Z' && state != 'X', nil
}

// readStat returns the state (field 3) and start time (field 22) of
// /proc/PID/stat. The command name (field 2) is parenthesized and may hold
// spaces and parentheses, so fields are counted after its last ')'.
func readStat(pid int) (byte, uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseStat(b)
}

func parseStat(b []byte) (byte, uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("lease: /proc stat %.40q: no command name", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("lease: /proc stat %.40q: %d fields after the command name, want at least 20", b, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("lease: /proc stat start time %q: %w", f[19], err)
	}
	return f[0][0], start, nil
}
