package kv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
)

const (
	crashChildEnv = "KV_CRASH_CHILD" // store folder; set only in the child
	crashKillsEnv = "KV_CRASH_KILLS" // kills in TestCrashFileSIGKILL; default 200 (50 under -race)
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		os.Exit(crashChild(dir))
	}
	os.Exit(m.Run())
}

// crashChild opens the store as writer and commits durably until killed,
// printing "ack W I" after each commit acknowledged durable.
func crashChild(dir string) int {
	ctx := context.Background()
	s, err := file.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := quietOpts()
	opts.CheckpointWALObjects = 25
	opts.ChunkBytes = 4096
	db, err := Open(ctx, s, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 1
	}
	next := map[int]int{}
	if err := db.Scan(ctx, PrefixRange([]byte("w")), func(k, v []byte) (bool, error) {
		w, _ := strconv.Atoi(string(k[1:3]))
		next[w]++
		return true, nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next[w] + 1; ; i++ {
				err := db.Update(ctx, func(tx *Tx) error {
					if err := tx.Put(fmt.Appendf(nil, "w%02d/%08d", w, i), []byte(strconv.Itoa(i))); err != nil {
						return err
					}
					return tx.Add([]byte("total"), 1)
				})
				if err != nil {
					fmt.Fprintln(os.Stderr, "child commit:", err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "ack %d %d\n", w, i)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return 0
}

// TestCrashFileSIGKILL kills a subprocess doing durable commits on the file
// backend with SIGKILL at random points, then reopens and checks that every
// commit acknowledged durable is present and the state is a prefix of the
// history. KV_CRASH_KILLS sets the number of kills (default 200; 50 under
// -race, where each child takes several times longer to start and run).
func TestCrashFileSIGKILL(t *testing.T) {
	t.Parallel()
	def := 200
	if raceEnabled || testing.Short() { // -short: the edit-test loop
		def = 50
	}
	kills := crashtest.Count(t, crashKillsEnv, def)
	dir := t.TempDir()
	rng := crashtest.Rand(t, 3)
	h := newHistory()
	start := time.Now()
	totalAcks := 0
	for k := range kills {
		tS := time.Now()
		cmd := crashtest.Command(context.Background(), "^$", crashChildEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		c := crashtest.Start(t, cmd)
		t0 := time.Now()
		if rng.IntN(10) == 0 {
			// Kill during startup/Open.
			time.Sleep(crashtest.Delay(rng, 20*time.Millisecond))
		} else {
			want := rng.IntN(40)
			for n := 0; n < want; n++ {
				line, ok := c.Line()
				if !ok {
					break
				}
				var w, i int
				if _, err := fmt.Sscanf(line, "ack %d %d", &w, &i); err != nil {
					t.Fatalf("kill %d: child said %q", k, line)
				}
				h.ack(w, i)
				totalAcks++
			}
		}
		t1 := time.Now()
		if err := c.Kill(); err != nil {
			t.Fatalf("kill %d: %v: %s", k, err, stderr.String())
		}
		// Acks printed before the kill but not yet read are simply not
		// counted: the check below only gets weaker, never wrong.
		s, err := file.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		opts := quietOpts()
		opts.DisableAutoCheckpoint = true
		db, err := Open(context.Background(), s, opts)
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", k, err)
		}
		verifyPrefix(t, db, h)
		if k%10 == 9 {
			// Keep the WAL short so each reopen stays fast.
			if err := db.Checkpoint(context.Background()); err != nil {
				t.Fatalf("kill %d: checkpoint: %v", k, err)
			}
		}
		t2 := time.Now()
		db.Close()
		s.Close()
		if os.Getenv("KV_CRASH_DEBUG") != "" {
			t.Logf("kill %d: start %v child ran %v, verify took %v close %v", k, t0.Sub(tS), t1.Sub(t0), t2.Sub(t1), time.Since(t2))
		}
	}
	t.Logf("%d kills, %d acknowledged commits verified, in %v", kills, totalAcks, time.Since(start).Round(time.Millisecond))
	if totalAcks == 0 {
		t.Fatal("no commit was acknowledged; the test exercised nothing")
	}
}
