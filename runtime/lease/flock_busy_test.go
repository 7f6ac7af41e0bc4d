package lease

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

// TestFlockHolderReportedAtOnce: a lock file held exclusively by a
// writer is reported as its holder after a few checks, not after
// flockBusyWait (every command sent to a live worker on a file store
// paid that wait), while one held only shared, by a Live probe, is
// waited for and taken once the probe lets go. Time is the bubble's.
func TestFlockHolderReportedAtOnce(t *testing.T) {
	dir := t.TempDir()
	fs, err := file.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		a, err := Acquire(ctx, fs, Options{Owner: "a", Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = Acquire(ctx, fs, Options{Owner: "b", Logger: quiet()})
		wantActive(t, err, "a")
		if waited := time.Since(start); waited >= flockBusyWait/4 {
			t.Fatalf("the live holder was reported after %v of bubble time; want a few checks (%d × 20 ms), not flockBusyWait %v", waited, flockHeldChecks, flockBusyWait)
		}
		release(t, a)

		// A probe's shared lock, held for a while, is waited out.
		probe, err := os.Open(filepath.Join(dir, DefaultLockFile))
		if err != nil {
			t.Fatal(err)
		}
		if busy, err := tryFlock(probe, false); busy || err != nil {
			t.Fatalf("shared lock: busy %v, %v", busy, err)
		}
		released := make(chan struct{})
		go func() {
			defer close(released)
			time.Sleep(flockBusyWait / 2)
			unflock(probe)
		}()
		b, err := Acquire(ctx, fs, Options{Owner: "b", Logger: quiet()})
		if err != nil {
			t.Fatalf("Acquire while a probe held the lock shared for %v: %v; want it taken once the probe let go", flockBusyWait/2, err)
		}
		release(t, b)
		<-released
		_ = probe.Close()
	})
}
