//go:build linux

package lease

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name may hold spaces and parentheses.
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 91223 3133440 414 18446744073709551615"
	state, start, err := parseStat([]byte(line))
	if err != nil || state != 'S' || start != 91223 {
		t.Fatalf("parseStat = %c, %d, %v", state, start, err)
	}
	for _, bad := range []string{"", "4242 no parens", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x"} {
		if _, _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

func TestOSSystem(t *testing.T) {
	sys := OS()
	self := sys.Self()
	if self.PID != os.Getpid() || self.Host == "" {
		t.Fatalf("Self = %+v", self)
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if self.BootID == "" || self.PIDNamespace == "" || self.Start == 0 || sys.BootTime().IsZero() {
		t.Fatalf("Self = %+v, boot time %v: want everything /proc tells", self, sys.BootTime())
	}
	start, running, err := sys.Probe(os.Getpid())
	if err != nil || !running || start != self.Start {
		t.Fatalf("Probe(self) = %d, %v, %v; want running with start %d", start, running, err, self.Start)
	}
	if _, running, err := sys.Probe(1 << 30); err != nil || running {
		t.Fatalf("Probe(no such pid) = %v, %v", running, err)
	}
}
