package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// TestFlock covers the file-store variant in one process: the lock is
// exclusive per open file, valid while held, Live reports its holder
// without taking it, a lease object holder counts too, and Release frees
// it.
func TestFlock(t *testing.T) {
	ctx := context.Background()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	a, err := Acquire(ctx, fs, Options{Owner: "a", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if m := a.Info().Mechanism; m != MechanismFlock {
		t.Fatalf("mechanism %q on a file store, want flock", m)
	}
	if err := a.AwaitValid(ctx, time.Hour); err != nil || a.State() != Valid || a.Renew(ctx) != nil {
		t.Fatalf("a held flock: AwaitValid %v, state %v", err, a.State())
	}
	_, err = Acquire(ctx, fs, Options{Owner: "b", Logger: quiet()})
	wantActive(t, err, "a")
	info, live, err := Live(ctx, fs, Options{})
	if err != nil || !live || info.Owner != "a" || info.Mechanism != MechanismFlock || info.PID != os.Getpid() {
		t.Fatalf("Live = %+v, %v, %v", info, live, err)
	}
	release(t, a)
	if err := a.AwaitValid(ctx, 0); !errors.Is(err, ErrLost) {
		t.Fatalf("AwaitValid after Release: %v", err)
	}

	// A lease object holder elsewhere counts on a file store too.
	obj, err := Acquire(ctx, fs, Options{Owner: "o", ObjectLease: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(ctx, fs, Options{Owner: "b", Logger: quiet()})
	wantActive(t, err, "o")
	release(t, obj)
	b, err := Acquire(ctx, fs, Options{Owner: "b", Logger: quiet()})
	if err != nil {
		t.Fatalf("acquire after both released: %v", err)
	}
	release(t, b)
	if _, live, _ := Live(ctx, fs, Options{}); live {
		t.Fatal("released flock reported live")
	}
}

const childEnv = "TQW_TEST_LEASE_CHILD" // "<mechanism>:<folder>"; set only in the child

func TestMain(m *testing.M) {
	crashtest.IfChild(childEnv, holdLease)
	os.Exit(m.Run())
}

// holdLease is the child process of the kill tests: it takes the lease on
// the folder with the mechanism ("flock" or "object") spec names, says so,
// and waits to be killed.
func holdLease(spec string) error {
	mechanism, dir, _ := strings.Cut(spec, ":")
	fs, err := file.Open(dir)
	if err != nil {
		return err
	}
	held, err := Acquire(context.Background(), fs, Options{Owner: "child", ObjectLease: mechanism == MechanismObject})
	if err != nil {
		return err
	}
	fmt.Println("holding")
	// Wait to be killed, keeping the lease referenced (its lock file's
	// finalizer would drop the flock). A bare select{} can end the child
	// as a deadlock once no timer is pending.
	for {
		time.Sleep(time.Hour)
		runtime.KeepAlive(held)
	}
}

// startHolder starts a child holding the lease (with mechanism) on a new
// folder, waits until it holds it, and opens the folder for the test.
func startHolder(t *testing.T, mechanism string) (*crashtest.Child, *file.Store) {
	t.Helper()
	dir := t.TempDir()
	c := crashtest.Start(t, crashtest.Command(context.Background(), "^$", childEnv+"="+mechanism+":"+dir))
	if err := c.WaitReady("holding"); err != nil {
		t.Fatal(err)
	}
	fs, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Close() })
	return c, fs
}

func kill(t *testing.T, c *crashtest.Child) {
	t.Helper()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
}

// TestFlockKill checks that a holder killed with SIGKILL drops its file
// lock at once: the next holder takes over without waiting.
func TestFlockKill(t *testing.T) {
	ctx := context.Background()
	child, fs := startHolder(t, MechanismFlock)
	_, err := Acquire(ctx, fs, Options{Owner: "parent", Logger: quiet()})
	var active *ActiveError
	if !errors.As(err, &active) || active.Holder.Owner != "child" || active.Holder.PID != child.Pid() {
		t.Fatalf("acquire while the child holds the lock: %v; want the child (pid %d) named", err, child.Pid())
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(child.Pid())) {
		t.Fatalf("error does not name the holder's pid: %v", err)
	}
	kill(t, child)
	if _, live, err := Live(ctx, fs, Options{}); err != nil || live {
		t.Fatalf("Live after the kill = %v, %v; want none", live, err)
	}
	l, err := Acquire(ctx, fs, Options{Owner: "parent", Logger: quiet()})
	if err != nil {
		t.Fatalf("acquire after the holder was killed: %v", err)
	}
	release(t, l)
}

// TestObjectKill checks the dead-process rule with real processes: a
// lease object holder on this machine that was killed is replaced at
// once, although its lease has most of its TTL left.
func TestObjectKill(t *testing.T) {
	if OS().Self().BootID == "" {
		t.Skip("no boot id on this platform: a killed holder is replaced after its TTL")
	}
	ctx := context.Background()
	child, fs := startHolder(t, MechanismObject)
	o := Options{Owner: "parent", ObjectLease: true, NoWait: true, Logger: quiet()}
	_, err := Acquire(ctx, fs, o)
	if active := wantActive(t, err, "child"); active.Holder.PID != child.Pid() || active.Holder.PIDStart == 0 {
		t.Fatalf("holder %+v, want pid %d with its start time", active.Holder, child.Pid())
	}
	kill(t, child)
	l, err := Acquire(ctx, fs, o)
	if err != nil {
		t.Fatalf("acquire after the holder was killed: %v", err)
	}
	defer release(t, l)
	want := fmt.Sprintf("its process (pid %d) is gone", child.Pid())
	if from, reason, took := l.TookOver(); !took || from.Owner != "child" || reason != want {
		t.Fatalf("TookOver = %s, %q, %v; want %q", from, reason, took, want)
	}
}
