package main

import (
	"context"
	"strings"
	"testing"

	"github.com/tqw-dsl/tqw/examples/internal/exampletest"
	"github.com/tqw-dsl/tqw/runtime/store/objstore/storeurl"
	"github.com/tqw-dsl/tqw/runtime/store/queue"
)

// pendingMarkers reopens the store and returns the markers left in it.
func pendingMarkers(t *testing.T, url string) []queue.KVEntry {
	t.Helper()
	ctx := context.Background()
	store, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, store, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m, err := q.KVScan(ctx, pendingPrefix, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReplyWakesTheRun(t *testing.T) {
	url := exampletest.FileStore(t)
	got := exampletest.MustRun(t, run, "--store", url, "--run-id", "r1", "--text", "hola", "--remote-work", "50ms", "--watch-interval", "20ms")
	exampletest.Contains(t, got,
		`[step 0] sending "hola"; reply expected at replies/r1/0`,
		"[remote] wrote the reply to replies/r1/0\n",
		"[watcher] replies/r1/0 arrived; woke remote:r1:0\n",
		`[step 1] reply at replies/r1/0: "HOLA"`,
		`run r1 succeeded: "HOLA"`,
	)
	if m := pendingMarkers(t, url); len(m) != 0 {
		t.Errorf("markers left after the reply: %v", m)
	}
}

func TestNoReplyTimesOut(t *testing.T) {
	url := exampletest.FileStore(t)
	out, err := exampletest.Run(run, "--store", url, "--run-id", "r2", "--timeout", "100ms", "--remote-work", "1h", "--watch-interval", "20ms")
	if err == nil || !strings.Contains(err.Error(), "ended failed: no reply within 100ms") {
		t.Fatalf("run = %v, want a failed run\n%s", err, out)
	}
	if strings.Contains(out, "[watcher]") || strings.Contains(out, "[remote] wrote") {
		t.Errorf("a reply was seen:\n%s", out)
	}
	if m := pendingMarkers(t, url); len(m) != 0 {
		t.Errorf("the timed-out wait left its marker: %v", m)
	}
}
