package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqw-dsl/tqw/runtime/store/objstore"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/counting"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/mem"
)

// runLines runs tqw-bench with args, fails t unless it exits 0, and
// returns its JSON lines.
func runLines(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("tqw-bench %v: exit %d: %s", args, code, errb.String())
	}
	var lines []map[string]any
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, r)
	}
	return lines
}

func TestMeasureRunsExactlyOps(t *testing.T) {
	cfg := &config{ops: 57}
	store := counting.New(mem.New())
	var calls atomic.Int64
	seen := make([]atomic.Bool, cfg.ops)
	m, err := measure(context.Background(), cfg, 4, store, nil, timed(func(ctx context.Context, _ int, n int64) error {
		calls.Add(1)
		if seen[n].Swap(true) {
			t.Errorf("operation %d ran twice", n)
		}
		_, err := store.Put(ctx, "k", []byte("v"), objstore.PutOptions{})
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	if m.ops != 57 || calls.Load() != 57 || m.lats.Len() != 57 || m.counts.Puts != 57 {
		t.Fatalf("ops %d, calls %d, latencies %d, puts %d; want 57 each", m.ops, calls.Load(), m.lats.Len(), m.counts.Puts)
	}
	r := m.result("t", 4, m.ops, nil)
	if r.PutsPerOp != 1 || r.GetsPerOp != 0 || r.Concurrency != 4 || r.Ops != 57 || r.OpsPerSec <= 0 {
		t.Fatalf("result %+v", r)
	}
}

func TestMeasureStopsAtStopFunc(t *testing.T) {
	cfg := &config{ops: 1000}
	stop := func(n int64, _ time.Time) bool { return n >= 10 }
	m, err := measure(context.Background(), cfg, 3, nil, stop, timed(func(context.Context, int, int64) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if m.ops != 10 {
		t.Fatalf("ops %d, want 10", m.ops)
	}
}

func TestMeasureFirstErrorCancelsOthers(t *testing.T) {
	cfg := &config{duration: time.Hour}
	boom := errors.New("boom")
	_, err := measure(context.Background(), cfg, 4, nil, nil, timed(func(ctx context.Context, w int, _ int64) error {
		if w == 0 {
			return boom
		}
		<-ctx.Done() // the others only end when the failure cancels them
		return ctx.Err()
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
}

func TestMeasureReturnsCallerCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := &config{duration: time.Hour}
	_, err := measure(ctx, cfg, 2, nil, nil, timed(func(ctx context.Context, w int, _ int64) error {
		if w == 0 {
			cancel()
		}
		<-ctx.Done()
		return ctx.Err()
	}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestNewResultWithoutOps(t *testing.T) {
	var l Latencies
	r := newResult("t", 1, 0, 1, &l, counting.Counts{Puts: 3}, nil)
	if r.PutsPerOp != 0 || r.P50Ms != 0 || r.OpsPerSec != 0 {
		t.Fatalf("result %+v: want zero rates without ops", r)
	}
	r = oneOp("t", 2, 250*time.Millisecond, counting.Counts{Gets: 3, Lists: 2}, nil)
	if r.Ops != 1 || r.P50Ms != 250 || r.P99Ms != 250 || r.GetsPerOp != 3 || r.ListsPerOp != 2 || r.Seconds != 0.25 || r.OpsPerSec != 4 {
		t.Fatalf("one-op result %+v", r)
	}
}

func TestCleanPrefixDeletesOnlyThePrefix(t *testing.T) {
	ctx := context.Background()
	s := mem.New()
	for _, k := range []string{"a/1", "a/2", "ab/1", "b/1"} {
		if _, err := s.Put(ctx, k, nil, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2500 { // more than one List page
		if _, err := s.Put(ctx, fmt.Sprintf("a/x/%05d", i), nil, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cleanPrefix(ctx, s, "a/"); err != nil {
		t.Fatal(err)
	}
	l, err := s.List(ctx, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 2 || l[0].Key != "ab/1" || l[1].Key != "b/1" {
		t.Fatalf("left %v, want ab/1 and b/1", l)
	}
}
