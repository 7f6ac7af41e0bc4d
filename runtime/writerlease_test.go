package runtime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/faults"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

func leaseOpts(owner string, clock queue.Clock) WriterLeaseOptions {
	return WriterLeaseOptions{Owner: owner, Host: "host-" + owner, PID: 100, Clock: clock, Logger: ibxLogger()}
}

func wantActive(t *testing.T, err error, holder string) {
	t.Helper()
	var active *WriterActiveError
	if !errors.Is(err, ErrWriterActive) || !errors.As(err, &active) {
		t.Fatalf("err = %v; want a WriterActiveError", err)
	}
	if active.Holder.Owner != holder {
		t.Fatalf("holder %q, want %q (%v)", active.Holder.Owner, holder, err)
	}
}

// TestWriterLeaseObject covers the lease object: acquire, refusal while
// live, renewal (by the background loop on the clock), expiry of a dead
// holder, takeover, Lost for the old holder, release.
func TestWriterLeaseObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := counting.New(mem.New())
	clockA := queue.NewMockClock(ibxStart)
	a, err := AcquireWriterLease(ctx, store, leaseOpts("a", clockA))
	if err != nil {
		t.Fatal(err)
	}
	if info := a.Info(); info.Mechanism != "object" || !info.Expires.Equal(ibxStart.Add(DefaultWriterLeaseTTL)) {
		t.Fatalf("lease info %+v", info)
	}

	clockB := queue.NewMockClock(ibxStart.Add(10 * time.Second))
	_, err = AcquireWriterLease(ctx, store, leaseOpts("b", clockB))
	wantActive(t, err, "a")
	info, live, err := LiveWriter(ctx, store, WriterLeaseOptions{Clock: clockB})
	if err != nil || !live || info.Owner != "a" || info.Host != "host-a" {
		t.Fatalf("LiveWriter = %+v, %v, %v; want a live", info, live, err)
	}

	// The background loop renews every TTL/3 on A's clock: one PUT each.
	store.Reset()
	if err := clockA.WaitForTimers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clockA.Advance(20 * time.Second)
	if err := clockA.WaitForTimers(ctx, 1); err != nil { // re-armed after the renewal
		t.Fatal(err)
	}
	if c := store.Counts(); c.Puts != 1 || c.Gets != 0 {
		t.Fatalf("one renewal cost %+v, want one PUT", c)
	}
	if got := a.Info().Expires; !got.Equal(ibxStart.Add(80 * time.Second)) {
		t.Fatalf("expiry after renewal %v", got)
	}

	// A stops renewing (its process died: its clock no longer moves). Up
	// to the expiry B is refused, after it B takes over.
	clockB.Set(ibxStart.Add(79 * time.Second))
	_, err = AcquireWriterLease(ctx, store, leaseOpts("b", clockB))
	wantActive(t, err, "a")
	clockB.Set(ibxStart.Add(81 * time.Second))
	if _, live, _ := LiveWriter(ctx, store, WriterLeaseOptions{Clock: clockB}); live {
		t.Fatal("an expired lease reported live")
	}
	b, err := AcquireWriterLease(ctx, store, leaseOpts("b", clockB))
	if err != nil {
		t.Fatalf("takeover of an expired lease: %v", err)
	}

	// A comes back: its renewal fails and Lost fires.
	if err := a.Renew(ctx); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "writer b") {
		t.Fatalf("renewal after a takeover: %v; want ErrLeaseLost naming b", err)
	}
	select {
	case <-a.Lost():
	default:
		t.Fatal("Lost not closed after the takeover")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of a lost lease: %v", err)
	}
	if info, live, _ := LiveWriter(ctx, store, WriterLeaseOptions{Clock: clockB}); !live || info.Owner != "b" {
		t.Fatalf("A's release disturbed B's lease: %+v live=%v", info, live)
	}

	// B releases: the lease is free at once, well before its expiry.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, live, _ := LiveWriter(ctx, store, WriterLeaseOptions{Clock: clockB}); live {
		t.Fatal("a released lease reported live")
	}
	c, err := AcquireWriterLease(ctx, store, leaseOpts("c", clockB))
	if err != nil {
		t.Fatalf("acquire after a release: %v", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

// TestWriterLeaseLostResponses checks that acquire and renew recognise
// their own write when the store performed it but lost the response.
func TestWriterLeaseLostResponses(t *testing.T) {
	ctx := context.Background()
	store := faults.New(mem.New(), 1)
	clock := queue.NewMockClock(ibxStart)
	store.Set(faults.Rule{Ops: faults.OpPut, Nth: 1, LoseResponse: true})
	l, err := AcquireWriterLease(ctx, store, leaseOpts("a", clock))
	if err != nil {
		t.Fatalf("acquire with a lost response: %v", err)
	}
	store.Set(faults.Rule{Ops: faults.OpPut, Nth: 1, LoseResponse: true})
	clock.Advance(20 * time.Second)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew with a lost response: %v", err)
	}
	store.Clear()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after a lost response (stale ETag?): %v", err)
	}
	// A failing store is an error, not a loss.
	store.Set(faults.Rule{Ops: faults.OpPut | faults.OpGet, Rate: 1})
	if err := l.Renew(ctx); err == nil || errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renew on a failing store: %v; want a plain error", err)
	}
	store.Clear()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWriterLeaseUnreadableObjectIsReplaced(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	if _, err := store.Put(ctx, DefaultWriterLeaseKey, []byte("garbage"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := AcquireWriterLease(ctx, store, leaseOpts("a", queue.NewMockClock(ibxStart)))
	if err != nil {
		t.Fatalf("acquire over an unreadable lease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := AcquireWriterLease(ctx, store, WriterLeaseOptions{TTL: time.Second, RenewEvery: time.Second}); err == nil {
		t.Fatal("RenewEvery > TTL/2 accepted")
	}
}

// TestWriterLeaseFlock covers the file-store variant in one process: the
// lock is exclusive per open file, LiveWriter reports its holder without
// taking it, and Release frees it.
func TestWriterLeaseFlock(t *testing.T) {
	ctx := context.Background()
	fs, err := file.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	a, err := AcquireWriterLease(ctx, fs, leaseOpts("a", nil))
	if err != nil {
		t.Fatal(err)
	}
	if m := a.Info().Mechanism; m != "flock" {
		t.Fatalf("mechanism %q on a file store, want flock", m)
	}
	_, err = AcquireWriterLease(ctx, fs, leaseOpts("b", nil))
	wantActive(t, err, "a")
	info, live, err := LiveWriter(ctx, fs, WriterLeaseOptions{})
	if err != nil || !live || info.Owner != "a" || info.Mechanism != "flock" {
		t.Fatalf("LiveWriter = %+v, %v, %v", info, live, err)
	}
	// The lock file is not an object the store lists under the inbox.
	if keys := ibxKeys(t, fs, "inbox"); len(keys) != 0 {
		t.Fatalf("inbox keys %v", keys)
	}
	// A lease object holder elsewhere counts on a file store too.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	obj, err := AcquireWriterLease(ctx, fs, WriterLeaseOptions{Owner: "o", ObjectLease: true, Logger: ibxLogger()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = AcquireWriterLease(ctx, fs, leaseOpts("b", nil))
	wantActive(t, err, "o")
	if err := obj.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := AcquireWriterLease(ctx, fs, leaseOpts("b", nil))
	if err != nil {
		t.Fatalf("acquire after both released: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, live, _ := LiveWriter(ctx, fs, WriterLeaseOptions{}); live {
		t.Fatal("released flock reported live")
	}
}

const leaseChildEnv = "TQW_TEST_LEASE_CHILD_DIR"

// TestWriterLeaseChild is the subprocess of TestWriterLeaseFlockKill: it
// takes the flock lease on the folder, says so, and waits to be killed.
func TestWriterLeaseChild(t *testing.T) {
	dir := os.Getenv(leaseChildEnv)
	if dir == "" {
		t.Skip("subprocess of TestWriterLeaseFlockKill")
	}
	fs, err := file.Open(dir)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	if _, err := AcquireWriterLease(context.Background(), fs, WriterLeaseOptions{Owner: "child"}); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("holding")
	select {}
}

// TestWriterLeaseFlockKill checks that a writer killed with SIGKILL drops
// its file lock at once: the next writer takes over without waiting.
func TestWriterLeaseFlockKill(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterLeaseChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), leaseChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "holding" {
		t.Fatalf("child said %q, %v", line, err)
	}

	fs, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	_, err = AcquireWriterLease(ctx, fs, leaseOpts("parent", nil))
	var active *WriterActiveError
	if !errors.As(err, &active) || active.Holder.Owner != "child" || active.Holder.PID != cmd.Process.Pid {
		t.Fatalf("acquire while the child holds the lock: %v; want the child (pid %d) named", err, cmd.Process.Pid)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("error does not name the holder's pid: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, live, err := LiveWriter(ctx, fs, WriterLeaseOptions{}); err != nil || live {
		t.Fatalf("LiveWriter after the kill = %v, %v; want none", live, err)
	}
	l, err := AcquireWriterLease(ctx, fs, leaseOpts("parent", nil))
	if err != nil {
		t.Fatalf("acquire after the holder was killed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
