package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/runstate"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The seal kill test: a child process runs sealKillRuns runs on a file
// store and seals them in small segments, over and over (every other
// child leaves that to Run's seal loop, sealing as runs end); the parent
// SIGKILLs it at random moments, then lets a last child seal everything
// and checks that every run reads back exactly once, with its records,
// and that no segment object is left that no catalog row names.

const (
	sealKillDirEnv    = "TQW_RUNTIME_SEAL_KILL_DIR"
	sealKillFinishEnv = "TQW_RUNTIME_SEAL_KILL_FINISH"
	sealKillKillsEnv  = "TQW_RUNTIME_SEAL_KILLS"
	// sealKillLoopEnv: the child leaves sealing to Run's seal loop.
	sealKillLoopEnv = "TQW_RUNTIME_SEAL_KILL_LOOP"
	sealKillRuns    = 60
)

func TestSealKillChild(t *testing.T) {
	dir := os.Getenv(sealKillDirEnv)
	if dir == "" {
		t.Skip("the seal kill test's child process; runs only under TestSealKill")
	}
	if err := sealKillChild(dir, os.Getenv(sealKillFinishEnv) != "", os.Getenv(sealKillLoopEnv) != ""); err != nil {
		fmt.Fprintln(os.Stderr, "seal kill child:", err)
		os.Exit(3)
	}
}

func sealKillChild(dir string, finish, loopOnly bool) error {
	ctx := context.Background()
	store, err := file.Open(filepath.Join(dir, "store"))
	if err != nil {
		return err
	}
	q, err := queue.Open(ctx, store, crashQueueOptions())
	if err != nil {
		return err
	}
	rt, err := New(q, store, recordingRunner{}, Options{Sealing: &SealOptions{BatchRuns: 7}, Concurrency: 8, Logger: quietLogger(), SweepInterval: time.Hour})
	if err != nil {
		return err
	}
	w := rt.Spawn(ctx)
	fmt.Println("ready")
	for i := range sealKillRuns {
		id := crashRunID(i)
		if _, err := rt.Status(ctx, id); err == nil {
			continue
		} else if !errors.Is(err, ErrRunNotFound) {
			return err
		}
		if _, err := rt.Submit(ctx, RunSpec{RunID: id, Input: []byte(id), Labels: map[string]string{"kill": "test"}}); err != nil {
			return err
		}
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if loopOnly {
			continue // killed while the seal loop seals as runs end
		}
		if _, err := rt.Seal(ctx); err != nil {
			return err
		}
		if !finish {
			continue
		}
		left, err := q.KVScan(ctx, kvSealQ, "", 1)
		if err != nil {
			return err
		}
		done, err := rt.ListRuns(ctx, runstate.ListOptions{States: []runstate.State{runstate.StateSucceeded}, Limit: 1000})
		if err != nil {
			return err
		}
		if len(left) == 0 && len(done) == sealKillRuns {
			break
		}
	}
	if err := w.Shutdown(ctx); err != nil {
		return err
	}
	return q.Close()
}

func TestSealKill(t *testing.T) {
	t.Parallel()
	crashtest.Parent(t, sealKillDirEnv)
	kills := crashtest.Count(t, sealKillKillsEnv, 30)
	dir := t.TempDir()
	rng := crashtest.Rand(t, 14)
	for i := range kills {
		env := []string{sealKillDirEnv + "=" + dir}
		if i%2 == 1 {
			env = append(env, sealKillLoopEnv+"=1")
		}
		c := crashtest.Start(t, crashtest.Command(context.Background(), "^TestSealKillChild$", env...))
		if err := c.WaitReady("ready"); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		if killed, err := c.KillAfter(crashtest.Delay(rng, 300*time.Millisecond)); !killed {
			t.Fatalf("child %d exited on its own: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := crashtest.Command(ctx, "^TestSealKillChild$", sealKillDirEnv+"="+dir, sealKillFinishEnv+"=1").Run(); err != nil {
		t.Fatalf("final child: %v", err)
	}

	store, err := file.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	q, err := queue.Open(ctx, store, crashQueueOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	in := NewArchiveInspector(q, store, SealOptions{})
	runs, err := in.ListRuns(ctx, runstate.ListOptions{Limit: 1000, Labels: map[string]string{"kill": "test"}})
	if err != nil || len(runs) != sealKillRuns {
		t.Fatalf("ListRuns: %d runs, %v; want %d", len(runs), err, sealKillRuns)
	}
	for i, st := range runs {
		id := crashRunID(i)
		if st.RunID != id || st.State != runstate.StateSucceeded || string(st.Result) != "result of "+id {
			t.Fatalf("run %d: %+v", i, st)
		}
		recs, ok, err := in.SealedRecords(ctx, id, "app/hist/"+id+"/")
		if err != nil || !ok || len(recs) != 3 {
			t.Fatalf("records of %s: %d, sealed %v, %v", id, len(recs), ok, err)
		}
	}
	segs, err := q.KVScan(ctx, kvSealedSegs, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(ctx, defaultSealPrefix+"/seg/", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Orphans of a killed pass go at the next process's first pass; the
	// final child made one after the last kill.
	if len(objs) != 2*len(segs) {
		t.Fatalf("%d segment objects for %d catalog rows", len(objs), len(segs))
	}
	t.Logf("%d kills; %d runs in %d segments", kills, sealKillRuns, len(segs))
}
