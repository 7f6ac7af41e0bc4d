package bulk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/internal/crashtest"
	"github.com/tqw-dsl/tqw/internal/queuetest"
	"github.com/tqw-dsl/tqw/runtime"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/file"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// The kill test: a child process (this test binary, re-executed) runs a
// batch on a file store; the parent SIGKILLs it at random moments, restarts
// it, lets a last child finish, and checks the batch's totals and cost
// sums from the store. Phases append to a log with fsync, which also shows
// how often they re-ran.

const (
	killDirEnv   = "TQW_BULK_KILL_DIR" // the test's folder; set only in the child
	killItemsEnv = "TQW_BULK_KILL_ITEMS"
	killKillsEnv = "TQW_BULK_KILL_KILLS"
)

func TestMain(m *testing.M) {
	crashtest.IfChild(killDirEnv, func(dir string) error {
		n, err := strconv.Atoi(os.Getenv(killItemsEnv))
		if err != nil {
			return fmt.Errorf("%s: %w", killItemsEnv, err)
		}
		return killChild(dir, n)
	})
	os.Exit(m.Run())
}

func killItems(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		switch {
		case i%11 == 5:
			out[i] = []byte(fmt.Sprintf("bad-%03d", i))
		case i%7 == 2:
			out[i] = []byte(fmt.Sprintf("flaky-%03d", i))
		default:
			out[i] = []byte(fmt.Sprintf("item-%03d", i))
		}
	}
	return out
}

func killPipeline(dir string) Pipeline {
	log := filepath.Join(dir, "phases.log")
	return Pipeline{Phases: []Phase{
		{Name: "measure", Run: func(_ context.Context, pc *PhaseContext, in []byte) ([]byte, error) {
			if err := crashtest.AppendLine(log, "measure "+pc.RunID); err != nil {
				return nil, err
			}
			pc.AddCost("tokens", int64(len(in)))
			return in, nil
		}},
		{Name: "price", Run: func(_ context.Context, pc *PhaseContext, in []byte) ([]byte, error) {
			s := string(in)
			if strings.HasPrefix(s, "bad") {
				return nil, runtime.Permanent(fmt.Errorf("cannot price %s", s))
			}
			if strings.HasPrefix(s, "flaky") && pc.Attempt == 1 {
				return nil, errors.New("transient pricing error")
			}
			if err := crashtest.AppendLine(log, "price "+pc.RunID); err != nil {
				return nil, err
			}
			pc.AddCost("micro_usd", 7*int64(len(in)))
			return []byte(strconv.Quote(strings.ToUpper(s))), nil
		}},
	}}
}

func killQueueOptions() queue.Options {
	return queue.Options{Logger: queuetest.Quiet(), ReapInterval: 100 * time.Millisecond,
		DefaultConfig: queue.QueueConfig{BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, LeaseDuration: 10 * time.Second}}
}

func killChild(dir string, n int) error {
	ctx := context.Background()
	store, err := file.Open(filepath.Join(dir, "store"))
	if err != nil {
		return err
	}
	defer store.Close()
	q, err := queue.Open(ctx, store, killQueueOptions())
	if err != nil {
		return err
	}
	// A kill during a claim uses up an attempt (recovery counts it), so
	// allow more attempts than kills: the test is about totals, not about
	// attempt exhaustion.
	r, err := New(q, store, killPipeline(dir), WithConcurrency(8), WithMaxAttempts(1000), WithLogger(queuetest.Quiet()))
	if err != nil {
		return err
	}
	w := r.Spawn(ctx)
	fmt.Println("ready")
	if _, err := r.Submit(ctx, "kb", killItems(n), Threshold{}); err != nil {
		return err
	}
	p, err := r.Wait(ctx, "kb")
	if err != nil {
		return err
	}
	b, _ := json.Marshal(p)
	fmt.Println("done " + string(b))
	if err := w.Shutdown(ctx); err != nil {
		return err
	}
	return q.Close()
}

func TestBulkResumeAfterSIGKILL(t *testing.T) {
	crashtest.Parent(t, killDirEnv)
	n, kills := crashtest.Count(t, killItemsEnv, 150), crashtest.Count(t, killKillsEnv, 8)
	dir := t.TempDir()
	rng := crashtest.Rand(t, 2)
	child := func(ctx context.Context) *exec.Cmd {
		return crashtest.Command(ctx, "^$", killDirEnv+"="+dir, killItemsEnv+"="+strconv.Itoa(n))
	}
	killed, finishedEarly := 0, false
	for i := 0; i < kills && !finishedEarly; i++ {
		c := crashtest.Start(t, child(context.Background()))
		if err := c.WaitReady("ready"); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		switch ok, err := c.KillAfter(crashtest.Delay(rng, 250*time.Millisecond)); {
		case ok:
			killed++
		case err != nil:
			t.Fatalf("child %d failed: %v", i, err)
		default:
			finishedEarly = true // the batch finished before the kill
		}
	}
	// The last child finishes the batch (and re-submits what was missing).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outb, err := child(ctx).Output()
	if err != nil {
		t.Fatalf("final child: %v", err)
	}
	if !strings.Contains(string(outb), "done ") {
		t.Fatalf("final child printed %q", outb)
	}

	// Expected totals.
	var want Progress
	want.Costs = map[string]int64{}
	for _, it := range killItems(n) {
		want.Costs["tokens"] += int64(len(it))
		if strings.HasPrefix(string(it), "bad") {
			want.Failed++
		} else {
			want.Succeeded++
			want.Costs["micro_usd"] += 7 * int64(len(it))
		}
	}
	store, err := file.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	q, err := queue.Open(context.Background(), store, killQueueOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	r, err := New(q, store, killPipeline(dir), WithLogger(queuetest.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Progress(context.Background(), "kb")
	if err != nil {
		t.Fatal(err)
	}
	if p.Total != n || p.Succeeded != want.Succeeded || p.Failed != want.Failed || p.Cancelled != 0 || !p.Done() || !sameCosts(p.Costs, want.Costs) {
		t.Fatalf("after %d kills: progress %+v, want %d succeeded, %d failed, costs %v", killed, p, want.Succeeded, want.Failed, want.Costs)
	}
	// One measure per item and one price per success, plus re-runs.
	reruns := len(crashtest.ReadLines(t, filepath.Join(dir, "phases.log"))) - n - want.Succeeded
	if reruns < 0 {
		t.Fatalf("phases.log has fewer lines than phases completed (%d short)", -reruns)
	}
	t.Logf("%d kills; %d items, exact totals; %d phase executions re-ran after a kill and were counted once", killed, n, reruns)
}
