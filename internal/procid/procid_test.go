package procid

import (
	"os"
	"os/exec"
	"testing"
)

func TestSelfIsAlive(t *testing.T) {
	me := Self()
	if me.PID != os.Getpid() || me.Host == "" {
		t.Fatalf("Self() = %+v", me)
	}
	if dead, known := me.Dead(); dead || !known {
		t.Fatalf("Self().Dead() = %v, %v; want alive and known", dead, known)
	}
}

func TestExitedProcessIsDead(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip("no true(1):", err)
	}
	id := Identity{Host: Self().Host, BootID: Self().BootID, PID: cmd.Process.Pid, Start: startTime(cmd.Process.Pid)}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if dead, known := id.Dead(); !dead || !known {
		t.Fatalf("Dead() of an exited process = %v, %v; want dead and known", dead, known)
	}
}

func TestReusedPidIsDead(t *testing.T) {
	me := Self()
	if me.Start == "" {
		t.Skip("no /proc start times here")
	}
	other := me
	other.Start = me.Start + "0" // the pid, started at another time
	if dead, known := other.Dead(); !dead || !known {
		t.Fatalf("Dead() with another start time = %v, %v; want dead", dead, known)
	}
}

func TestRebootIsDead(t *testing.T) {
	me := Self()
	if me.BootID == "" {
		t.Skip("no boot id here")
	}
	other := me
	other.BootID = "another-boot"
	if dead, known := other.Dead(); !dead || !known {
		t.Fatalf("Dead() after a reboot = %v, %v; want dead", dead, known)
	}
}

func TestOtherHostUnknown(t *testing.T) {
	other := Self()
	other.Host += "-elsewhere"
	if dead, known := other.Dead(); dead || known {
		t.Fatalf("Dead() on another host = %v, %v; want unknown", dead, known)
	}
}
